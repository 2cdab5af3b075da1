"""The Chat protocol on Mattermost: REST v4 with httpx, the event stream over
the v4 websocket with `websockets`.

Why not mattermostdriver: its websocket client builds its TLS context with
`ssl.create_default_context(purpose=ssl.Purpose.CLIENT_AUTH)` — a
*server*-side context — which Python 3.10+ refuses for client connections,
so `wss://` fails on our Python 3.11 (upstream issue 115, unfixed; the
package has had no release since 2021). Its REST half is synchronous
`requests` and its websocket loop has no reconnect. We need a handful of
REST calls, which httpx does in a few lines, and a robust stream, which the
maintained `websockets` package gives us.

Design:

* **One durable message log** (`messages.jsonl`, the same shape as the
  embedded chat's) gives the `seq` cursor routers read with
  `messages_since`; a post is logged once, keyed by its Mattermost post id,
  whichever path saw it first: our own REST call (post/dm return at once)
  or the websocket.
* **The stream.** Mattermost only sends a user the `posted` events of
  channels that user is in, and nobody (not even an admin) sees other
  people's DMs. So one websocket per worker, authenticated with that
  worker's token, watches its DMs (channel type D); the run's own account
  watches the task channel. DMs are what makes the stream matter: a DM
  from anyone (a peer, a person in the Mattermost UI) is in the log within
  milliseconds, and the routers deliver it mid-turn (high priority).
* **Reconnect.** A dropped socket reconnects with exponential backoff
  (0.5 s doubling to 30 s, with jitter) and, once re-authenticated, catches
  up over REST (`GET /channels/{id}/posts?since=`) on the channels it
  watches, so a post made while it was down is not lost. The log's
  post-id dedup makes the overlap harmless.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import threading
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

import httpx

from agensh_ray.errors import ChatError, MattermostAPIError
from agensh_ray.models import ChatMessage
from agensh_ray.services.chat.log import LoggedChat, MessageLog
from agensh_ray.services.chat.rules import check_dm, check_text

log = logging.getLogger(__name__)

API = "/api/v4"
BACKOFF_START_S = 0.5
BACKOFF_MAX_S = 30.0


class MattermostClient:
    def __init__(self, url: str, timeout: float = 30.0):
        self.url = url.rstrip("/")
        self.http = httpx.Client(base_url=self.url + API, timeout=timeout)

    def call(self, method: str, path: str, token: str | None, json_body: Any = None, params: dict | None = None,
             ok: tuple[int, ...] = ()) -> Any:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            resp = self.http.request(method, path, json=json_body, params=params, headers=headers)
        except httpx.HTTPError as exc:
            raise ChatError(f"cannot reach Mattermost at {self.url}: {exc}. Try again in a moment.") from None
        if resp.status_code >= 400:
            if resp.status_code in ok:
                return None
            try:
                message = resp.json().get("message", "")
            except ValueError:
                message = resp.text[:300]
            raise MattermostAPIError(resp.status_code, message, method, path)
        return resp.json() if resp.content else None

    def close(self) -> None:
        self.http.close()


class MattermostChat(LoggedChat):
    """See the module docstring. Build it with `from_secrets`; `start()` opens the stream."""

    def __init__(self, url: str, team_id: str, channel_id: str, users: dict[str, dict], state_dir: Path,
                 listener: str = "admin", stream: bool = True):
        self.client = MattermostClient(url)
        self.url = self.client.url
        self.team_id, self.channel_id = team_id, channel_id
        self.users = users
        """name -> {id, username, token}; `listener` (the run's account) watches the task channel."""
        self.listener = listener if listener in users else next(iter(users))
        self.by_id = {u["id"]: name for name, u in users.items()}
        self.state_dir = Path(state_dir)
        self.log = MessageLog(self.state_dir / "messages.jsonl")
        self._dm_channels: dict[frozenset, str] = {}
        self._channel_kind: dict[str, tuple[str, str | None]] = {channel_id: ("O", None)}
        self._names: dict[str, str] = {}
        self._lock = threading.Lock()
        self.stream = stream
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop: asyncio.Event | None = None
        self.connected: dict[str, int] = {}
        """user -> how many times its socket authenticated (tests watch reconnects here)."""
        self._connected_cv = threading.Condition()

    @classmethod
    def from_secrets(cls, secrets_file: Path, state_dir: Path, url: str | None = None, **kw) -> "MattermostChat":
        data = json.loads(Path(secrets_file).read_text())
        m = data.get("mattermost")
        if not m:
            raise ChatError(f"{secrets_file} has no mattermost section: run python -m agensh_ray.bootstrap "
                            "with --mattermost-url")
        return cls(url or m["url"], m["team_id"], m["channel_id"], m["users"], state_dir, **kw)

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> None:
        if not self.stream or self._thread is not None:
            return
        import importlib.util

        if importlib.util.find_spec("websockets") is None:
            raise ChatError("the Mattermost event stream needs the `websockets` package: pip install websockets")
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            self._stop = asyncio.Event()
            ready.set()
            try:
                loop.run_until_complete(self._stream_all())
            finally:
                loop.close()

        self._thread = threading.Thread(target=run, name="mattermost-stream", daemon=True)
        self._thread.start()
        ready.wait(5)

    def close(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        self._loop = None
        self.log.close()
        self.client.close()

    def add_listener(self, cb: Callable[[ChatMessage], None]) -> None:
        self.log.listeners.append(cb)

    def wait_connected(self, user: str, times: int = 1, timeout: float = 10.0) -> bool:
        with self._connected_cv:
            return self._connected_cv.wait_for(lambda: self.connected.get(user, 0) >= times, timeout)

    # -------------------------------------------------------------------- users

    def add_user(self, name: str) -> None:
        if name not in self.users:
            known = ", ".join(sorted(self.users)[:20])
            raise ChatError(f"unknown user {name!r} on Mattermost (the bootstrap created: {known}); "
                            "rerun python -m agensh_ray.bootstrap with enough --workers")

    def _name_of(self, user_id: str) -> str:
        name = self.by_id.get(user_id) or self._names.get(user_id)
        if name:
            return name
        u = self.client.call("GET", f"/users/{user_id}", self.users[self.listener]["token"], ok=(404,))
        name = (u or {}).get("username") or user_id
        self._names[user_id] = name
        return name

    # --------------------------------------------------------------------- send

    def _token(self, name: str) -> str:
        self.add_user(name)
        return self.users[name]["token"]

    def post(self, sender: str, text: str) -> ChatMessage:
        text = check_text(text)
        p = self.client.call("POST", "/posts", self._token(sender), {"channel_id": self.channel_id, "message": text})
        return self._ingest(p)

    def dm(self, sender: str, to: str, text: str) -> ChatMessage:
        check_dm(sender, to, self.users)
        text = check_text(text)
        channel = self._dm_channel(sender, to)
        p = self.client.call("POST", "/posts", self._token(sender), {"channel_id": channel, "message": text})
        return self._ingest(p)

    def _dm_channel(self, a: str, b: str) -> str:
        key = frozenset((a, b))
        with self._lock:
            cid = self._dm_channels.get(key)
        if cid is None:
            ids = [self.users[a]["id"], self.users[b]["id"]]
            ch = self.client.call("POST", "/channels/direct", self._token(a), ids)
            cid = ch["id"]
            with self._lock:
                self._dm_channels[key] = cid
                self._channel_kind[cid] = ("D", ch.get("name"))
        return cid

    # ----------------------------------------------------------------- ingest

    def _ingest(self, post: dict, channel_type: str | None = None, channel_name: str | None = None) -> ChatMessage | None:
        """Log one Mattermost post if it is on the task channel or a DM between known users."""
        if post.get("type") or post.get("delete_at"):
            return None  # system messages (joins, header changes) and deletions
        cid = post.get("channel_id")
        kind = self._channel_kind.get(cid)
        if kind is None and channel_type:
            kind = (channel_type, channel_name)
            self._channel_kind[cid] = kind
        if kind is None:
            return None
        sender = self._name_of(post.get("user_id", ""))
        to = None
        if cid != self.channel_id:
            if kind[0] != "D" or not kind[1]:
                return None
            ids = kind[1].split("__")
            other = [i for i in ids if i != post.get("user_id")] or ids[:1]
            to = self._name_of(other[0])
        create_at = int(post.get("create_at") or 0)
        msg, _ = self.log.append(sender, to, post.get("message") or "", ts=create_at * 1000, key=post["id"],
                                 create_at=create_at)
        return msg

    # ------------------------------------------------------------------ reads (the rest: LoggedChat)

    def last_create_at(self) -> int:
        """Mattermost's timestamp (ms) of the newest logged post: where a reconnecting socket catches up from."""
        return max((x.get("create_at", 0) for x in self.log.extra.values()), default=0)

    # ----------------------------------------------------------------- stream

    def _ws_url(self) -> str:
        parts = urlsplit(self.url)
        scheme = "wss" if parts.scheme == "https" else "ws"
        return f"{scheme}://{parts.netloc}{parts.path}{API}/websocket"

    async def _stream_all(self) -> None:
        tasks = [asyncio.create_task(self._stream(name), name=f"mm-ws-{name}") for name in self.users]
        await self._stop.wait()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _stream(self, name: str) -> None:
        """One user's socket, forever: connect, authenticate, catch up, read; back off on failure."""
        import websockets

        token = self.users[name]["token"]
        delay = BACKOFF_START_S
        while not self._stop.is_set():
            try:
                async with websockets.connect(self._ws_url(), open_timeout=10, ping_interval=20,
                                              max_size=8 * 1024 * 1024) as ws:
                    await ws.send(json.dumps({"seq": 1, "action": "authentication_challenge",
                                              "data": {"token": token}}))
                    authed = False
                    async for raw in ws:
                        msg = json.loads(raw)
                        if not authed:
                            if msg.get("seq_reply") == 1:
                                if msg.get("status") != "OK":
                                    raise ChatError(f"websocket authentication failed for {name}")
                                authed = True
                                delay = BACKOFF_START_S
                                await asyncio.to_thread(self._catch_up, name)
                                with self._connected_cv:
                                    self.connected[name] = self.connected.get(name, 0) + 1
                                    self._connected_cv.notify_all()
                            continue
                        if msg.get("event") == "posted":
                            await asyncio.to_thread(self._on_posted, name, msg.get("data") or {})
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.info("mattermost socket of %s dropped (%s); reconnecting in %.1fs", name, exc, delay)
            if self._stop.is_set():
                return
            try:
                await asyncio.wait_for(self._stop.wait(), timeout=delay * random.uniform(0.8, 1.2))
            except asyncio.TimeoutError:
                pass
            delay = min(delay * 2, BACKOFF_MAX_S)

    def _on_posted(self, user: str, data: dict) -> None:
        try:
            post = json.loads(data.get("post") or "{}")
        except ValueError:
            return
        ctype = data.get("channel_type")
        if ctype == "D" or (user == self.listener and post.get("channel_id") == self.channel_id):
            self._ingest(post, ctype, data.get("channel_name"))

    def _catch_up(self, user: str) -> None:
        """After (re)connecting: fetch what this user's channels got while the socket was down."""
        token = self.users[user]["token"]
        since = max(0, self.last_create_at() - 5_000)
        try:
            channels = self.client.call("GET", f"/users/{self.users[user]['id']}/teams/{self.team_id}/channels",
                                        token) or []
            for ch in channels:
                if ch.get("type") == "D" or (user == self.listener and ch["id"] == self.channel_id):
                    self._channel_kind.setdefault(ch["id"], (ch.get("type"), ch.get("name")))
                    got = self.client.call("GET", f"/channels/{ch['id']}/posts", token, params={"since": since})
                    posts = (got or {}).get("posts") or {}
                    for p in sorted(posts.values(), key=lambda p: p.get("create_at", 0)):
                        self._ingest(p, ch.get("type"), ch.get("name"))
        except ChatError as exc:
            log.warning("catching up the channels of %s failed: %s", user, exc)
