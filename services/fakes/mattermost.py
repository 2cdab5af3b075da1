"""A fake Mattermost (REST API v4 and the v4 websocket) on loopback, for
tests of the Mattermost chat adapter and the bootstrap. No Mattermost can
run here.

What it stands in for: users (created by an admin), personal access tokens
(`Authorization: Bearer`), teams, open channels, direct channels (named
`<id>__<id>`, ids sorted, one per pair), channel and team membership,
posts, `GET /channels/{id}/posts?since=` and the channels of a user in a
team (DMs included). Posting needs channel membership, as in Mattermost.
Every request and response body is checked against the official OpenAPI
file (`agensh_ray.services.fakes.contract`).

The websocket follows Mattermost's protocol: the client sends an
`authentication_challenge` with its token and gets `{"status": "OK",
"seq_reply": 1}`, then a `hello` event, then `posted` events (the post as a
JSON string in `data.post`, as Mattermost sends it) for the channels it is a
member of, each with an increasing `seq`. `drop_websockets()` closes every
socket server-side, to test reconnects.

Not modelled: sessions and passwords for login, roles and permissions
beyond admin/member, threads, reactions, files, rate limits.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import socket
import string
import threading
import time
from typing import Any
from urllib.parse import parse_qs

from agensh_ray.services.fakes.contract import ContractChecker

VERSION = "9.11.0"
_ALPHABET = string.ascii_lowercase + string.digits


def new_id() -> str:
    return "".join(secrets.choice(_ALPHABET) for _ in range(26))


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class AppError(Exception):
    def __init__(self, status: int, err_id: str, message: str):
        self.status, self.err_id, self.message = status, err_id, message


class FakeMattermost:
    def __init__(self, host: str = "127.0.0.1", port: int = 0, contract: bool = True):
        self.host, self._port = host, port
        self.contract = ContractChecker("mattermost") if contract else None
        self.users: dict[str, dict] = {}
        self.tokens: dict[str, str] = {}
        self.teams: dict[str, dict] = {}
        self.team_members: dict[str, set[str]] = {}
        self.channels: dict[str, dict] = {}
        self.channel_members: dict[str, set[str]] = {}
        self.posts: dict[str, dict] = {}
        self.requests: list[tuple[str, str, int]] = []
        self._sockets: dict[int, tuple[str, Any, asyncio.Queue]] = {}
        self._lock = threading.RLock()
        admin = self._new_user("sysadmin", "sysadmin@fake.invalid", "system_admin system_user")
        self.admin_token = self._new_token(admin["id"])
        self._server = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> "FakeMattermost":
        import uvicorn
        from starlette.applications import Starlette
        from starlette.routing import Route, WebSocketRoute

        app = Starlette(routes=[
            WebSocketRoute("/api/v4/websocket", self._websocket),
            Route("/api/v4/{path:path}", self._http, methods=["GET", "POST", "PUT", "DELETE", "PATCH"]),
        ])
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self._port))
        self._port = sock.getsockname()[1]
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                                                     ws="websockets-sansio"))
        started = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            started.set()
            loop.run_until_complete(self._server.serve(sockets=[sock]))
            loop.close()

        self._thread = threading.Thread(target=run, name="fake-mattermost", daemon=True)
        self._thread.start()
        started.wait(5)
        deadline = time.monotonic() + 10
        while not self._server.started and time.monotonic() < deadline:
            time.sleep(0.01)
        return self

    def close(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
            if self._loop is not None:
                self._loop.call_soon_threadsafe(self._close_sockets)
        if self._thread is not None:
            self._thread.join(timeout=10)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self._port}"

    @property
    def violations(self) -> list:
        return list(self.contract.violations) if self.contract else []

    def drop_websockets(self) -> None:
        """Close every websocket from the server side (a restart, a proxy timeout)."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._close_sockets)

    def _close_sockets(self) -> None:
        for _, _, q in list(self._sockets.values()):
            q.put_nowait(None)

    def socket_count(self) -> int:
        return len(self._sockets)

    # ------------------------------------------------------------------ objects

    def _new_user(self, username: str, email: str, roles: str = "system_user", password: str = "",
                  nickname: str = "") -> dict:
        t = now_ms()
        u = {"id": new_id(), "create_at": t, "update_at": t, "delete_at": 0, "username": username,
             "first_name": "", "last_name": "", "nickname": nickname, "email": email, "email_verified": True,
             "auth_service": "", "roles": roles, "locale": "en", "props": {}, "last_password_update": t,
             "last_picture_update": 0, "failed_attempts": 0, "mfa_active": False,
             "notify_props": {"email": "true", "push": "mention", "desktop": "mention", "desktop_sound": "true",
                              "mention_keys": username, "channel": "true", "first_name": "false"},
             "_password": password}
        # No `timezone`: the server sends useAutomaticTimezone as the string "true" where the spec says
        # boolean; the field is optional, so the fake leaves it out rather than contradict the spec.
        self.users[u["id"]] = u
        return u

    def _new_token(self, user_id: str) -> str:
        token = new_id()
        self.tokens[token] = user_id
        return token

    @staticmethod
    def _user_json(u: dict) -> dict:
        return {k: v for k, v in u.items() if not k.startswith("_")}

    def _channel_json(self, c: dict) -> dict:
        return dict(c)

    def _member_json(self, cid: str, uid: str) -> dict:
        return {"channel_id": cid, "user_id": uid, "roles": "channel_user", "last_viewed_at": 0, "msg_count": 0,
                "mention_count": 0, "last_update_at": now_ms(),
                "notify_props": {"desktop": "default", "email": "default", "mark_unread": "all",
                                 "push": "default", "ignore_channel_mentions": "default"}}

    # --------------------------------------------------------------------- HTTP

    async def _http(self, request):
        from starlette.responses import JSONResponse, Response

        path = request.url.path
        query = parse_qs(request.url.query, keep_blank_values=True)
        body = await request.body()
        method = request.method
        op = self.contract.check_request(method, path, query, body) if self.contract else None
        try:
            me = self._auth(request.headers.get("authorization", ""))
            data = json.loads(body) if body else None
            status, out = self._route(method, path[len("/api/v4"):], {k: v[-1] for k, v in query.items()}, data, me)
        except AppError as exc:
            status, out = exc.status, {"id": exc.err_id, "message": exc.message, "detailed_error": "",
                                       "request_id": new_id(), "status_code": exc.status}
        except (KeyError, ValueError, TypeError) as exc:
            status, out = 400, {"id": "api.context.invalid_body_param.app_error", "message": f"invalid body: {exc}",
                                "detailed_error": "", "request_id": new_id(), "status_code": 400}
        if self.contract and op is not None:
            self.contract.check_response(op, status, out)
        self.requests.append((method, path, status))
        if out is None:
            return Response(status_code=status)
        return JSONResponse(out, status_code=status)

    def _auth(self, header: str) -> str | None:
        scheme, _, value = header.partition(" ")
        if scheme.lower() in ("bearer", "token") and value:
            uid = self.tokens.get(value.strip())
            if uid is None:
                raise AppError(401, "api.context.session_expired.app_error", "Invalid or expired session, please login again.")
            return uid
        return None

    def _is_admin(self, uid: str) -> bool:
        return "system_admin" in self.users[uid]["roles"]

    def _user_ref(self, ref: str, me: str) -> dict:
        uid = me if ref == "me" else ref
        u = self.users.get(uid)
        if u is None:
            raise AppError(404, "app.user.missing_account.const", "Unable to find the user.")
        return u

    def _route(self, method: str, path: str, q: dict, data: Any, me: str | None) -> tuple[int, Any]:
        seg = [s for s in path.split("/") if s]
        if seg == ["system", "ping"]:
            return 200, {"status": "OK"}
        if me is None:
            raise AppError(401, "api.context.session_expired.app_error", "Invalid or expired session, please login again.")
        with self._lock:
            if seg[:1] == ["users"]:
                return self._users(method, seg[1:], data, me)
            if seg[:1] == ["teams"]:
                return self._teams(method, seg[1:], data, me)
            if seg[:1] == ["channels"]:
                return self._channels(method, seg[1:], q, data, me)
            if seg == ["posts"] and method == "POST":
                return self._create_post(data, me)
        raise AppError(404, "api.context.404.app_error", "Sorry, we could not find the page.")

    def _users(self, method: str, rest: list[str], data: Any, me: str) -> tuple[int, Any]:
        if not rest and method == "POST":
            if not self._is_admin(me):
                raise AppError(403, "api.context.permissions.app_error", "You do not have the appropriate permissions.")
            if any(u["username"] == data["username"] for u in self.users.values()):
                raise AppError(400, "app.user.save.username_exists.app_error",
                               "An account with that username already exists.")
            if not data.get("password"):
                raise AppError(400, "model.user.is_valid.pwd.app_error", "Your password must contain at least 5 characters.")
            u = self._new_user(data["username"], data["email"], password=data["password"],
                               nickname=data.get("nickname", ""))
            return 201, self._user_json(u)
        if rest[:1] == ["username"] and len(rest) == 2 and method == "GET":
            for u in self.users.values():
                if u["username"] == rest[1]:
                    return 200, self._user_json(u)
            raise AppError(404, "app.user.missing_account.const", "Unable to find the user.")
        if len(rest) == 1 and method == "GET":
            return 200, self._user_json(self._user_ref(rest[0], me))
        if len(rest) == 2 and rest[1] == "tokens" and method == "POST":
            u = self._user_ref(rest[0], me)
            if u["id"] != me and not self._is_admin(me):
                raise AppError(403, "api.context.permissions.app_error", "You do not have the appropriate permissions.")
            token = self._new_token(u["id"])
            return 201, {"id": new_id(), "token": token, "user_id": u["id"], "description": data["description"]}
        if len(rest) == 4 and rest[1] == "teams" and rest[3] == "channels" and method == "GET":
            u = self._user_ref(rest[0], me)
            if u["id"] != me and not self._is_admin(me):
                raise AppError(403, "api.context.permissions.app_error", "You do not have the appropriate permissions.")
            out = [self._channel_json(c) for cid, c in self.channels.items()
                   if u["id"] in self.channel_members[cid] and (c["team_id"] in (rest[2], ""))]
            return 200, out
        raise AppError(404, "api.context.404.app_error", "Sorry, we could not find the page.")

    def _teams(self, method: str, rest: list[str], data: Any, me: str) -> tuple[int, Any]:
        if not rest and method == "POST":
            if any(t["name"] == data["name"] for t in self.teams.values()):
                raise AppError(400, "app.team.save.existing.app_error", "A team with that name already exists")
            t = now_ms()
            team = {"id": new_id(), "create_at": t, "update_at": t, "delete_at": 0, "display_name": data["display_name"],
                    "name": data["name"], "description": "", "email": "", "type": data["type"], "allowed_domains": "",
                    "invite_id": new_id(), "allow_open_invite": data["type"] == "O"}
            self.teams[team["id"]] = team
            self.team_members[team["id"]] = {me}
            return 201, team
        if rest[:1] == ["name"] and len(rest) == 2 and method == "GET":
            for t in self.teams.values():
                if t["name"] == rest[1]:
                    return 200, t
            raise AppError(404, "app.team.get_by_name.missing.app_error", "Unable to find the existing team")
        team = self.teams.get(rest[0]) if rest else None
        if team is None:
            raise AppError(404, "app.team.get.find.app_error", "Unable to find the existing team")
        if rest[1:] == ["members"] and method == "POST":
            uid = data["user_id"]
            self._user_ref(uid, me)
            self.team_members[team["id"]].add(uid)
            return 201, {"team_id": team["id"], "user_id": uid, "roles": "team_user", "delete_at": 0,
                         "scheme_user": True, "scheme_admin": False, "explicit_roles": ""}
        if len(rest) == 4 and rest[1:3] == ["channels", "name"] and method == "GET":
            for c in self.channels.values():
                if c["team_id"] == team["id"] and c["name"] == rest[3]:
                    return 200, self._channel_json(c)
            raise AppError(404, "app.channel.get_by_name.missing.app_error", "Channel does not exist.")
        raise AppError(404, "api.context.404.app_error", "Sorry, we could not find the page.")

    def _new_channel(self, team_id: str, name: str, display: str, ctype: str, creator: str, purpose: str = "") -> dict:
        t = now_ms()
        c = {"id": new_id(), "create_at": t, "update_at": t, "delete_at": 0, "team_id": team_id, "type": ctype,
             "display_name": display, "name": name, "header": "", "purpose": purpose, "last_post_at": 0,
             "total_msg_count": 0, "extra_update_at": 0, "creator_id": creator}
        self.channels[c["id"]] = c
        self.channel_members[c["id"]] = set()
        return c

    def _channels(self, method: str, rest: list[str], q: dict, data: Any, me: str) -> tuple[int, Any]:
        if not rest and method == "POST":
            if data["team_id"] not in self.teams:
                raise AppError(400, "api.channel.create_channel.team.app_error", "Invalid team")
            if any(c["team_id"] == data["team_id"] and c["name"] == data["name"] for c in self.channels.values()):
                raise AppError(400, "store.sql_channel.save_channel.exists.app_error",
                               "A channel with that name already exists on the same team")
            c = self._new_channel(data["team_id"], data["name"], data["display_name"], data["type"], me,
                                  data.get("purpose", ""))
            self.channel_members[c["id"]].add(me)
            return 201, self._channel_json(c)
        if rest == ["direct"] and method == "POST":
            if len(data) != 2 or any(uid not in self.users for uid in data):
                raise AppError(400, "api.channel.create_direct_channel.invalid_user.app_error", "Invalid user ID")
            if me not in data and not self._is_admin(me):
                raise AppError(403, "api.context.permissions.app_error", "You do not have the appropriate permissions.")
            name = "__".join(sorted(data))
            for c in self.channels.values():
                if c["type"] == "D" and c["name"] == name:
                    return 201, self._channel_json(c)
            c = self._new_channel("", name, "", "D", me)
            self.channel_members[c["id"]].update(data)
            return 201, self._channel_json(c)
        c = self.channels.get(rest[0]) if rest else None
        if c is None:
            raise AppError(404, "app.channel.get.existing.app_error", "Unable to find the existing channel.")
        if rest[1:] == ["members"] and method == "POST":
            uid = data["user_id"]
            self._user_ref(uid, me)
            if c["team_id"] and uid not in self.team_members.get(c["team_id"], set()):
                raise AppError(403, "api.channel.add_members.user_denied", "User is not a member of the team.")
            self.channel_members[c["id"]].add(uid)
            return 201, self._member_json(c["id"], uid)
        if rest[1:] == ["posts"] and method == "GET":
            if me not in self.channel_members[c["id"]] and not self._is_admin(me):
                raise AppError(403, "api.context.permissions.app_error", "You do not have the appropriate permissions.")
            since = int(q.get("since", 0))
            posts = sorted((p for p in self.posts.values() if p["channel_id"] == c["id"] and
                            (p["create_at"] > since or p["update_at"] > since)), key=lambda p: p["create_at"],
                           reverse=True)
            return 200, {"order": [p["id"] for p in posts], "posts": {p["id"]: p for p in posts},
                         "next_post_id": "", "prev_post_id": "", "has_next": False}
        raise AppError(404, "api.context.404.app_error", "Sorry, we could not find the page.")

    def _create_post(self, data: dict, me: str) -> tuple[int, Any]:
        c = self.channels.get(data["channel_id"])
        if c is None or me not in self.channel_members[c["id"]]:
            raise AppError(403, "api.context.permissions.app_error", "You do not have the appropriate permissions.")
        if not data.get("message", "").strip():
            raise AppError(400, "model.post.is_valid.msg.app_error", "Invalid message")
        t = max(now_ms(), max((p["create_at"] + 1 for p in self.posts.values()), default=0))
        p = {"id": new_id(), "create_at": t, "update_at": t, "edit_at": 0, "delete_at": 0, "is_pinned": False,
             "user_id": me, "channel_id": c["id"], "root_id": data.get("root_id", ""), "original_id": "",
             "message": data["message"], "type": "", "props": {}, "hashtags": "", "pending_post_id": "",
             "reply_count": 0, "metadata": {}}
        self.posts[p["id"]] = p
        c["last_post_at"] = t
        c["total_msg_count"] += 1
        self._broadcast(c, p)
        return 201, p

    # ---------------------------------------------------------------- websocket

    def _broadcast(self, c: dict, p: dict) -> None:
        sender = self.users[p["user_id"]]
        data = {"channel_display_name": c["display_name"] or f"@{sender['username']}", "channel_name": c["name"],
                "channel_type": c["type"], "post": json.dumps(p), "sender_name": f"@{sender['username']}",
                "set_online": True, "team_id": c["team_id"]}
        if self.contract:
            self.contract.check_definition("#/components/schemas/Post", p, "websocket posted.data.post")
        event = {"event": "posted", "data": data,
                 "broadcast": {"omit_users": None, "user_id": "", "channel_id": c["id"], "team_id": ""}}
        members = self.channel_members[c["id"]]
        for uid, _, q in list(self._sockets.values()):
            if uid in members:
                q.put_nowait(event)

    async def _websocket(self, ws) -> None:
        await ws.accept()
        try:
            first = json.loads(await asyncio.wait_for(ws.receive_text(), timeout=10))
        except Exception:
            await ws.close(code=1008)
            return
        token = (first.get("data") or {}).get("token", "")
        uid = self.tokens.get(token) if first.get("action") == "authentication_challenge" else None
        if uid is None:
            await ws.send_text(json.dumps({"status": "FAIL", "seq_reply": first.get("seq"),
                                           "error": {"id": "api.web_socket_router.not_authenticated.app_error"}}))
            await ws.close(code=1008)
            return
        q: asyncio.Queue = asyncio.Queue()
        key = id(ws)
        self._sockets[key] = (uid, ws, q)
        seq = 0
        try:
            await ws.send_text(json.dumps({"status": "OK", "seq_reply": first.get("seq")}))
            await ws.send_text(json.dumps({"event": "hello", "data": {"server_version": VERSION},
                                           "broadcast": {"omit_users": None, "user_id": uid, "channel_id": "",
                                                         "team_id": ""}, "seq": seq}))
            reader = asyncio.create_task(self._drain(ws))
            while True:
                getter = asyncio.create_task(q.get())
                done, _ = await asyncio.wait({getter, reader}, return_when=asyncio.FIRST_COMPLETED)
                if reader in done:
                    getter.cancel()
                    break
                event = getter.result()
                if event is None:
                    reader.cancel()
                    await ws.close(code=1001)
                    break
                seq += 1
                await ws.send_text(json.dumps({**event, "seq": seq}))
        except Exception:
            pass
        finally:
            self._sockets.pop(key, None)

    @staticmethod
    async def _drain(ws) -> None:
        """Read (and ignore) what the client sends, until it disconnects."""
        try:
            while True:
                await ws.receive_text()
        except Exception:
            return
