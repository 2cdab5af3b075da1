"""The ACP client methods an agent calls back into, confined to one worker's
workdir: files (fs/*), terminals (terminal/*), permission requests, and the
session/update notifications the session turns into observer calls.

Permission requests and terminal commands go through the worker's
`PermissionPolicy` (policy.py); a terminal command that passes runs inside
the agent's sandbox when it has one (`enter`, see sandbox.py), so it sees
what the agent sees, with the agent's environment minus its credential
variables. A refusal's reason is in the error the agent gets
(terminal/create, fs/*) or, for a permission request, which ACP answers only
with the option chosen, handed to the observer (the host queues it for the
agent's next tool result).

What real CLIs taught us (see harness.py for the per-CLI quirks):
- tool calls are upserted by id (Claude Code sends `tool_call` twice, Copilot
  sends `tool_call` then `tool_call_update`); the duration runs from the
  first sight of the id to the first completed/failed status;
- session/load replays the old conversation as session/update notifications:
  they are not new tool calls and are not recorded again;
- `usage_update` carries the context size and the session's cumulative cost
  during a turn (the tokens come with the prompt response, see session.py).
"""

from __future__ import annotations

import asyncio
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
    Implementation,
    KillTerminalResponse,
    ReadTextFileResponse,
    ReleaseTerminalResponse,
    RequestPermissionResponse,
    TerminalExitStatus,
    TerminalOutputResponse,
    WaitForTerminalExitResponse,
    WriteTextFileResponse,
)

from agensh_ray.agent.modelroute import SECRET_NAME
from agensh_ray.agent.policy import PermissionPolicy, refusal
from agensh_ray.agent.process import kill_group
from agensh_ray.confined import Confined
from agensh_ray.errors import ConfinementError
from agensh_ray.task.reference import ExecuteOnlyError, execute_only, not_execute_only, read_text

TERMINAL_OUTPUT_LIMIT = 1024 * 1024
REFUSED = -32602
"""The JSON-RPC code of a refused request (invalid params); the message says why."""


@dataclass
class ToolCallRecord:
    """An agent-reported tool call, upserted by id (Claude Code sends `tool_call` twice)."""

    tool_call_id: str
    title: str = ""
    kind: str | None = None
    status: str | None = None
    started: float = field(default_factory=time.perf_counter)
    finished: float | None = None


@dataclass
class TurnUsage:
    """What one turn cost, as far as the agent reports it."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    context_used: int | None = None
    """Tokens in the context window at the end of the turn (usage_update)."""
    context_size: int | None = None


class SessionObserver:
    """Receives what the session sees; the host turns it into trace rows. Override what you need."""

    def on_tool_call(self, rec: ToolCallRecord) -> None: ...
    def on_agent_text(self, text: str) -> None: ...
    def on_usage(self, input_tokens: int, output_tokens: int, cost_usd: float) -> None: ...
    def on_plan(self, entries: list[str]) -> None:
        """The agent's whole current plan, one "[status] content" line per entry."""
    def on_permission(self, title: str, allowed: bool, reason: str) -> None:
        """A permission request was answered (`reason`: why it was refused)."""

    def on_refused(self, what: str, reason: str) -> None:
        """A terminal command or file access was refused before it ran."""



READ_LIMIT = 8 * 1024 * 1024
"""The largest file fs/read_text_file hands out: its text travels in one JSON line, at most ~6 times longer
escaped, which stays under the ACP stream's line limit (STDIO_LIMIT, 50 MiB)."""

EXECUTE_ONLY = ("execute-only: this is the reference program; run it to see what it does, its bytes cannot be "
                "read or written")


def execute_only_refused(path: str) -> RequestError:
    """The task's reference is execute-only: run it, never read or overwrite its bytes through fs/*."""
    return RequestError(REFUSED, f"{path}: {EXECUTE_ONLY}", {"path": path, "reason": EXECUTE_ONLY})


@dataclass
class _Terminal:
    proc: asyncio.subprocess.Process
    limit: int
    output: bytearray = field(default_factory=bytearray)
    truncated: bool = False
    reader: asyncio.Task | None = None


async def initialize(conn: acp.ClientSideConnection, title: str, fs: bool = True):
    """The initialize request every session kind sends: the fs and terminal capabilities of these clients, our
    identity. `fs=False`: no fs/* (the agent reads and writes its files itself, inside its sandbox)."""
    return await conn.initialize(
        protocol_version=acp.PROTOCOL_VERSION,
        client_capabilities=ClientCapabilities(
            fs=FileSystemCapabilities(read_text_file=fs, write_text_file=fs), terminal=True
        ),
        client_info=Implementation(name="agensh-ray", title=title, version="0.1.0"),
    )


class NoExtensions:
    """The ACP client methods we answer the same way in every client: no extensions, nothing on connect."""

    async def ext_method(self, method, params):
        raise RequestError.method_not_found(method)

    async def ext_notification(self, method, params):
        return None

    def on_connect(self, conn) -> None:
        pass


class WorkdirClient(NoExtensions):
    """The ACP client methods, all confined to one workdir.

    Permission requests: allowed or refused by `policy` (choosing the option by
    `kind`, as Copilot CLI expects). Terminals: the command must pass `policy`;
    `enter` (set by the session when its agent is sandboxed) turns it into the
    command line that runs it inside the agent's sandbox.
    """

    def __init__(self, workdir: Path, observer: SessionObserver, policy: PermissionPolicy, env: dict[str, str]):
        self.workdir = workdir
        self.observer = observer
        self.policy = policy
        self.enter: Callable[[list[str], Path], list[str]] | None = None
        self.env = env
        self.tool_calls: dict[str, ToolCallRecord] = {}
        self.replaying = False
        """True while session/load replays the old conversation: nothing is recorded."""
        self.usage = TurnUsage()
        self.cost_total = 0.0
        """Cumulative session cost from the last usage_update."""
        self.redact: Callable[[str], str] = lambda text: text
        """Applied to what reaches the observer (tool titles can hold a command line)."""
        self.files_written: list[Path] = []
        """Files the agent wrote through fs/write_text_file (Claude Code edits this way)."""
        self._confined: Confined | None = None
        self.full: Callable[[], str | None] = lambda: None
        """Why the worker may not write now (over its disk limit: agent/limits.py), or None."""
        self._terminals: dict[str, _Terminal] = {}
        self._next_terminal = 0
        self._text: list[str] = []

    # -- permissions ---------------------------------------------------------------
    def refusal(self, tool_call) -> str | None:
        """Why a tool call is refused, or None to allow it."""
        kind = tool_call.kind or (self.tool_calls[tool_call.tool_call_id].kind
                                  if tool_call.tool_call_id in self.tool_calls else None)
        locations = [loc.path for loc in tool_call.locations or [] if getattr(loc, "path", None)]
        return self.policy.tool_call(kind, tool_call.title or "", tool_call.raw_input, locations)

    async def request_permission(self, options, session_id, tool_call, **kwargs):
        reason = self.refusal(tool_call)
        self.observer.on_permission(self.redact(tool_call.title or ""), reason is None, reason or "")
        wanted = ("reject_once", "reject_always") if reason else ("allow_once", "allow_always")
        for kind in wanted:
            for opt in options:
                if opt.kind == kind:
                    chosen = AllowedOutcome(option_id=opt.option_id, outcome="selected")
                    return RequestPermissionResponse(outcome=chosen)
        return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))

    # -- session updates -----------------------------------------------------------
    async def session_update(self, session_id, update, **kwargs):
        if self.replaying:
            return
        kind = getattr(update, "session_update", None)
        if kind in ("tool_call", "tool_call_update"):
            rec = self.tool_calls.get(update.tool_call_id)
            if rec is None:
                rec = self.tool_calls[update.tool_call_id] = ToolCallRecord(update.tool_call_id)
            if update.title:
                rec.title = self.redact(update.title)
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
            self.observer.on_plan([f"[{e.status}] {e.content}" for e in update.entries])
        elif kind == "usage_update":
            self.usage.context_used, self.usage.context_size = update.used, update.size
            if update.cost is not None:
                self.cost_total = float(update.cost.amount)

    def take_text(self) -> str:
        text, self._text = "".join(self._text), []
        return text

    def flush_open_tool_calls(self) -> None:
        """Tool calls still open when a turn ends count as failed."""
        for rec in self.tool_calls.values():
            if rec.finished is None:
                rec.finished = time.perf_counter()
                rec.status = rec.status if rec.status in ("completed", "failed") else "failed"
                self.observer.on_tool_call(rec)
        self.tool_calls.clear()

    # -- files ----------------------------------------------------------------------
    # Every path the agent names is opened beneath the workdir's fd, never following a link (confined.py): the
    # agent can swap any part of it for a link at any moment, and these calls run in the host process.
    @property
    def confined(self) -> Confined:
        """The workdir, opened once (on first use: the clone may be made after the client)."""
        if self._confined is None:
            self._confined = Confined(self.workdir, what="the worker's workdir")
        return self._confined

    def _refused(self, what: str, path: str, exc: OSError) -> RequestError:
        """The refusal of a file access the agent asked for (told to the observer too)."""
        if isinstance(exc, ConfinementError):
            reason, text = exc.reason, str(exc)
        elif isinstance(exc, PermissionError) and self._is_reference(path):
            return execute_only_refused(path)  # a host not running as root cannot open it at all
        else:
            reason = exc.strerror or type(exc).__name__
            text = f"{path}: {reason}"
        self.observer.on_refused(f"{what} {path}", reason)
        return RequestError(REFUSED, refusal(text), {"path": path, "reason": reason})

    def _is_reference(self, path: str) -> bool:
        """Is `path` the execute-only reference (for the wording of a refusal only)?"""
        try:
            return self.confined.is_file(path) and execute_only(self.confined.path(path))
        except OSError:
            return False

    async def read_text_file(self, path, session_id, limit=None, line=None, **kwargs):
        try:  # the execute-only check is made on the file opened (reference.py)
            text = read_text(self.confined, path, READ_LIMIT)
        except ExecuteOnlyError:
            raise execute_only_refused(path) from None
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise RequestError.resource_not_found(str(path)) from None
        except OSError as exc:
            raise self._refused("fs/read_text_file", path, exc) from None
        if line is not None or limit is not None:
            lines = text.splitlines(keepends=True)
            start = max((line or 1) - 1, 0)
            end = start + limit if limit is not None else None
            text = "".join(lines[start:end])
        return ReadTextFileResponse(content=text)

    async def write_text_file(self, content, path, session_id, **kwargs):
        if (full := self.full()) is not None:
            self.observer.on_refused(f"fs/write_text_file {path}", full)
            raise RequestError(REFUSED, full, {"path": path, "reason": full})
        try:  # opened without truncating, checked (regular, not the reference), then truncated and written
            p = self.confined.write_text(path, content, check=not_execute_only)
        except ExecuteOnlyError:
            raise execute_only_refused(path) from None
        except OSError as exc:
            raise self._refused("fs/write_text_file", path, exc) from None
        self.files_written.append(p)
        return WriteTextFileResponse()

    # -- terminals ------------------------------------------------------------------
    async def create_terminal(self, command, session_id, args=None, cwd=None, env=None, output_byte_limit=None, **kw):
        cwd_fd = None
        if cwd:  # opened beneath the workdir; the host starts the command in that directory by its fd
            try:
                cwd_fd = self.confined.open_dir(cwd)
            except FileNotFoundError:
                raise RequestError.invalid_params({"cwd": cwd, "reason": "no such directory"}) from None
            except OSError as exc:
                raise self._refused("terminal/create in", cwd, exc) from None
        try:
            return await self._create_terminal(command, args, cwd, cwd_fd, env, output_byte_limit)
        finally:
            if cwd_fd is not None:
                os.close(cwd_fd)

    async def _create_terminal(self, command, args, cwd, cwd_fd, env, output_byte_limit):
        workdir = self.confined.path(cwd) if cwd else self.workdir
        # The agent's environment without its credentials: a command (and whatever it prints) needs none.
        merged = {k: v for k, v in self.env.items() if not SECRET_NAME.search(k)}
        for var in env or []:
            merged[var.name] = var.value
        argv = [command, *(args or [])]
        if not args and " " in command:
            argv = ["/bin/sh", "-c", command]
        reason = self.policy.command(argv, workdir)
        if reason:
            self.observer.on_refused(self.redact(" ".join(argv))[:500], reason)
            raise RequestError(REFUSED, refusal(reason), {"command": self.redact(" ".join(argv))[:500]})
        if self.enter is not None:
            try:
                argv = self.enter(argv, workdir)
            except Exception as exc:
                raise RequestError.internal_error({"reason": str(exc)}) from exc
        proc = await asyncio.create_subprocess_exec(
            *argv,
            cwd=f"/proc/self/fd/{cwd_fd}" if cwd_fd is not None else str(workdir),
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
        kill_group(term.proc, signal.SIGKILL)
        return KillTerminalResponse()

    async def release_terminal(self, session_id, terminal_id, **kwargs):
        term = self._terminals.pop(terminal_id, None)
        if term is not None and term.proc.returncode is None:
            kill_group(term.proc, signal.SIGKILL)
        return ReleaseTerminalResponse()

    def kill_terminals(self) -> int:
        """Kill the terminals still running (their output stays readable): how many."""
        running = [t for t in self._terminals.values() if t.proc.returncode is None]
        for t in running:
            kill_group(t.proc, signal.SIGKILL)
        return len(running)

    async def close_terminals(self) -> None:
        for tid in list(self._terminals):
            await self.release_terminal("", tid)
