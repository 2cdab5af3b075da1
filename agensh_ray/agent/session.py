"""One worker's agent behind the Agent Client Protocol: the facade the worker
loop uses, ``start() -> prompt(text) -> ... -> restart() -> ... -> close()``
(`agensh_ray.seams.AgentSession`).

Layering follows the official SDK: a subprocess transport (`AgentProcess`),
the SDK's `ClientSideConnection`, and this thin facade. Two kinds of session
implement it and share everything but how the agent process is reached:

- `ProcessSession`: one agent process per worker (every real CLI; the
  production shape). It authenticates, and after a crash restores the old
  conversation with session/load where the agent supports it.
- `MuxSession` (mux.py): one ACP session on a process shared by a host's
  workers (the `sim` harness when simulating scale on a small machine).

What they share lives in `AcpSession`: the workdir-confined client and its
permission policy, the sandbox's view of the endpoints (the MCP URL and the
environment as the agent reaches them from inside), a turn raced against the
death of the process and its deadline (AgentDied when it dies, TurnFailed when
the agent answers the turn with an error, TurnDeadline when the deadline passes:
the agent's process group is killed first, since an agent that stopped
answering ACP, a SIGSTOP included, would otherwise hold its worker until the
end of the run), the usage of a turn, and redaction:
credentials never reach a log or an error message.

Usage comes two ways: `usage_update` (context size, cumulative cost) during
the turn and `PromptResponse.usage` (tokens of the turn, or of the session
for agents that count cumulatively) at its end; the observer gets one
`on_usage` per turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
import time
from pathlib import Path

import acp
from acp import RequestError
from acp.schema import HttpHeader, HttpMcpServer

from agensh_ray.agent.client import SessionObserver, TurnUsage, WorkdirClient, initialize
from agensh_ray.agent.harness import Harness
from agensh_ray.agent.policy import PermissionPolicy
from agensh_ray.agent.process import AgentProcess, kill_group
from agensh_ray.agent.limits import ProcessLimits
from agensh_ray.agent.sandbox import SandboxPolicy
from agensh_ray.agent.warmup import start_once
from agensh_ray.confined import Confined
from agensh_ray.errors import AgentDied, AgentNeedsCredentials, TurnDeadline, TurnFailed
from agensh_ray.models import GatewayEndpoint

log = logging.getLogger(__name__)

AUTH_REQUIRED = -32000
"""ACP's error code for `auth_required`."""
CONNECTION_ERRORS = (ConnectionError, BrokenPipeError, asyncio.IncompleteReadError)
STOPPED_CHECK_S = 2.0
"""How often a turn looks whether its agent process is stopped (`prompt(stopped_s=...)`)."""


def forge_tokens(workdir: Path) -> list[str]:
    """Passwords in the clone's remote URLs (http://user:token@host/...): agents may echo them. The config is
    the worker's: read beneath the clone without following a link, bounded (agensh_ray/confined.py)."""
    try:
        with Confined(workdir) as root:
            config = root.read_text(".git/config", 1 << 20, whole=False)
    except OSError:
        return []
    return re.findall(r"://[^/:@\s]+:([^@\s]+)@", config)


def reported_tokens(resp) -> tuple[int, int] | None:
    """(input, output) tokens a PromptResponse reports: ACP's `usage`, else Gemini CLI's
    `_meta.quota.token_count` (the turn's totals over its model calls); None when it reports neither."""
    if resp.usage is not None:
        return resp.usage.input_tokens, resp.usage.output_tokens
    quota = (resp.field_meta or {}).get("quota")
    count = quota.get("token_count") if isinstance(quota, dict) else None
    if isinstance(count, dict):
        i, o = count.get("input_tokens"), count.get("output_tokens")
        if isinstance(i, int) and isinstance(o, int) and not isinstance(i, bool) and not isinstance(o, bool):
            return i, o
    return None

class AcpSession:
    """What both session kinds share; subclasses say how the connection and the process are reached."""

    def __init__(self, harness: Harness, worker_id: str, workdir: Path, mcp_url: str, observer: SessionObserver,
                 env: dict[str, str], sandbox: SandboxPolicy | None = None):
        self.harness = harness
        self.worker_id = worker_id
        self.workdir = workdir
        self.sandbox = sandbox
        self.mcp_url = sandbox.inside_url(mcp_url) if sandbox else mcp_url
        """The MCP URL as the agent reaches it (from inside its sandbox)."""
        self.observer = observer
        self.env = sandbox.agent_env(env) if sandbox else env
        """The agent's environment, as it is inside its sandbox; its terminals get the same."""
        self._secrets = harness.secret_values(env)
        if "/w/" in mcp_url:  # .../w/<worker>/<token>/mcp: the token is a credential too
            self._secrets.append(mcp_url.rstrip("/").rsplit("/", 2)[-2])
        self._secrets += forge_tokens(workdir)
        policy = PermissionPolicy(workdir, worker_id, private_tmp=sandbox is not None)
        self.client = WorkdirClient(workdir, observer, policy, self.env)
        self.client.redact = self.redact
        self.session_id: str | None = None
        self.restarts = 0
        self._cost_before = 0.0
        self._tokens_seen = (0, 0)
        """Session token totals last reported (agents with cumulative usage)."""

    # -- reached differently by each kind --------------------------------------------
    @property
    def conn(self) -> acp.ClientSideConnection | None:
        raise NotImplementedError

    @property
    def process(self) -> AgentProcess | None:
        raise NotImplementedError

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.alive

    # -- shared ------------------------------------------------------------------------
    def redact(self, text: str) -> str:
        """`text` without this session's credentials (API keys, tokens, its MCP URL token)."""
        for v in self._secrets:
            if v and len(v) >= 6:
                text = text.replace(v, "***")
        return text

    def _mcp_servers(self) -> list[HttpMcpServer]:
        """Our MCP server; for a CLI that sends ACP's headers, the worker's token travels in one (tools.py)."""
        url, headers = self.mcp_url, []
        if self.harness.mcp_headers and "/w/" in url:
            head, token, tail = url.rstrip("/").rsplit("/", 2)
            url = f"{head}/{tail}"
            headers = [HttpHeader(name="Authorization", value=f"Bearer {token}")]
        return [HttpMcpServer(name="agensh", url=url, headers=headers, type="http")]

    def _stderr_tail(self, n: int = 500) -> str:
        return self.process.stderr_tail(n).strip() if self.process else ""

    async def prompt(self, text: str, deadline_s: float | None = None,
                     stopped_s: float | None = None) -> tuple[str, str]:
        """One turn. Returns (stop_reason, the agent's text). Raises AgentDied if the process dies or its
        connection breaks, TurnFailed if the agent answers the turn with an error, TurnDeadline (after killing
        the agent's process group) if the turn is still running `deadline_s` wall seconds after it began, or
        if its process has been stopped (SIGSTOP) for `stopped_s` wall seconds (looked at every few seconds)."""
        conn, process = self.conn, self.process
        assert conn is not None and self.session_id is not None, "start() first"
        assert process is not None and process.proc is not None
        self.client.usage = TurnUsage()
        self._cost_before = self.client.cost_total
        turn = asyncio.create_task(conn.prompt(session_id=self.session_id, prompt=[acp.text_block(text)]))
        died = asyncio.create_task(process.proc.wait())
        try:
            done = await self._wait_turn(turn, died, process, deadline_s, stopped_s)
            if turn in done:
                try:
                    resp = turn.result()
                except RequestError as exc:
                    detail = f"{exc} {exc.data}" if exc.data else str(exc)
                    raise TurnFailed(self.redact(f"{self.harness.name} failed the turn: {detail}")) from None
                except CONNECTION_ERRORS as exc:
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
            tail = self._stderr_tail()
            cause = process.death_cause()
            raise AgentDied(self.redact(
                (f"agent killed: {cause}; " if cause else "")
                + f"{self.harness.name} exited with code {process.proc.returncode} mid-turn"
                + (f"; stderr: {tail}" if tail else "")
            ))
        finally:
            for t in (turn, died):
                if not t.done():
                    t.cancel()
            self.client.flush_open_tool_calls()

    async def _wait_turn(self, turn: asyncio.Task, died: asyncio.Task, process: AgentProcess,
                         deadline_s: float | None, stopped_s: float | None) -> set:
        """The turn's end or the process's death (the tasks done); past the deadline, or stopped for `stopped_s`,
        the agent is killed and TurnDeadline raised."""
        t0 = time.monotonic()
        stopped_since: float | None = None
        while True:
            left = None if deadline_s is None else t0 + deadline_s - time.monotonic()
            if left is not None and left <= 0:
                why = await self.end_overdue_turn()
                raise TurnDeadline(f"turn deadline passed: no end of turn from {self.harness.name} after "
                                   f"{deadline_s:.0f} s; {why}")
            step = left if stopped_s is None else min(STOPPED_CHECK_S, left if left is not None else STOPPED_CHECK_S)
            done, _ = await asyncio.wait({turn, died}, timeout=step, return_when=asyncio.FIRST_COMPLETED)
            if done:
                return done
            if stopped_s is None:
                continue
            if not await asyncio.to_thread(process.stopped):
                stopped_since = None
                continue
            now = time.monotonic()
            stopped_since = stopped_since or now
            if now - stopped_since >= stopped_s:
                why = self.kill_agent()
                raise TurnDeadline(f"{self.harness.name} stopped (SIGSTOP or a debugger) for {now - stopped_since:.0f} "
                                   f"s mid-turn, answering nothing; {why}", stopped=True)

    async def end_overdue_turn(self) -> str:
        """The turn passed its deadline: end it (here by killing the agent; a session on a shared process ends only
        itself, agent/mux.py); what was done."""
        return self.kill_agent()

    def kill_agent(self) -> str:
        """SIGKILL the agent's process group, and the agent CLI's own process in its sandbox (bwrap may give it a
        session of its own), stopped or not; what was killed. `restart()` cleans up after it as after a crash."""
        process = self.process
        if process is None or process.proc is None or not process.alive:
            return "its process had already exited"
        inner = process.agent_pid()
        kill_group(process.proc, signal.SIGKILL)
        if inner is not None and inner != process.proc.pid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(inner, signal.SIGKILL)
        return f"its process group {process.proc.pid} killed" + (
            f" (and the agent's own process {inner})" if inner is not None and inner != process.proc.pid else "")

    def _turn_done(self, resp) -> tuple[str, str]:
        """Report the turn's usage and text to the observer; return (stop_reason, text)."""
        usage = self.client.usage
        reported = reported_tokens(resp)
        if reported is not None:
            tokens = reported
            if self.harness.cumulative_usage:
                # Session totals: the turn is the difference (a total that went down means the agent restarted
                # its count, e.g. a new process after a crash).
                prev = self._tokens_seen
                self._tokens_seen = tokens
                if tokens[0] >= prev[0] and tokens[1] >= prev[1]:
                    tokens = (tokens[0] - prev[0], tokens[1] - prev[1])
            usage.input_tokens, usage.output_tokens = tokens
        usage.cost_usd = max(0.0, self.client.cost_total - self._cost_before)
        if reported is not None or usage.cost_usd:
            self.observer.on_usage(usage.input_tokens, usage.output_tokens, usage.cost_usd)
        reply = self.client.take_text()
        if reply:
            self.observer.on_agent_text(reply)
        return resp.stop_reason, reply

    async def cancel(self) -> None:
        if self.conn is not None and self.session_id is not None and self.alive:
            with contextlib.suppress(Exception):
                await self.conn.cancel(session_id=self.session_id)


class ProcessSession(AcpSession):
    """A worker's own agent process: spawn, initialize, authenticate, open (or reload) the session."""

    def __init__(
        self,
        harness: Harness,
        worker_id: str,
        workdir: Path,
        home: Path,
        mcp_url: str,
        observer: SessionObserver,
        extra_env: dict[str, str] | None = None,
        log_dir: Path | None = None,
        secrets: dict[str, str] | None = None,
        gateway: GatewayEndpoint | None = None,
        sandbox: SandboxPolicy | None = None,
        model: str | None = None,
        limits: ProcessLimits | None = None,
    ):
        self.model = model
        """The model the agent is told to use (None: the CLI's own choice)."""
        self.host_env = harness.environment(home=home, extra=extra_env or {}, secrets=secrets,
                                            gateway=gateway, model=model)
        """The agent's environment as the host sees it (before the sandbox's rewrites)."""
        super().__init__(harness, worker_id, workdir, mcp_url, observer, self.host_env, sandbox)
        self.home = home
        self.limits = limits
        """Its resource limits (with the sandbox: limits.py)."""
        self.log_dir = log_dir or home
        self._process: AgentProcess | None = None
        self._conn: acp.ClientSideConnection | None = None
        self.can_load = False
        self.start_s: float | None = None
        """Wall seconds the last start took (spawn to session ready)."""

    @property
    def conn(self) -> acp.ClientSideConnection | None:
        return self._conn

    @property
    def process(self) -> AgentProcess | None:
        return self._process

    def _failure(self, what: str, exc: BaseException | str) -> AgentDied:
        tail = self._stderr_tail(2000)
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
        cause = self._process.death_cause() if self._process is not None else None
        if cause:
            text = f"agent killed: {cause}; {text}"
        if tail:
            text += f"; stderr: {tail}"
        return cls(self.redact(text))

    async def start(self, timeout_s: float = 120.0) -> str:
        """Spawn the agent, initialize, and open a new session (or load the old one after a crash)."""
        t0 = time.monotonic()
        await asyncio.to_thread(self.harness.prepare, self.host_env, start_once)
        self._process = AgentProcess(
            self.harness.launch_argv(self.env, self.model), self.env, self.workdir,
            self.log_dir / f"{self.worker_id}.agent.stderr", self.redact, sandbox=self.sandbox, limits=self.limits,
        )
        if self.sandbox is not None:
            self.client.enter = self._process.enter
        proc = await self._process.start()
        self._conn = acp.connect_to_agent(self.client, proc.stdin, proc.stdout)
        died = asyncio.create_task(proc.wait())
        try:
            hello = initialize(self._conn, "agensh-ray worker", self.harness.acp_fs)
            init = await self._or_died(hello, died, timeout_s, "initialize")
            caps = init.agent_capabilities
            self.can_load = bool(caps and caps.load_session)
            mcp = caps.mcp_capabilities if caps else None
            if mcp is None or not mcp.http:  # the spec says it should not take one; some still do (our sim)
                log.info("%s: %s does not advertise HTTP MCP servers; offering ours anyway",
                         self.worker_id, self.harness.name)
            method = self.harness.auth_method(self.env, [m.id for m in init.auth_methods or []])
            if method:
                await self._or_died(self._conn.authenticate(method_id=method), died, timeout_s, "authenticate")
            if not (self.session_id and self.can_load and await self._load(died, timeout_s)):
                resp = await self._or_died(
                    self._conn.new_session(cwd=str(self.workdir), mcp_servers=self._mcp_servers()),
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

    async def _load(self, died: asyncio.Task, timeout_s: float) -> bool:
        """session/load of the old conversation (its replay is not recorded again); False if it failed."""
        self.client.replaying = True
        try:
            await self._or_died(
                self._conn.load_session(cwd=str(self.workdir), session_id=self.session_id,
                                        mcp_servers=self._mcp_servers()),
                died, timeout_s, "session/load",
            )
            return True
        except AgentDied as exc:
            if not self.alive:
                raise
            log.warning("%s: session/load failed, opening a new session: %s", self.worker_id, exc)
            return False
        finally:
            self.client.replaying = False

    async def _or_died(self, coro, died: asyncio.Task, timeout_s: float, what: str):
        """Await an ACP request, failing fast (not hanging) if the process exits or the timeout passes."""
        call = asyncio.ensure_future(coro)
        done, _ = await asyncio.wait({call, died}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        if call in done:
            try:
                return call.result()
            except RequestError as exc:
                raise self._failure(f"refused {what}", exc) from exc
            except CONNECTION_ERRORS as exc:
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

    async def restart(self) -> bool:
        """Restart after a crash. Returns True if the old session was loaded (no hand-off needed)."""
        old = self.session_id
        await self.close()
        self.restarts += 1
        await self.start()
        return bool(old) and self.session_id == old

    async def close(self) -> None:
        await self.client.close_terminals()
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._conn.close(), 2)
            self._conn = None
        if self._process is not None:
            await self._process.stop()
