"""The agent CLI as a subprocess: its own process group, its stderr redacted on
the way to the log, and one fixed, idempotent shutdown sequence.

Shutdown (the order the ACP SDK's own transport uses): close stdin -> wait
`grace_s` -> SIGTERM the group -> wait -> SIGKILL the group. The group goes
down with it, so the agent's shells and helpers never outlive it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

STDIO_LIMIT = 50 * 1024 * 1024
"""Longest line the ACP stream may carry (a file written through fs/write_text_file travels in one)."""
STDERR_TAIL_LINES = 200


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
                    kill_group(proc, sig)
                try:
                    await asyncio.wait_for(proc.wait(), timeout=grace_s)
                    break
                except asyncio.TimeoutError:
                    continue
        # Children of the agent (its shells, its MCP helpers) die with the group.
        kill_group(proc, signal.SIGKILL)
        if self._stderr_task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._stderr_task), timeout=1.0)
            except (asyncio.TimeoutError, Exception):
                self._stderr_task.cancel()
            self._stderr_task = None

    def stderr_tail(self, n: int = 2000) -> str:
        """The last `n` characters this process wrote to stderr (redacted)."""
        return "".join(self._tail)[-n:]


