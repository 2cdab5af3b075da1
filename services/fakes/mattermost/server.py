"""The fake Mattermost's core: its state, the server (Starlette under
uvicorn, on a thread of its own with its own event loop), who is asking, and
the dispatch of a REST call to the resource that answers it.

Every REST call is contract-checked on the way in and out (`_http`); the
routes run on the event loop thread under the state lock, so a post and its
websocket broadcast happen in one step, before the REST answer leaves.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import socket
import string
import threading
import time
from typing import Any, Self
from urllib.parse import parse_qs

from agensh_ray.services.fakes.contract import ContractChecker

VERSION = "9.11.0"
_ALPHABET = string.ascii_lowercase + string.digits


def new_id() -> str:
    return "".join(secrets.choice(_ALPHABET) for _ in range(26))


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class AppError(Exception):
    """An API answer other than success, as Mattermost words it (`id`, `message`). Raised by any resource,
    turned into the response by `_http`; it never leaves the fake."""

    def __init__(self, status: int, err_id: str, message: str):
        self.status, self.err_id, self.message = status, err_id, message


class MattermostServer:
    """The state every resource reads and writes, the lifecycle, auth and dispatch."""

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
        self._unsent: dict[int, int] = {}
        """socket key -> events queued for that socket and not yet written to it."""
        self._lock = threading.RLock()
        admin = self._new_user("sysadmin", "sysadmin@fake.invalid", "system_admin system_user")
        self.admin_token = self._new_token(admin["id"])
        self._server = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> Self:
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

