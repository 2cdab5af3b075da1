"""The agent CLI as a subprocess: its own process group, its stderr redacted on
the way to the log, and one fixed, idempotent shutdown sequence; with a
`SandboxPolicy`, inside its bubblewrap sandbox (sandbox.py), with the host's
end of its relays (egress.py) living as long as it does, and with
`ProcessLimits`, in a cgroup of its own made for it and removed after it
(limits.py).

Shutdown (the order the ACP SDK's own transport uses): close stdin -> wait
`grace_s` -> SIGTERM the group -> wait -> SIGKILL the group. The group goes
down with it, so the agent's shells and helpers never outlive it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from agensh_ray.agent.egress import Egress
from agensh_ray.agent.limits import ProcessLimits
from agensh_ray.agent.sandbox import RELAY_SCRIPT, SandboxPolicy, bwrap_argv, enter_argv
from agensh_ray.errors import AgentDied

STDIO_LIMIT = 50 * 1024 * 1024
"""Longest line the ACP stream may carry (a file written through fs/write_text_file travels in one)."""
STDERR_TAIL_LINES = 200
SANDBOX_SETUP_TIMEOUT_S = 30.0


def _read_to_eof(fd: int) -> bytes:
    data = b""
    try:
        while chunk := os.read(fd, 4096):
            data += chunk
    finally:
        os.close(fd)
    return data


def children_of(pid: int) -> list[int]:
    """The pids of a process's children, from the kernel's list per thread (`/proc/<pid>/task/<tid>/children`),
    without a walk of all of /proc; psutil's walk where the kernel has no such list. Raises psutil's errors, as
    psutil would: AccessDenied, or NoSuchProcess for a process that is gone (or unreadable otherwise)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except PermissionError:
        raise psutil.AccessDenied(pid) from None
    except OSError:
        raise psutil.NoSuchProcess(pid) from None
    out: list[int] = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.extend(int(x) for x in f.read().split())
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue  # the thread ended meanwhile
            return [c.pid for c in psutil.Process(pid).children()]  # a kernel without CONFIG_PROC_CHILDREN
        except PermissionError:
            raise psutil.AccessDenied(pid) from None
        except (OSError, ValueError):  # ESRCH while it exits, or a line cut short
            raise psutil.NoSuchProcess(pid) from None
    return out


def kill_group(proc: asyncio.subprocess.Process, sig: int) -> None:
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
        sandbox: SandboxPolicy | None = None,
        limits: ProcessLimits | None = None,
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
        self.sandbox = sandbox
        self.egress: Egress | None = None
        self.sandbox_pid: int | None = None
        """A process inside the running sandbox (its PID 1, as the host sees it): terminals join it."""
        self._agent: psutil.Process | None = None  # agent_pid()'s find, kept while it lives
        self.limits = limits if sandbox is not None else None
        """Its cgroup and rlimits (sandboxed agents only: a terminal joins them with the sandbox)."""

    async def start(self) -> asyncio.subprocess.Process:
        self.stderr_path.parent.mkdir(parents=True, exist_ok=True)
        self.started_at = time.monotonic()
        argv, pass_fds, info = self.argv, (), None
        if self.sandbox is not None:
            self.egress = Egress(self.sandbox)
            relay_dir = await self.egress.start()
            info, write_end = os.pipe()
            argv, pass_fds = bwrap_argv(self.sandbox, self.argv, relay_dir, info_fd=write_end), (write_end,)
            if self.limits is not None:
                try:
                    await asyncio.to_thread(self.limits.start)
                except BaseException:
                    os.close(write_end)
                    os.close(info)
                    raise
                argv = self.limits.wrap(argv)
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self.env,
                cwd=str(self.cwd),
                limit=STDIO_LIMIT,
                start_new_session=True,
                pass_fds=pass_fds,
            )
        finally:
            for fd in pass_fds:
                os.close(fd)
        self._stderr_task = asyncio.create_task(self._pump_stderr(), name=f"agent-stderr-{self.proc.pid}")
        if info is not None:
            await self._sandbox_started(info)
        return self.proc

    async def _sandbox_started(self, info_fd: int) -> None:
        """Wait for bwrap to report the sandbox (its PID 1); a sandbox that cannot be made is an AgentDied."""
        try:
            raw = await asyncio.wait_for(asyncio.to_thread(_read_to_eof, info_fd), SANDBOX_SETUP_TIMEOUT_S)
            self.sandbox_pid = int(json.loads(raw)["child-pid"])
        except (TimeoutError, ValueError, KeyError) as exc:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.proc.wait(), 2.0)
            await asyncio.sleep(0.1)  # the stderr pump catches bwrap's last words
            why = self.stderr_tail(500).strip() or f"{type(exc).__name__}"
            await self.stop()
            raise AgentDied(self.redact(f"the sandbox (bwrap) did not start: {why}")) from None

    def enter(self, argv: list[str], cwd: Path) -> list[str]:
        """The command line that runs `argv` in `cwd` inside this process's sandbox (as the agent's own)."""
        if self.sandbox_pid is None or not self.alive:
            raise AgentDied("the agent's sandbox is not running")
        group = self.limits.group if self.limits is not None else None
        return enter_argv(self.sandbox_pid, cwd, argv, group.procs_files() if group is not None else [])

    def limit_events(self) -> list[str]:
        """What the kernel enforced in this process's group since the last call ("memory limit ... reached")."""
        return self.limits.events() if self.limits is not None else []

    def death_cause(self) -> str | None:
        """Why the sandbox's process may have died, if a limit was enforced on it in its life ("memory limit ...")."""
        return self.limits.cause() if self.limits is not None else None

    def agent_pid(self) -> int | None:
        """The agent CLI's own process inside the sandbox (below bwrap and the relay), as the host sees it.

        Found once by walking down from the subprocess through its only children (the kernel's list of a
        process's children: a whole-/proc walk, psutil's `children()`, took a fifth of a busy host's CPU with
        every worker's turn asking every 2 s), then kept while that process lives."""
        proc = self.proc
        if proc is None:
            return None
        found = self._agent  # read once: turn and host threads both ask
        if found is not None:
            with contextlib.suppress(psutil.Error):
                # same pid and start time (not a reused pid), and not a zombie its relay has yet to reap
                if found.is_running() and found.status() != psutil.STATUS_ZOMBIE:
                    return found.pid
            self._agent = None
        try:
            p = psutil.Process(proc.pid)
            below_sandbox = False
            while True:
                cmd = p.cmdline()
                if not (cmd and (os.path.basename(cmd[0]) == "bwrap" or str(RELAY_SCRIPT) in cmd)):
                    if cmd and below_sandbox:  # an empty cmdline is a process mid-exec: named, not kept
                        self._agent = p  # the chain below the sandbox is made once: the agent found for good
                    return p.pid
                below_sandbox = True
                kids = children_of(p.pid)
                if len(kids) != 1:
                    return p.pid
                p = psutil.Process(kids[0])
        except psutil.Error:
            return None

    def stopped(self) -> bool:
        """Whether the agent (its CLI's own process, or the top of its sandbox) is stopped: SIGSTOP, SIGTSTP or a
        debugger. A stopped agent answers nothing, however long its turn is given."""
        if not self.alive:
            return False
        for pid in {self.proc.pid, self.agent_pid()} - {None}:
            try:
                if psutil.Process(pid).status() in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP):
                    return True
            except psutil.Error:
                continue
        return False

    def kill_commands(self) -> int:
        """Kill every process the agent started (its shells, builds, tests), not the agent: how many."""
        pid = self.agent_pid()
        if pid is None:
            return 0
        try:
            kids = psutil.Process(pid).children(recursive=True)
        except psutil.Error:
            return 0
        for k in kids:
            with contextlib.suppress(psutil.Error):
                k.kill()
        return len(kids)

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
            if self.egress is not None:
                await self.egress.close()
                self.egress = None
            if self.limits is not None:
                await asyncio.to_thread(self.limits.stop)
            return
        if proc.returncode is None:
            if proc.stdin is not None:
                with contextlib.suppress(Exception):
                    proc.stdin.close()
            for sig in (None, signal.SIGTERM, signal.SIGKILL):
                if sig is not None:
                    kill_group(proc, sig)
                try:
                    await asyncio.wait_for(proc.wait(), timeout=grace_s)
                    break
                except TimeoutError:
                    continue
        # Children of the agent (its shells, its MCP helpers) die with the group.
        kill_group(proc, signal.SIGKILL)
        self.sandbox_pid = None
        if self.egress is not None:
            await self.egress.close()
            self.egress = None
        if self.limits is not None:
            await asyncio.to_thread(self.limits.stop)
        if self._stderr_task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._stderr_task), timeout=1.0)
            except (TimeoutError, Exception):
                self._stderr_task.cancel()
            self._stderr_task = None

    def stderr_tail(self, n: int = 2000) -> str:
        """The last `n` characters this process wrote to stderr (redacted)."""
        return "".join(self._tail)[-n:]


