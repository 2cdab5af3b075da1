"""Liveness, not only death: the judgement of one actor's heartbeats, and the probe that tells a process that
answers from one whose event loop is stuck. Plain code (no Ray): actors/supervise.py's Watch sends the
heartbeats and acts on the verdicts; each async actor answers its heartbeat with its `LoopProbe`'s stall.

An actor shows life by answering a heartbeat whose event loop ran recently. It is *silent* from the moment a
heartbeat went unanswered (or from when its loop last ran, by the probe): silent `hung_after_s` is hung
(reported once), silent `kill_after_s` is to be killed (Ray restarts it), again every `kill_after_s` while it
stays silent. Its first healthy answer ends the silence.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass


@dataclass
class Liveness:
    """One actor's heartbeat, judged (times are `time.monotonic()` seconds)."""

    hung_after_s: float
    kill_after_s: float
    silent_since: float | None = None
    """When it last showed life, if it has stopped doing so (None: it answers)."""
    hung: bool = False
    """Reported hung, and not answered since."""
    killed_at: float | None = None
    kills: int = 0

    def asked(self, now: float) -> None:
        """A heartbeat was sent (none was pending): its silence, if it gets no answer, counts from now."""
        if self.silent_since is None:
            self.silent_since = now

    def reset(self) -> None:
        """No heartbeat pending for a reason other than silence (its call failed: a death, reported as such)."""
        self.silent_since = None
        self.hung = False

    def answered(self, now: float, stall_s: float = 0.0) -> bool:
        """An answer came; `stall_s`: how long its event loop had not run (its `LoopProbe`). True when this ends
        a reported hang (the actor answers again, or came back restarted)."""
        if stall_s >= self.hung_after_s:  # the process answers, but the loop that does its work is stuck
            self.silent_since = min(self.silent_since or now, now - stall_s)
            return False
        was = self.hung
        self.silent_since, self.hung, self.killed_at = None, False, None
        return was

    def silent_s(self, now: float) -> float:
        return 0.0 if self.silent_since is None else now - self.silent_since

    def step(self, now: float) -> list[str]:
        """What is due now: "hung" (once per hang), then "kill" (at `kill_after_s`, and again each `kill_after_s`
        after a kill while it stays silent)."""
        silent = self.silent_s(now)
        due: list[str] = []
        if silent >= self.hung_after_s and not self.hung:
            self.hung = True
            due.append("hung")
        if silent >= self.kill_after_s and (self.killed_at is None or now - self.killed_at >= self.kill_after_s):
            self.killed_at = now
            self.kills += 1
            due.append("kill")
        return due


class LoopProbe:
    """How long an actor's event loop has gone without running, as seen from another thread (the heartbeat's).

    Each `stall_s()` asks the loop to note that it ran (`call_soon_threadsafe`); the answer is how long the
    oldest such request has waited, 0 when the last one was served. Made on the loop's thread (an async actor's
    constructor); without a running loop it always answers 0."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None):
        if loop is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                loop = None
        self.loop = loop
        self._lock = threading.Lock()
        self._asked_at: float | None = None

    def _ran(self) -> None:
        with self._lock:
            self._asked_at = None

    def stall_s(self) -> float:
        if self.loop is None or self.loop.is_closed():
            return 0.0
        now = time.monotonic()
        with self._lock:
            if self._asked_at is not None:
                return now - self._asked_at
            self._asked_at = now
        try:
            self.loop.call_soon_threadsafe(self._ran)
        except RuntimeError:  # the loop closed meanwhile
            return 0.0
        return 0.0
