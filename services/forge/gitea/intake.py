"""The webhook intake: the HTTP endpoint Gitea delivers signed webhooks to,
inside the forge actor. It checks a delivery and hands it to the
`GiteaWebhookMapper` (webhooks.py); it decides nothing about events itself.

How it serves, so that no client can hold it: one asyncio loop on one
thread reads every connection (h11 parses HTTP/1.1), each request within
`read_timeout_s` from the first byte to the last (a client that trickles
its headers or body is answered 408 and dropped: a slow client costs a
coroutine, never a thread); at most `max_connections` are open at once
(more are answered 503 at once); only a request read in full reaches the
bounded pool of `workers` threads that checks and maps it (the mapper
fsyncs its log).

Request handling, in order: POST to the configured path only (else 404/405);
a body larger than `max_body` is refused with 413 before it is read; the
`X-Gitea-Signature` header must be the HMAC-SHA256 hex digest of the raw body
under the webhook secret, compared in constant time, else 401, one
`IntakeRow` in the trace (through `on_rejected`) and nothing else (the body
is not parsed); a signed body must have the shape payloads.py reads (JSON,
nested at most 32 deep, the used fields of the right types), else 400 with
the problem named (and a row). A good delivery is acknowledged with 200 even
when it maps to no event (a `pull_request_sync` duplicates the push event,
say). Deduplication: by `X-Gitea-Delivery`, or without one by the SHA-256 of
event type and body.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus
from urllib.parse import urlsplit

import h11

from agensh_ray.errors import BadWebhook
from agensh_ray.services.forge.gitea.payloads import parse
from agensh_ray.services.forge.gitea.webhooks import GiteaWebhookMapper

log = logging.getLogger(__name__)

MAX_BODY = 5 * 1024 * 1024
"""Webhook bodies above this are refused (Gitea caps push payloads at a few MB of commits)."""
MAX_HEADER_BYTES = 32 * 1024


def signature(secret: str, body: bytes) -> str:
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


class _Reply(Exception):
    """Answer the request now with this status and text (raised while reading it)."""

    def __init__(self, status: int, text: str):
        super().__init__(text)
        self.status, self.text = status, text


class WebhookIntake:
    """The HTTP endpoint. `on_rejected(reason, remote_addr, delivery)` is called for a refused delivery."""

    def __init__(self, mapper: GiteaWebhookMapper, secret: str, host: str = "127.0.0.1", port: int = 0,
                 path: str = "/hooks/gitea", max_body: int = MAX_BODY,
                 on_rejected: Callable[[str, str, str | None], None] | None = None,
                 read_timeout_s: float = 10.0, workers: int = 4, max_connections: int = 256):
        if not secret:
            raise ValueError("the webhook intake needs a secret (bootstrap writes one to the secrets file)")
        self.mapper = mapper
        self._secret = secret
        self.host, self.path, self.max_body = host, path, max_body
        self.on_rejected = on_rejected
        self.read_timeout_s, self.max_connections = read_timeout_s, max_connections
        self._requested_port = port
        self._workers = workers
        self._pool: ThreadPoolExecutor | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None
        self._open = 0

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> None:
        if self._server is not None:
            return
        self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="gitea-intake")
        loop = asyncio.new_event_loop()
        try:
            self._server = loop.run_until_complete(
                asyncio.start_server(self._serve, self.host, self._requested_port, backlog=1024))
        except BaseException:
            loop.close()
            self._pool.shutdown()
            raise
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="gitea-intake-loop", daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        assert self._server is not None, "start() the intake first"
        return self._server.sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}{self.path}"

    def close(self) -> None:
        loop, server, self._server = self._loop, self._server, None
        if loop is None or server is None:
            return

        async def stop() -> None:
            server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()
            await asyncio.sleep(0)

        asyncio.run_coroutine_threadsafe(stop(), loop).result(timeout=5)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=5)
        loop.close()
        self._loop = None
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

    # ------------------------------------------------------------------ checks

    def reject(self, reason: str, remote: str, delivery: str | None) -> None:
        log.warning("webhook refused from %s: %s", remote, reason)
        if self.on_rejected is not None:
            try:
                self.on_rejected(reason, remote, delivery)
            except Exception:
                log.exception("recording a refused webhook failed")

    def verify(self, body: bytes, sig: str | None) -> bool:
        return bool(sig) and hmac.compare_digest(signature(self._secret, body), sig.strip().lower())

    def handle(self, headers: dict[str, str], body: bytes, remote: str) -> tuple[int, str]:
        """A request read in full (headers lower-cased) -> (status, text). Runs on the pool."""
        delivery = headers.get("x-gitea-delivery") or None
        if not self.verify(body, headers.get("x-gitea-signature")):
            self.reject("bad or missing X-Gitea-Signature", remote, delivery)
            return 401, "bad signature"
        event_type = headers.get("x-gitea-event-type") or headers.get("x-gitea-event") or ""
        try:
            payload = parse(body, event_type)
        except BadWebhook as exc:
            self.reject(f"bad body: {exc}", remote, delivery)
            return 400, f"bad webhook body: {exc}"
        key = delivery or "sha256:" + hashlib.sha256(event_type.encode() + b"\n" + body).hexdigest()
        try:
            ev = self.mapper.apply(event_type, payload, key)
        except Exception:
            log.exception("webhook %s could not be mapped", event_type)
            return 500, "could not process the event"
        return 200, f"ok {ev.event_id}" if ev else "ok (no notification)"

    # ---------------------------------------------------------------- serving

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        remote = peer[0] if peer else "?"
        if self._open >= self.max_connections:
            await self._answer(writer, 503, f"busy: more than {self.max_connections} connections are open")
            return
        self._open += 1
        try:
            try:
                headers, body = await asyncio.wait_for(self._read(reader, writer, remote), self.read_timeout_s)
            except _Reply as r:
                await self._answer(writer, r.status, r.text)
                return
            except (TimeoutError, asyncio.TimeoutError):
                await self._answer(writer, 408, f"the request was not received within {self.read_timeout_s:g} s")
                return
            status, text = await asyncio.get_running_loop().run_in_executor(self._pool, self.handle, headers, body,
                                                                            remote)
            await self._answer(writer, status, text)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self._open -= 1
            writer.close()

    async def _read(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    remote: str) -> tuple[dict[str, str], bytes]:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEADER_BYTES)
        headers: dict[str, str] = {}
        body = bytearray()
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                raise _Reply(400, f"bad HTTP request: {exc}") from None
            if event is h11.NEED_DATA:
                if conn.they_are_waiting_for_100_continue:  # once: sending it clears the flag
                    writer.write(conn.send(h11.InformationalResponse(status_code=100, headers=[])))
                conn.receive_data(await reader.read(65536))
                continue
            if isinstance(event, h11.Request):
                headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in event.headers}
                delivery = headers.get("x-gitea-delivery")
                if urlsplit(event.target.decode("latin-1")).path != self.path:
                    raise _Reply(404, f"the intake listens on {self.path}")
                if event.method != b"POST":
                    raise _Reply(405, "POST webhooks here")
                if "content-length" not in headers:
                    raise _Reply(411, "Content-Length required")
                length = int(headers["content-length"])  # h11 checked it is a number
                if length > self.max_body:
                    self.reject(f"body of {length} bytes exceeds {self.max_body}", remote, delivery)
                    raise _Reply(413, f"body larger than {self.max_body} bytes")
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                return headers, bytes(body)
            else:  # ConnectionClosed before the end
                raise ConnectionResetError("the client closed the connection mid-request")

    @staticmethod
    async def _answer(writer: asyncio.StreamWriter, status: int, text: str) -> None:
        data = (text + "\n").encode()
        head = (f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\nContent-Type: text/plain; charset=utf-8\r\n"
                f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n").encode()
        try:
            writer.write(head + data)
            await writer.drain()
        except ConnectionError:
            pass
