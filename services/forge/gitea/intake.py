"""The webhook intake: the HTTP endpoint Gitea delivers signed webhooks to,
inside the forge actor. It checks a delivery and hands it to the
`GiteaWebhookMapper` (webhooks.py); it decides nothing about events itself.

Request handling, in order: POST to the configured path only (else 404/405);
a body larger than `max_body` is refused with 413 before it is read; the
`X-Gitea-Signature` header must be the HMAC-SHA256 hex digest of the raw body
under the webhook secret, compared in constant time, else 401, one
`IntakeRow` in the trace (through `on_rejected`) and nothing else (the body
is not parsed). A good delivery is acknowledged with 200 even when it maps to
no event (a `pull_request_sync` duplicates the push event, say).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from agensh_ray.services.forge.gitea.webhooks import GiteaWebhookMapper
from agensh_ray.services.http_thread import serve_in_thread

log = logging.getLogger(__name__)

MAX_BODY = 5 * 1024 * 1024
"""Webhook bodies above this are refused (Gitea caps push payloads at a few MB of commits)."""


def signature(secret: str, body: bytes) -> str:
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


class WebhookIntake:
    """The HTTP endpoint. `on_rejected(reason, remote_addr, delivery)` is called for a refused delivery."""

    def __init__(self, mapper: GiteaWebhookMapper, secret: str, host: str = "127.0.0.1", port: int = 0,
                 path: str = "/hooks/gitea", max_body: int = MAX_BODY,
                 on_rejected: Callable[[str, str, str | None], None] | None = None):
        if not secret:
            raise ValueError("the webhook intake needs a secret (bootstrap writes one to the secrets file)")
        self.mapper = mapper
        self._secret = secret
        self.host, self.path, self.max_body = host, path, max_body
        self.on_rejected = on_rejected
        self._requested_port = port
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._server is not None:
            return
        outer = self

        class Handler(_IntakeHandler):
            intake = outer

        self._server, self._thread = serve_in_thread(self.host, self._requested_port, Handler, "gitea-intake")

    @property
    def port(self) -> int:
        assert self._server is not None, "start() the intake first"
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}{self.path}"

    def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def reject(self, reason: str, remote: str, delivery: str | None) -> None:
        log.warning("webhook refused from %s: %s", remote, reason)
        if self.on_rejected is not None:
            try:
                self.on_rejected(reason, remote, delivery)
            except Exception:
                log.exception("recording a refused webhook failed")

    def verify(self, body: bytes, sig: str | None) -> bool:
        return bool(sig) and hmac.compare_digest(signature(self._secret, body), sig.strip().lower())


class _IntakeHandler(BaseHTTPRequestHandler):
    intake: WebhookIntake
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args) -> None:  # noqa: A002
        log.debug("intake %s: %s", self.address_string(), format % args)

    def _reply(self, code: int, text: str) -> None:
        data = (text + "\n").encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)
        self.close_connection = True

    def do_GET(self) -> None:
        self._reply(405, "POST webhooks here")

    def do_POST(self) -> None:
        it = self.intake
        remote = self.client_address[0]
        delivery = self.headers.get("X-Gitea-Delivery")
        if urlsplit(self.path).path != it.path:
            self._reply(404, f"the intake listens on {it.path}")
            return
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self._reply(411, "Content-Length required")
            return
        if length < 0 or length > it.max_body:
            it.reject(f"body of {length} bytes exceeds {it.max_body}", remote, delivery)
            self._reply(413, f"body larger than {it.max_body} bytes")
            return
        body = self.rfile.read(length)
        if not it.verify(body, self.headers.get("X-Gitea-Signature")):
            it.reject("bad or missing X-Gitea-Signature", remote, delivery)
            self._reply(401, "bad signature")
            return
        event_type = self.headers.get("X-Gitea-Event-Type") or self.headers.get("X-Gitea-Event") or ""
        try:
            payload = json.loads(body)
        except ValueError:
            self._reply(400, "body is not JSON")
            return
        try:
            ev = it.mapper.apply(event_type, payload, delivery)
        except Exception:
            log.exception("webhook %s could not be mapped", event_type)
            self._reply(500, "could not process the event")
            return
        self._reply(200, f"ok {ev.event_id}" if ev else "ok (no notification)")
