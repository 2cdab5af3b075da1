"""The worker's side of the Agent Client Protocol: spawn the agent CLI, drive
its session with the official `agent-client-protocol` SDK, answer its fs,
terminal and permission requests inside the worker's workdir, and turn its
session/update notifications into observer calls (the host writes the trace).

Layering follows the SDK: a subprocess transport (`AgentProcess`), the SDK's
`ClientSideConnection`, and a thin facade (`AgentSession`) the worker loop
uses: ``start() -> prompt(text) -> ... -> restart() -> ... -> close()``.

What real CLIs taught us (see harness.py for the per-CLI quirks):
- tool calls are upserted by id (Claude Code sends `tool_call` twice, Copilot
  sends `tool_call` then `tool_call_update`); the duration runs from the
  first sight of the id to the first completed/failed status;
- session/load replays the old conversation as session/update notifications:
  they are not new tool calls and are not recorded again;
- usage comes two ways: `usage_update` (context size, cumulative cost) during
  the turn and `PromptResponse.usage` (tokens of the turn) at its end; the
  observer gets one `on_usage` per turn;
- credentials never reach a log: the agent's stderr is redacted line by line
  on its way to the log file, and so is every error message we raise.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import os
import re
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
    KillTerminalResponse,
    ReadTextFileResponse,
    ReleaseTerminalResponse,
    RequestPermissionResponse,
    TerminalExitStatus,
    TerminalOutputResponse,
    WaitForTerminalExitResponse,
    WriteTextFileResponse,
)

from agensh_ray.errors import AgentDied, AgentNeedsCredentials, TurnFailed
from agensh_ray.harness import Harness

log = logging.getLogger(__name__)

STDIO_LIMIT = 50 * 1024 * 1024
TERMINAL_OUTPUT_LIMIT = 1024 * 1024
STDERR_TAIL_LINES = 200
AUTH_REQUIRED = -32000
"""ACP's error code for `auth_required`."""
PATH_KEYS = ("path", "file_path", "filePath", "notebook_path", "cwd", "directory", "dir")
EDIT_KINDS = {"edit", "delete", "move"}


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
    def on_permission(self, title: str, allowed: bool, reason: str) -> None: ...


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


def _inside(workdir: Path, path: str) -> bool:
    try:
        confine(workdir, path)
        return True
    except RequestError:
        return False


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
    expects) unless the tool call matches a deny pattern or edits a path
    outside the workdir.
    """

    def __init__(self, workdir: Path, observer: SessionObserver, deny: list[str], env: dict[str, str]):
        self.workdir = workdir
        self.observer = observer
        self.deny = [d.lower() for d in deny]
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
        self._terminals: dict[str, _Terminal] = {}
        self._next_terminal = 0
        self._text: list[str] = []

    # -- permissions ---------------------------------------------------------------
    def refusal(self, tool_call) -> str | None:
        """Why a tool call is refused, or None to allow it."""
        raw = tool_call.raw_input
        described = f"{tool_call.title or ''} {json.dumps(raw, default=str) if raw is not None else ''}".lower()
        for d in self.deny:
            if d in described:
                return f"matches the deny pattern {d!r}"
        paths = [loc.path for loc in tool_call.locations or [] if getattr(loc, "path", None)]
        if isinstance(raw, dict):
            paths += [str(raw[k]) for k in PATH_KEYS if isinstance(raw.get(k), str)]
        kind = tool_call.kind or (self.tool_calls[tool_call.tool_call_id].kind
                                  if tool_call.tool_call_id in self.tool_calls else None)
        if kind in EDIT_KINDS or kind is None:
            for p in paths:
                if not _inside(self.workdir, p):
                    return f"{p} is outside the worker's workdir"
        return None

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
        self.files_written.append(p)
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

    Its stderr goes, line by line and redacted, to `stderr_path` (appended:
    restarts of one worker share the file) and to an in-memory tail of this
    process only. Shutdown is a fixed sequence: close stdin -> wait `grace_s`
    -> SIGTERM the group -> wait -> SIGKILL the group. `stop()` is idempotent.
    """

    def __init__(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: Path,
        stderr_path: Path,
        redact: Callable[[str], str] | None = None,
    ):
        self.argv = argv
        self.env = env
        self.cwd = cwd
        self.stderr_path = stderr_path
        self.redact = redact or (lambda s: s)
        self.proc: asyncio.subprocess.Process | None = None
        self.started_at: float | None = None
        self._tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        self._stderr_task: asyncio.Task | None = None

    async def start(self) -> asyncio.subprocess.Process:
        self.stderr_path.parent.mkdir(parents=True, exist_ok=True)
        self.started_at = time.monotonic()
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self.env,
            cwd=str(self.cwd),
            limit=STDIO_LIMIT,
            start_new_session=True,
        )
        self._stderr_task = asyncio.create_task(self._pump_stderr(), name=f"agent-stderr-{self.proc.pid}")
        return self.proc

    async def _pump_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        with open(self.stderr_path, "a", encoding="utf-8") as f:
            f.write(f"--- pid {self.proc.pid}: {self.redact(' '.join(self.argv))}\n")
            f.flush()
            while True:
                try:
                    raw = await self.proc.stderr.readline()
                except (ValueError, asyncio.LimitOverrunError):
                    continue  # an over-long line: dropped
                if not raw:
                    break
                line = self.redact(raw.decode("utf-8", "replace"))
                self._tail.append(line)
                f.write(line)
                f.flush()

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
        # Children of the agent (its shells, its MCP helpers) die with the group.
        _kill_group(proc, signal.SIGKILL)
        if self._stderr_task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._stderr_task), timeout=1.0)
            except (asyncio.TimeoutError, Exception):
                self._stderr_task.cancel()
            self._stderr_task = None

    def stderr_tail(self, n: int = 2000) -> str:
        """The last `n` characters this process wrote to stderr (redacted)."""
        return "".join(self._tail)[-n:]


def _forge_tokens(workdir: Path) -> list[str]:
    """Passwords in the clone's remote URLs (http://user:token@host/...): agents may echo them."""
    try:
        config = (workdir / ".git" / "config").read_text()
    except OSError:
        return []
    return re.findall(r"://[^/:@\s]+:([^@\s]+)@", config)


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
        secrets: dict[str, str] | None = None,
    ):
        self.harness = harness
        self.worker_id = worker_id
        self.workdir = workdir
        self.home = home
        self.mcp_url = mcp_url
        self.observer = observer
        self.env = harness.environment(home=home, extra=extra_env or {}, secrets=secrets)
        self._secrets = harness.secret_values(self.env)
        if "/w/" in mcp_url:  # .../w/<worker>/<token>/mcp: the token is a credential too
            self._secrets.append(mcp_url.rstrip("/").rsplit("/", 2)[-2])
        self._secrets += _forge_tokens(workdir)
        self.client = WorkdirClient(workdir, observer, list(deny or harness.default_deny), self.env)
        self.client.redact = self.redact
        self.log_dir = log_dir or home
        self.process: AgentProcess | None = None
        self.conn: acp.ClientSideConnection | None = None
        self.session_id: str | None = None
        self.can_load = False
        self.restarts = 0
        self.start_s: float | None = None
        """Wall seconds the last start took (spawn to session ready)."""
        self._cost_before = 0.0
        self._tokens_seen = (0, 0)
        """Session token totals last reported (agents with cumulative usage)."""

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.alive

    def redact(self, text: str) -> str:
        """`text` without this session's credentials (API keys, tokens, its MCP URL token)."""
        for v in self._secrets:
            if v and len(v) >= 6:
                text = text.replace(v, "***")
        return text

    def _mcp_servers(self) -> list[HttpMcpServer]:
        return [HttpMcpServer(name="agensh", url=self.mcp_url, headers=[], type="http")]

    def _failure(self, what: str, exc: BaseException | str) -> AgentDied:
        tail = self.process.stderr_tail() if self.process else ""
        detail = exc if isinstance(exc, str) else (str(exc) or type(exc).__name__)
        if isinstance(exc, RequestError) and exc.data:
            detail += f" {exc.data}"
        cls = AgentDied
        if isinstance(exc, RequestError) and (
            exc.code == AUTH_REQUIRED or any(w in str(exc).lower() for w in ("auth", "api key", "credential"))
        ):
            cls = AgentNeedsCredentials
            what += f" (it needs credentials: {self.harness.credentials_hint or 'see its documentation'})"
        text = f"{self.harness.name} {what}: {detail}"
        if tail.strip():
            text += f"; stderr: {tail.strip()}"
        return cls(self.redact(text))

    async def start(self, timeout_s: float = 120.0) -> str:
        """Spawn the agent, initialize, and open a new session (or load the old one after a crash)."""
        t0 = time.monotonic()
        await asyncio.to_thread(self.harness.prepare, self.env)
        self.process = AgentProcess(
            self.harness.argv(), self.env, self.workdir, self.log_dir / f"{self.worker_id}.agent.stderr", self.redact
        )
        proc = await self.process.start()
        self.conn = acp.connect_to_agent(self.client, proc.stdin, proc.stdout)
        died = asyncio.create_task(proc.wait())
        try:
            init = await self._or_died(
                self.conn.initialize(
                    protocol_version=acp.PROTOCOL_VERSION,
                    client_capabilities=ClientCapabilities(
                        fs=FileSystemCapabilities(read_text_file=True, write_text_file=True), terminal=True
                    ),
                    client_info=Implementation(name="agensh-ray", title="agensh-ray worker", version="0.1.0"),
                ),
                died, timeout_s, "initialize",
            )
            caps = init.agent_capabilities
            self.can_load = bool(caps and caps.load_session)
            mcp = caps.mcp_capabilities if caps else None
            if mcp is None or not mcp.http:  # the spec says it should not take one; some still do (our sim)
                log.info("%s: %s does not advertise HTTP MCP servers; offering ours anyway",
                            self.worker_id, self.harness.name)
            method = self.harness.auth_method(self.env, [m.id for m in init.auth_methods or []])
            if method:
                await self._or_died(self.conn.authenticate(method_id=method), died, timeout_s, "authenticate")
            loaded = False
            if self.session_id and self.can_load:
                self.client.replaying = True
                try:
                    await self._or_died(
                        self.conn.load_session(
                            cwd=str(self.workdir), session_id=self.session_id, mcp_servers=self._mcp_servers()
                        ),
                        died, timeout_s, "session/load",
                    )
                    loaded = True
                except AgentDied as exc:
                    if not self.alive:
                        raise
                    log.warning("%s: session/load failed, opening a new session: %s", self.worker_id, exc)
                finally:
                    self.client.replaying = False
            if not loaded:
                resp = await self._or_died(
                    self.conn.new_session(cwd=str(self.workdir), mcp_servers=self._mcp_servers()),
                    died, timeout_s, "session/new",
                )
                self.session_id = resp.session_id
        except BaseException:
            await self.close()
            raise
        finally:
            if not died.done():
                died.cancel()
        self.start_s = time.monotonic() - t0
        return self.session_id

    async def _or_died(self, coro, died: asyncio.Task, timeout_s: float, what: str):
        """Await an ACP request, failing fast (not hanging) if the process exits or the timeout passes."""
        call = asyncio.ensure_future(coro)
        done, _ = await asyncio.wait({call, died}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        if call in done:
            try:
                return call.result()
            except RequestError as exc:
                raise self._failure(f"refused {what}", exc) from exc
            except (ConnectionError, BrokenPipeError, asyncio.IncompleteReadError) as exc:
                with contextlib.suppress(asyncio.TimeoutError):  # usually the process is exiting
                    await asyncio.wait_for(asyncio.shield(died), 2.0)
                if not died.done():
                    raise self._failure(f"broke the connection during {what}", exc) from exc
                done = {died}
        call.cancel()
        if died in done:
            await asyncio.sleep(0.2)  # let the stderr pump catch the last words
            raise self._failure(f"exited with code {died.result()} during {what}", "")
        raise self._failure(f"did not answer {what} in {timeout_s:.0f}s", "timeout")

    async def prompt(self, text: str) -> tuple[str, str]:
        """One turn. Returns (stop_reason, the agent's text). Raises AgentDied if the process dies."""
        assert self.conn is not None and self.session_id is not None, "start() first"
        assert self.process is not None and self.process.proc is not None
        self.client.usage = TurnUsage()
        self._cost_before = self.client.cost_total
        turn = asyncio.create_task(self.conn.prompt(session_id=self.session_id, prompt=[acp.text_block(text)]))
        died = asyncio.create_task(self.process.proc.wait())
        try:
            done, _ = await asyncio.wait({turn, died}, return_when=asyncio.FIRST_COMPLETED)
            if turn in done:
                try:
                    resp = turn.result()
                except RequestError as exc:
                    detail = f"{exc} {exc.data}" if exc.data else str(exc)
                    raise TurnFailed(self.redact(f"{self.harness.name} failed the turn: {detail}")) from None
                except (ConnectionError, BrokenPipeError, asyncio.IncompleteReadError) as exc:
                    # Usually the process is dying: give it a moment so the crash is reported as such.
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(asyncio.shield(died), 2.0)
                    if not died.done():
                        why = f"connection to {self.harness.name} broke mid-turn: {exc}"
                        raise AgentDied(self.redact(why)) from exc
                    resp = None
                if resp is not None:
                    await asyncio.sleep(0)  # notifications sent before the response are handled first
                    return self._turn_done(resp)
            await asyncio.sleep(0.2)  # let the stderr pump catch the last words
            tail = self.process.stderr_tail(500).strip()
            raise AgentDied(
                self.redact(
                    f"{self.harness.name} exited with code {self.process.proc.returncode} mid-turn"
                    + (f"; stderr: {tail}" if tail else "")
                )
            )
        finally:
            for t in (turn, died):
                if not t.done():
                    t.cancel()
            self.client.flush_open_tool_calls()

    def _turn_done(self, resp) -> tuple[str, str]:
        """Report the turn's usage and text to the observer; return (stop_reason, text)."""
        usage = self.client.usage
        if resp.usage is not None:
            tokens = (resp.usage.input_tokens, resp.usage.output_tokens)
            if self.harness.cumulative_usage:
                # Session totals: the turn is the difference (a total that went down means the agent restarted
                # its count, e.g. a new process after a crash).
                prev = self._tokens_seen
                self._tokens_seen = tokens
                if tokens[0] >= prev[0] and tokens[1] >= prev[1]:
                    tokens = (tokens[0] - prev[0], tokens[1] - prev[1])
            usage.input_tokens, usage.output_tokens = tokens
        usage.cost_usd = max(0.0, self.client.cost_total - self._cost_before)
        if resp.usage is not None or usage.cost_usd:
            self.observer.on_usage(usage.input_tokens, usage.output_tokens, usage.cost_usd)
        reply = self.client.take_text()
        if reply:
            self.observer.on_agent_text(reply)
        return resp.stop_reason, reply

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
        return bool(old) and self.session_id == old

    async def close(self) -> None:
        await self.client.close_terminals()
        if self.conn is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.conn.close(), 2)
            self.conn = None
        if self.process is not None:
            await self.process.stop()


ObserverFactory = Callable[[str], SessionObserver]
