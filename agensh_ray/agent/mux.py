"""Many workers' ACP sessions on one agent process (simulation only).

1,024 separate Python agent processes do not fit on one small machine, and
ACP lets one connection carry several sessions. With `--workers-per-actor K`
and the `sim` harness, a WorkerActor starts ONE sim process and opens one
session per worker on it. Each session still has its own workdir, its own MCP
URL (so the tools know which worker calls) and its own WorkdirClient (fs,
terminals, permissions, trace observer): `MuxClient` routes every agent ->
client request by its `sessionId`. A `MuxSession` is an `AcpSession` like a
worker's own process session: the same turn, usage and redaction. Real CLIs
keep one process per worker.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import acp
from acp import RequestError

from agensh_ray.agent.client import NoExtensions, SessionObserver, WorkdirClient, initialize
from agensh_ray.agent.harness import Harness
from agensh_ray.agent.process import AgentProcess
from agensh_ray.agent.limits import ProcessLimits
from agensh_ray.agent.sandbox import SandboxPolicy
from agensh_ray.agent.session import AcpSession
from agensh_ray.errors import AgentDied

_CLIENT_METHODS = (
    "request_permission",
    "session_update",
    "read_text_file",
    "write_text_file",
    "create_terminal",
    "terminal_output",
    "wait_for_terminal_exit",
    "kill_terminal",
    "release_terminal",
)


class MuxClient(NoExtensions):
    """An ACP client that forwards each request to the WorkdirClient of its session."""

    def __init__(self) -> None:
        self.clients: dict[str, WorkdirClient] = {}

    def _route(self, name: str):
        async def call(**kwargs):
            client = self.clients.get(kwargs.get("session_id", ""))
            if client is None:
                raise RequestError.invalid_params({"sessionId": kwargs.get("session_id"), "reason": "unknown"})
            return await getattr(client, name)(**kwargs)

        return call

    def __getattr__(self, name: str):
        if name in _CLIENT_METHODS:
            return self._route(name)
        raise AttributeError(name)


class SharedAgent:
    """One agent process and connection shared by the sessions of a host."""

    def __init__(self, harness: Harness, env: dict[str, str], cwd: Path, log_dir: Path, name: str,
                 sandbox: SandboxPolicy | None = None, limits: ProcessLimits | None = None):
        self.harness = harness
        self.limits = limits
        """The process's resource limits (one group for the host's shared process: limits.py)."""
        self.sandbox = sandbox
        """One sandbox for the process: every workdir and HOME of the host's workers is writable in it."""
        self.host_env = env
        self.env = sandbox.agent_env(env) if sandbox else env
        self.cwd = cwd
        self.log_dir = log_dir
        self.name = name
        self.client = MuxClient()
        self.process: AgentProcess | None = None
        self.conn: acp.ClientSideConnection | None = None
        self.generation = 0
        self._lock = asyncio.Lock()

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.alive

    async def ensure(self, generation_seen: int | None = None, timeout_s: float = 60.0) -> int:
        """Start the process if it is not running (or restart it once if the caller saw it die)."""
        async with self._lock:
            if self.alive and (generation_seen is None or generation_seen != self.generation):
                return self.generation
            if self.process is not None:
                await self.process.stop()
            # counted before the new process starts: a session of the old one that prompts meanwhile is told
            # its agent died (not sent, with a session the new process never opened, to a half-started one)
            self.generation += 1
            self.process = AgentProcess(self.harness.argv(), self.env, self.cwd, self.log_dir / f"{self.name}.stderr",
                                        sandbox=self.sandbox, limits=self.limits)
            proc = await self.process.start()
            self.conn = acp.connect_to_agent(self.client, proc.stdin, proc.stdout)
            await asyncio.wait_for(initialize(self.conn, "agensh-ray worker host"), timeout_s)
            return self.generation

    async def close(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.conn.close(), 2)
            self.conn = None
        if self.process is not None:
            await self.process.stop()


class MuxSession(AcpSession):
    """One worker's ACP session on a `SharedAgent`."""

    def __init__(self, shared: SharedAgent, worker_id: str, workdir: Path, mcp_url: str, observer: SessionObserver):
        super().__init__(shared.harness, worker_id, workdir, mcp_url, observer, shared.host_env, shared.sandbox)
        self.shared = shared
        self.generation = 0
        self.dropped = False
        """This session was given up at its turn's deadline while the shared process went on serving the others."""
        if shared.sandbox is not None:
            self.client.enter = lambda argv, cwd: self.shared.process.enter(argv, cwd)

    @property
    def conn(self) -> acp.ClientSideConnection | None:
        return self.shared.conn

    @property
    def process(self) -> AgentProcess | None:
        return self.shared.process

    @property
    def alive(self) -> bool:
        return self.shared.alive and self.generation == self.shared.generation

    async def start(self, timeout_s: float = 60.0) -> str:
        try:
            self.generation = await self.shared.ensure(timeout_s=timeout_s)
            resp = await asyncio.wait_for(
                self.shared.conn.new_session(cwd=str(self.workdir), mcp_servers=self._mcp_servers()), timeout_s
            )
        except (TimeoutError, ConnectionError, BrokenPipeError, RequestError) as exc:
            raise AgentDied(self.redact(f"shared {self.harness.name} agent failed to open a session: {exc!r}")) from exc
        self.session_id = resp.session_id
        self.shared.client.clients[self.session_id] = self.client
        return self.session_id

    async def prompt(self, text: str, deadline_s: float | None = None,
                     stopped_s: float | None = None) -> tuple[str, str]:
        """One turn, as `AcpSession.prompt`; AgentDied if the shared process was restarted (by another session
        that saw it die) since this session opened: the new process does not know this session."""
        if self.generation != self.shared.generation:
            raise AgentDied(f"the shared {self.harness.name} agent died and was restarted since this session opened")
        return await super().prompt(text, deadline_s, stopped_s)

    async def end_overdue_turn(self) -> str:
        """Past its deadline, one session's turn ends alone: killing the shared process would end every turn of the
        host's other workers. The turn is cancelled (ACP session/cancel) and the session dropped: what the agent
        still sends for it is refused as from an unknown session, and `restart` opens a new one."""
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.conn.cancel(session_id=self.session_id), 5)
        self.shared.client.clients.pop(self.session_id or "", None)
        self.dropped = True
        return f"its session {self.session_id} cancelled and dropped (the shared process serves the host's other workers)"

    async def restart(self) -> bool:
        """The shared process died: the first session to notice restarts it; each opens a new session. A session
        dropped at its deadline (`end_overdue_turn`) on a process still alive opens a new session on it."""
        self.shared.client.clients.pop(self.session_id or "", None)
        self.restarts += 1
        if self.dropped and self.shared.alive and self.generation == self.shared.generation:
            self.dropped = False
            await self.start()
            return False
        self.dropped = False
        self.generation = await self.shared.ensure(generation_seen=self.generation)
        await self.start()
        return False

    async def close(self) -> None:
        await self.client.close_terminals()
        self.shared.client.clients.pop(self.session_id or "", None)
