"""The failures a model provider has, for the fake endpoints to serve on a schedule.

A real provider rate-limits (429 with `Retry-After` and its remaining-requests header at 0),
has 429 storms and 5xx spells, answers 529 "overloaded" (Anthropic), streams slowly, and
sometimes cuts a stream mid-way. A `FaultSchedule` makes the fake do each of these, on
purpose and reproducibly (seeded); a script's `Step.fail` / `Step.cut` do it for one step of one
worker's conversation (script.py).

    {"rate_limit_rpm": 600, "storms": [{"start_s": 10, "duration_s": 5, "status": 429,
     "retry_after_s": 1}], "error_rate": 0.01, "cut_rate": 0.01, "chunks": 20, "chunk_delay_s": 0.1,
     "seed": 1}
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field


class Storm(BaseModel):
    """A spell during which the provider fails calls (seconds since the endpoint started)."""

    model_config = ConfigDict(extra="forbid")
    start_s: float
    duration_s: float
    status: int = 429
    probability: float = 1.0
    """Of each call during the spell."""
    retry_after_s: float | None = 1.0
    every_s: float | None = None
    """Repeat the spell every this many seconds (a storm that comes back)."""


class FaultSchedule(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rate_limit_rpm: float | None = None
    """Requests per minute the provider accepts; over it, 429 with Retry-After and remaining-requests 0."""
    rate_limit_burst_s: float = 1.0
    """Seconds of the rate that may come at once."""
    storms: list[Storm] = Field(default_factory=list)
    error_rate: float = 0.0
    """Probability that any call fails with `error_status`."""
    error_status: int = 500
    cut_rate: float = 0.0
    """Probability that a stream is cut after half its events."""
    chunks: int = 1
    """Pieces the text of a streamed answer is sent in."""
    chunk_delay_s: float = 0.0
    """Pause before each streamed event after the first (a slow stream)."""
    seed: int = 0

    @classmethod
    def load(cls, path: str | Path) -> FaultSchedule:
        return cls.model_validate_json(Path(path).read_text())


class Faults:
    """A schedule, played: decides each call's fate (thread-safe; the endpoint serves calls in threads)."""

    def __init__(self, schedule: FaultSchedule | None = None, clock=time.monotonic):
        self.s = schedule or FaultSchedule()
        self.clock = clock
        self.t0 = clock()
        self._rng = random.Random(self.s.seed)
        self._lock = threading.Lock()
        rate = (self.s.rate_limit_rpm or 0) / 60
        self._burst = max(1.0, rate * self.s.rate_limit_burst_s)
        self._level = self._burst
        self._t = self.t0
        self.accepted = 0
        """Calls let through the rate limit (what `throughput_vs_limit` divides)."""

    def rate_limited(self) -> float | None:
        """None if the call is within the rate limit (and counts against it), else seconds until it would be."""
        if not self.s.rate_limit_rpm:
            self.accepted += 1
            return None
        rate = self.s.rate_limit_rpm / 60
        with self._lock:
            now = self.clock()
            self._level = min(self._burst, self._level + (now - self._t) * rate)
            self._t = now
            if self._level >= 1:
                self._level -= 1
                self.accepted += 1
                return None
            return (1 - self._level) / rate

    def injected(self) -> tuple[int, float | None] | None:
        """(status, retry_after) if a storm or the error rate fails this call."""
        now = self.clock() - self.t0
        with self._lock:
            for st in self.s.storms:
                t = now - st.start_s
                if st.every_s:
                    t = t % st.every_s if t >= 0 else t
                if 0 <= t < st.duration_s and self._rng.random() < st.probability:
                    return st.status, st.retry_after_s
            if self.s.error_rate and self._rng.random() < self.s.error_rate:
                return self.s.error_status, None
        return None

    def cut_after(self, events: int) -> int | None:
        """After how many events to cut this stream, if it is to be cut."""
        with self._lock:
            if self.s.cut_rate and self._rng.random() < self.s.cut_rate:
                return max(1, events // 2)
        return None


def split_text(text: str, n: int) -> list[str]:
    """`text` in `n` pieces (fewer if it is shorter), joined back exactly."""
    if n <= 1 or len(text) <= 1:
        return [text]
    size = -(-len(text) // n)
    return [text[i : i + size] for i in range(0, len(text), size)]
