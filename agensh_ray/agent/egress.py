"""The host's end of a sandbox's network: for each endpoint the policy routes,
a unix socket in a private folder (bind-mounted into the sandbox, where
relay.py listens on loopback and forwards to it), and every connection made
to it forwarded to the real endpoint from the host's own network.

This is the whole of a sandboxed agent's way out: an address without a route
has nothing listening inside, and nothing else leaves its network namespace.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import shutil
import tempfile
from pathlib import Path

from agensh_ray.agent.sandbox import Route, SandboxPolicy

log = logging.getLogger(__name__)

CHUNK = 65536
CONNECT_TIMEOUT_S = 10.0


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        pass


class Egress:
    """The relays of one sandbox, on the host's event loop. `start()` -> folder to bind; `close()` is idempotent."""

    def __init__(self, policy: SandboxPolicy):
        self.policy = policy
        self.dir: Path | None = None
        self._servers: list[asyncio.base_events.Server] = []
        self._tasks: set[asyncio.Task] = set()
        self.connections = 0
        """Connections relayed so far (every route)."""

    async def start(self) -> Path:
        """Open the unix sockets (and the hosts file) in a fresh private folder; returns it."""
        if self.dir is not None:
            return self.dir
        self.dir = Path(tempfile.mkdtemp(prefix="agensh-net-"))  # short: a unix socket path has 107 bytes
        (self.dir / "net").mkdir()
        for route in self.policy.routes:
            path = self.dir / "net" / route.socket
            self._servers.append(await asyncio.start_unix_server(functools.partial(self._handle, route), str(path)))
        if hosts := self.policy.hosts_file():
            (self.dir / "hosts").write_text(hosts)
        return self.dir

    async def _handle(self, route: Route, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._tasks.add(task)
        self.connections += 1
        try:
            try:
                up_r, up_w = await asyncio.wait_for(asyncio.open_connection(route.host, route.port),
                                                    CONNECT_TIMEOUT_S)
            except (TimeoutError, OSError) as exc:
                log.warning("sandbox relay: %s:%d unreachable: %s", route.host, route.port, exc)
                return
            try:
                await asyncio.gather(_pipe(reader, up_w), _pipe(up_r, writer))
            finally:
                up_w.close()
        finally:
            writer.close()
            self._tasks.discard(task)

    async def close(self) -> None:
        for server in self._servers:
            server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task
        self._servers.clear()
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None
