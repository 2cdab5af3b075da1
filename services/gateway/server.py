"""The gateway's HTTP front: aiohttp's low-level server, on the node's loopback.

Each request is read whole (a model request is one JSON body) and handed to `Gateway.handle`.
When the agent hangs up, aiohttp cancels its handler wherever the call is (waiting for room under
the limits, between retries, streaming) and its row says `client_gone`. A stream that broke
upstream after bytes reached the agent is broken for the agent too: the connection is aborted
without the end of the chunked body, so the agent's client sees the break as it would have from
the provider.

aiohttp rather than uvicorn (the project's other servers): it took less of the gateway's CPU per
streamed call in trials; bench/gateway.py measures the gateway's CPU per call as it is.
"""

from __future__ import annotations

import logging
import socket

from aiohttp import web

from agensh_ray.services.gateway.core import Gateway, Request, StreamCut

log = logging.getLogger(__name__)


class _Responder:
    def __init__(self, request: web.BaseRequest):
        self.request = request
        self.resp: web.StreamResponse | None = None

    async def start(self, status: int, headers: list[tuple[str, str]]) -> None:
        self.resp = web.StreamResponse(status=status, headers=headers)
        await self.resp.prepare(self.request)

    async def send(self, chunk: bytes, more: bool) -> None:
        if chunk:
            await self.resp.write(chunk)
        if not more:
            await self.resp.write_eof()

    async def abort(self) -> None:
        if self.request.transport is not None:
            self.request.transport.abort()
        raise StreamCut()


class GatewayServer:
    """Serves a `Gateway` on host:port (port 0: any free one); `url` once started."""

    def __init__(self, gateway: Gateway, host: str = "127.0.0.1", port: int = 0):
        self.gateway = gateway
        self.host = host
        self._port = port
        self._runner: web.ServerRunner | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self._port}"

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        body = await request.read()
        path, _, query = request.raw_path.partition("?")
        req = Request(request.method, path, query, {k.lower(): v for k, v in request.headers.items()}, body)
        out = _Responder(request)
        try:
            await self.gateway.handle(req, out)
        except (StreamCut, ConnectionError):
            pass  # the connection is gone (aborted by us, or closed by the agent): nothing more to send
        return out.resp if out.resp is not None else web.Response(status=500)

    async def start(self) -> str:
        server = web.Server(self._handle, handler_cancellation=True, access_log=None)
        self._runner = web.ServerRunner(server, handle_signals=False, shutdown_timeout=2.0)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self._port))
        self._port = sock.getsockname()[1]
        site = web.SockSite(self._runner, sock, backlog=4096)
        await site.start()
        self.gateway.url = self.url
        return self.url

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await self.gateway.close()
