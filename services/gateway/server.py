"""The gateway's HTTP front: a bare ASGI app under uvicorn, on the node's loopback.

Each request is read whole (a model request is one JSON body), handed to `Gateway.handle`, and
watched: when the agent hangs up, its call is cancelled wherever it is (waiting for room under the
limits, between retries, streaming) and its row says `client_gone`. A stream that broke upstream
after bytes reached the agent is broken for the agent too: the app raises `StreamCut`, and uvicorn
closes the connection without ending the chunked body, so the agent's client sees the break as
it would have from the provider.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket

import uvicorn

from agensh_ray.services.gateway.core import Gateway, Request, StreamCut

log = logging.getLogger(__name__)


class _Quiet(logging.Filter):
    """uvicorn logs an app's exception with its traceback: a deliberate cut is not an error of ours."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], StreamCut))


class _Responder:
    def __init__(self, send):
        self._send = send

    async def start(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        await self._send({"type": "http.response.start", "status": status, "headers": headers})

    async def send(self, chunk: bytes, more: bool) -> None:
        await self._send({"type": "http.response.body", "body": chunk, "more_body": more})

    async def abort(self) -> None:
        raise StreamCut()


class GatewayServer:
    """Serves a `Gateway` on host:port (port 0: any free one); `url` once started."""

    def __init__(self, gateway: Gateway, host: str = "127.0.0.1", port: int = 0):
        self.gateway = gateway
        self.host = host
        self._port = port
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task | None = None
        logging.getLogger("uvicorn.error").addFilter(_Quiet())

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self._port}"

    async def app(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        body = bytearray()
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        req = Request(scope["method"], scope["path"], scope.get("query_string", b"").decode("latin-1"), headers,
                      bytes(body))
        me = asyncio.current_task()
        done = False

        async def watch() -> None:
            msg = await receive()
            if msg["type"] == "http.disconnect" and not done:
                me.cancel()

        watcher = asyncio.create_task(watch())
        try:
            await self.gateway.handle(req, _Responder(send))
        except asyncio.CancelledError:
            if watcher.done():  # the agent hung up: the call was cancelled on its behalf, nothing to answer
                return
            raise
        finally:
            done = True
            watcher.cancel()

    async def start(self) -> str:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self._port))
        self._port = sock.getsockname()[1]
        config = uvicorn.Config(self.app, log_level="warning", lifespan="off", access_log=False, interface="asgi3",
                                backlog=4096, timeout_keep_alive=75)
        self._server = uvicorn.Server(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]), name="model-gateway")
        while not self._server.started:
            if self._task.done():
                self._task.result()
            await asyncio.sleep(0.01)
        self.gateway.url = self.url
        return self.url

    async def close(self) -> None:
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(self._task, timeout=5)
            self._server = None
        await self.gateway.close()
