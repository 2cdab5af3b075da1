"""The worker's side of the Agent Client Protocol: spawn the agent CLI, drive
its session with the official `agent-client-protocol` SDK, answer its fs,
terminal and permission requests inside the worker's workdir, and turn its
session/update notifications into trace rows.

Layering follows the SDK: a subprocess transport (`AgentProcess`), the SDK's
`ClientSideConnection`, and a thin facade (`AgentSession`) the worker loop
uses: ``start() -> prompt(text) -> ... -> close()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import acp
from acp import RequestError
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    CreateTerminalResponse,
    DeniedOutcome,
    FileSystemCapabilities,
    HttpMcpServer,
    Implementation,
    ReadTextFileResponse,
    ReleaseTerminalResponse,
    RequestPermissionResponse,
    TerminalExitStatus,
    TerminalOutputResponse,
    WaitForTerminalExitResponse,
    WriteTextFileResponse,
    KillTerminalResponse,
)

from agensh_ray.harness import Harness

log = logging.getLogger(__name__)

STDIO_LIMIT = 50 * 1024 * 1024
TERMINAL_OUTPUT_LIMIT = 1024 * 1024


class AgentDied(Exception):
    """The agent process exited or its connection broke; the worker restarts it."""


@dataclass
class ToolCallRecord:
    """An agent-reported tool call, upserted by id (Claude Code sends `tool_call` twice)."""

    tool_call_id: str
    title: str = ""
    kind: str | None = None
    status: str | None = None
    started: float = field(default_factory=time.perf_counter)
    finished: float | None = None


class SessionObserver:
    """Receives what the session sees; the host turns it into trace rows. Override what you need."""

    def on_tool_call(self, rec: ToolCallRecord) -> None: ...
    def on_agent_text(self, text: str) -> None: ...
    def on_usage(self, input_tokens: int, output_tokens: int, cost_usd: float) -> None: ...
    def on_plan(self, entries: list[str]) -> None: ...


class PathRefused(RequestError):
    pass


def confine(workdir: Path, path: str) -> Path:
    """Resolve `path` and refuse anything outside the workdir (symlinks included)."""
    p = Path(path)
    if not p.is_absolute():
        p = workdir / p
    resolved = p.resolve()
    root = workdir.resolve()
    if resolved != root and root not in resolved.parents:
        raise RequestError.invalid_params({"path": path, "reason": f"outside the worker's workdir {root}"})
    return resolved


@dataclass
class _Terminal:
    proc: asyncio.subprocess.Process
    limit: int
    output: bytearray = field(default_factory=bytearray)
    truncated: bool = False
    reader: asyncio.Task | None = None


class WorkdirClient:
    """The ACP client methods, all confined to one workdir.

    Permission policy: allow (choosing the option by `kind`, as Copilot CLI
    expects) unless the tool call's title or raw input matches a deny pattern.
    """

    def __init__(self, workdir: Path, observer: SessionObserver, deny: list[str], env: dict[str, str]):
        self.workdir = workdir
        self.observer = observer
        self.deny = [d.lower() for d in deny]
        self.env = env
        self.tool_calls: dict[str, ToolCallRecord] = {}
        self._terminals: dict[str, _Terminal] = {}
        self._next_terminal = 0
        self._text: list[str] = []

    # -- permissions ---------------------------------------------------------------
    async def request_permission(self, options, session_id, tool_call, **kwargs):
        described = f"{tool_call.title or ''} {tool_call.raw_input or ''}".lower()
        denied = any(d in described for d in self.deny)
        wanted = ("reject_once", "reject_always") if denied else ("allow_once", "allow_always")
        for kind in wanted:
            for opt in options:
                if opt.kind == kind:
                    return RequestPermissionResponse(outcome=AllowedOutcome(option_id=opt.option_id, outcome="selected"))
        return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))

    # -- session updates -----------------------------------------------------------
    async def session_update(self, session_id, update, **kwargs):
        kind = getattr(update, "session_update", None)
        if kind in ("tool_call", "tool_call_update"):
            rec = self.tool_calls.get(update.tool_call_id)
            if rec is None:
                rec = self.tool_calls[update.tool_call_id] = ToolCallRecord(update.tool_call_id)
            if update.title:
                rec.title = update.title
            if update.kind:
                rec.kind = update.kind
            if update.status:
                rec.status = update.status
            if update.status in ("completed", "failed") and rec.finished is None:
                rec.finished = time.perf_counter()
                self.observer.on_tool_call(rec)
        elif kind == "agent_message_chunk":
            text = getattr(update.content, "text", None)
            if text:
                self._text.append(text)
        elif kind == "plan":
            self.observer.on_plan([e.content for e in update.entries])
        elif kind == "usage_update":
            cost = update.cost.amount if update.cost is not None else 0.0
            self.observer.on_usage(0, 0, float(cost))

    def take_text(self) -> str:
        text, self._text = "".join(self._text), []
        return text

    def flush_open_tool_calls(self) -> None:
        """Tool calls still open when a turn ends count as failed."""
        for rec in self.tool_calls.values():
            if rec.finished is None:
                rec.finished = time.perf_counter()
                rec.status = rec.status or "failed"
                self.observer.on_tool_call(rec)
        self.tool_calls.clear()

    # -- files ----------------------------------------------------------------------
    async def read_text_file(self, path, session_id, limit=None, line=None, **kwargs):
        p = confine(self.workdir, path)
        if not p.is_file():
            raise RequestError.resource_not_found(str(path))
        text = p.read_text(encoding="utf-8", errors="replace")
        if line is not None or limit is not None:
            lines = text.splitlines(keepends=True)
            start = max((line or 1) - 1, 0)
            end = start + limit if limit is not None else None
            text = "".join(lines[start:end])
        return ReadTextFileResponse(content=text)

    async def write_text_file(self, content, path, session_id, **kwargs):
        p = confine(self.workdir, path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(content, encoding="utf-8")
        return WriteTextFileResponse()

    # -- terminals ------------------------------------------------------------------
    async def create_terminal(self, command, session_id, args=None, cwd=None, env=None, output_byte_limit=None, **kw):
        workdir = confine(self.workdir, cwd) if cwd else self.workdir
        merged = dict(self.env)
        for var in env or []:
            merged[var.name] = var.value
        argv = [command, *(args or [])]
        if not args and " " in command:
            argv = ["/bin/sh", "-c", command]
        proc = await asyncio.create_subprocess_exec(
            *argv,
            cwd=str(workdir),
            env=merged,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        self._next_terminal += 1
        tid = f"term-{self._next_terminal}"
        term = _Terminal(proc, output_byte_limit or TERMINAL_OUTPUT_LIMIT)
        term.reader = asyncio.create_task(self._pump(term), name=f"terminal-{tid}")
        self._terminals[tid] = term
        return CreateTerminalResponse(terminal_id=tid)

    async def _pump(self, term: _Terminal) -> None:
        assert term.proc.stdout is not None
        while chunk := await term.proc.stdout.read(65536):
            term.output += chunk
            if len(term.output) > term.limit:
                del term.output[: len(term.output) - term.limit]
                term.truncated = True

    def _term(self, terminal_id: str) -> _Terminal:
        term = self._terminals.get(terminal_id)
        if term is None:
            raise RequestError.invalid_params({"terminalId": terminal_id, "reason": "unknown terminal"})
        return term

    @staticmethod
    def _exit(term: _Terminal) -> TerminalExitStatus | None:
        rc = term.proc.returncode
        if rc is None:
            return None
        if rc < 0:
            return TerminalExitStatus(signal=signal.Signals(-rc).name)
        return TerminalExitStatus(exit_code=rc)

    async def terminal_output(self, session_id, terminal_id, **kwargs):
        term = self._term(terminal_id)
        return TerminalOutputResponse(
            output=term.output.decode("utf-8", "replace"), truncated=term.truncated, exit_status=self._exit(term)
        )

    async def wait_for_terminal_exit(self, session_id, terminal_id, **kwargs):
        term = self._term(terminal_id)
        await term.proc.wait()
        if term.reader:
            await term.reader
        st = self._exit(term)
        return WaitForTerminalExitResponse(exit_code=st.exit_code, signal=st.signal)

    async def kill_terminal(self, session_id, terminal_id, **kwargs):
        term = self._term(terminal_id)
        _kill_group(term.proc, signal.SIGKILL)
        return KillTerminalResponse()

    async def release_terminal(self, session_id, terminal_id, **kwargs):
        term = self._terminals.pop(terminal_id, None)
        if term is not None and term.proc.returncode is None:
            _kill_group(term.proc, signal.SIGKILL)
        return ReleaseTerminalResponse()

    async def close_terminals(self) -> None:
        for tid in list(self._terminals):
            await self.release_terminal("", tid)

    # -- everything else -------------------------------------------------------------
    async def ext_method(self, method, params):
        raise RequestError.method_not_found(method)

    async def ext_notification(self, method, params):
        return None

    def on_connect(self, conn) -> None:
        pass


def _kill_group(proc: asyncio.subprocess.Process, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


class AgentProcess:
    """The agent CLI as a subprocess in its own process group.

    Shutdown is a fixed sequence: close stdin -> wait `grace_s` -> SIGTERM the
    group -> wait -> SIGKILL the group. `stop()` is idempotent.
    """

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path, stderr_path: Path):
        self.argv = argv
        self.env = env
        self.cwd = cwd
        self.stderr_path = stderr_path
        self.proc: asyncio.subprocess.Process | None = None
        self._stderr = None

    async def start(self) -> asyncio.subprocess.Process:
        self.stderr_path.parent.mkdir(parents=True, exist_ok=True)
        self._stderr = open(self.stderr_path, "ab")
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=self._stderr,
            env=self.env,
            cwd=str(self.cwd),
            limit=STDIO_LIMIT,
            start_new_session=True,
        )
        return self.proc

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def stop(self, grace_s: float = 2.0) -> None:
        proc = self.proc
        if proc is None:
            return
        if proc.returncode is None:
            if proc.stdin is not None:
                with contextlib.suppress(Exception):
                    proc.stdin.close()
            for sig in (None, signal.SIGTERM, signal.SIGKILL):
                if sig is not None:
                    _kill_group(proc, sig)
                try:
                    await asyncio.wait_for(proc.wait(), timeout=grace_s)
                    break
                except asyncio.TimeoutError:
                    continue
        # Children of the agent (its shells) die with the group.
        _kill_group(proc, signal.SIGKILL)
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def stderr_tail(self, n: int = 2000) -> str:
        try:
            data = self.stderr_path.read_bytes()
        except OSError:
            return ""
        return data[-n:].decode("utf-8", "replace")


class AgentSession:
    """One worker's ACP session with its agent: start, prompt turns, recover.

    `prompt()` raises AgentDied when the process dies mid-turn; `restart()`
    brings it back with session/load when the agent supports it, else a new
    session (the caller primes it with a hand-off summary).
    """

    def __init__(
        self,
        harness: Harness,
        worker_id: str,
        workdir: Path,
        home: Path,
        mcp_url: str,
        observer: SessionObserver,
        extra_env: dict[str, str] | None = None,
        deny: list[str] | None = None,
        log_dir: Path | None = None,
    ):
        self.harness = harness
        self.worker_id = worker_id
        self.workdir = workdir
        self.home = home
        self.mcp_url = mcp_url
        self.observer = observer
        self.env = harness.environment(home=home, extra=extra_env or {})
        self.client = WorkdirClient(workdir, observer, deny or harness.default_deny, self.env)
        self.log_dir = log_dir or home
        self.process: AgentProcess | None = None
        self.conn: acp.ClientSideConnection | None = None
        self.session_id: str | None = None
        self.can_load = False
        self.restarts = 0

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.alive

    def _mcp_servers(self) -> list[HttpMcpServer]:
        return [HttpMcpServer(name="agensh", url=self.mcp_url, headers=[], type="http")]

    async def start(self, timeout_s: float = 60.0) -> str:
        """Spawn the agent, initialize, and open a new session (or load the old one after a crash)."""
        self.process = AgentProcess(
            self.harness.argv(), self.env, self.workdir, self.log_dir / f"{self.worker_id}.agent.stderr"
        )
        proc = await self.process.start()
        self.conn = acp.connect_to_agent(self.client, proc.stdin, proc.stdout)
        try:
            init = await asyncio.wait_for(
                self.conn.initialize(
                    protocol_version=acp.PROTOCOL_VERSION,
                    client_capabilities=ClientCapabilities(
                        fs=FileSystemCapabilities(read_text_file=True, write_text_file=True), terminal=True
                    ),
                    client_info=Implementation(name="agensh-ray", title="agensh-ray worker", version="0.1.0"),
                ),
                timeout_s,
            )
            self.can_load = bool(init.agent_capabilities and init.agent_capabilities.load_session)
            if self.session_id and self.can_load:
                await asyncio.wait_for(
                    self.conn.load_session(
                        cwd=str(self.workdir), session_id=self.session_id, mcp_servers=self._mcp_servers()
                    ),
                    timeout_s,
                )
            else:
                resp = await asyncio.wait_for(
                    self.conn.new_session(cwd=str(self.workdir), mcp_servers=self._mcp_servers()), timeout_s
                )
                self.session_id = resp.session_id
        except asyncio.TimeoutError:
            tail = self.process.stderr_tail()
            await self.close()
            raise AgentDied(f"{self.harness.name} did not answer the ACP handshake in {timeout_s:.0f}s; stderr: {tail}")
        except (ConnectionError, BrokenPipeError, RequestError) as exc:
            tail = self.process.stderr_tail() if self.process else ""
            await self.close()
            raise AgentDied(f"{self.harness.name} failed the ACP handshake: {exc}; stderr: {tail}") from exc
        return self.session_id

    async def prompt(self, text: str) -> tuple[str, str]:
        """One turn. Returns (stop_reason, the agent's text). Raises AgentDied if the process dies."""
        assert self.conn is not None and self.session_id is not None, "start() first"
        assert self.process is not None and self.process.proc is not None
        turn = asyncio.create_task(self.conn.prompt(session_id=self.session_id, prompt=[acp.text_block(text)]))
        died = asyncio.create_task(self.process.proc.wait())
        try:
            done, _ = await asyncio.wait({turn, died}, return_when=asyncio.FIRST_COMPLETED)
            if turn in done:
                try:
                    resp = turn.result()
                except (ConnectionError, BrokenPipeError, asyncio.IncompleteReadError) as exc:
                    raise AgentDied(f"connection to {self.harness.name} broke: {exc}") from exc
                if resp.usage is not None:
                    self.observer.on_usage(resp.usage.input_tokens, resp.usage.output_tokens, 0.0)
                return resp.stop_reason, self.client.take_text()
            raise AgentDied(
                f"{self.harness.name} exited with code {self.process.proc.returncode} mid-turn; "
                f"stderr: {self.process.stderr_tail(500)}"
            )
        finally:
            for t in (turn, died):
                if not t.done():
                    t.cancel()
            self.client.flush_open_tool_calls()

    async def cancel(self) -> None:
        if self.conn is not None and self.session_id is not None and self.alive:
            with contextlib.suppress(Exception):
                await self.conn.cancel(session_id=self.session_id)

    async def restart(self) -> bool:
        """Restart after a crash. Returns True if the old session was loaded (no hand-off needed)."""
        old = self.session_id
        await self.close()
        self.restarts += 1
        await self.start()
        return bool(old) and self.can_load and self.session_id == old

    async def close(self) -> None:
        await self.client.close_terminals()
        if self.conn is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.conn.close(), 2)
            self.conn = None
        if self.process is not None:
            await self.process.stop()


ObserverFactory = Callable[[str], SessionObserver]
