"""Per-worker write rates: a flooding worker slows itself, not the others.

Each worker of a host has a token bucket per kind of write (board, chat, forge; `WriteRatesConfig`). A write
takes a token before it is sent: at once while the bucket has one, else it waits for the next (the tool
answers after the wait, so an agent writing too fast is slowed at its own call). A write that would wait
longer than `max_wait_s` (an agent with many calls in flight) is refused, after waiting that long, with a
message that says the rate: refusing at once would let a flooding agent call again at once, and every call,
refused or not, costs the host an MCP request. So a worker's calls on a host are bounded by its rate plus
(calls in flight) / `max_wait_s`, whatever it does; a worker that keeps one call at a time waits at most
1/`per_s` and is never refused.

Rates are per wall second (`time.monotonic`): they protect the machine, whose capacity is wall time.

Measured (tests/test_security_rates.py: one host, two sandboxed scripted agents, latency at the agent; a
2-core machine shared with other jobs, so noisy): a worker flooding `board_write` with 16 calls in flight made
27-30 writes a second and moved the other worker's board-write p99 from 117 to 612 ms (263 to 733 ms in a
second run); with the default rates it made 5 writes a second and ~3 refused calls, and the other's p99 went
from 166 to 173 ms (250 to 187 ms). The sim at 600x (five times the demo's scale) wrote at most 2 board
entries in a second and 5 in ten per worker: nothing waited.

Fairness at the board itself is left to these buckets: the board's group commit (and the host's write
coalescer) take everything queued in each round, so a write waits at most for the commit in flight and its
own, whoever else writes; what a flood adds there is bounded by the rates of the workers of every host.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable

from agensh_ray.config import WriteRate, WriteRatesConfig
from agensh_ray.errors import ToolFailure

KINDS = {"board_write": "board", "send_dm": "chat", "channel_post": "chat", "pr_create": "forge",
         "pr_review": "forge", "pr_comment": "forge", "pr_merge": "forge"}
"""The tools that write, by the rate that bounds them."""
WINDOW_S = 10.0
"""A refusal counts the worker's writes of that kind over this many seconds."""
_ADVICE = {
    "board": "put several findings in one entry (its detail holds 8,000 characters)",
    "chat": "say more in one message",
    "forge": "review, comment or merge once you have read the PR",
}


class TokenBucket:
    """`burst` tokens, refilled at `per_s`; a reservation may take the count below zero (a queue of waiters
    served in order)."""

    def __init__(self, rate: WriteRate, now: float):
        self.per_s = rate.per_s
        self.burst = float(rate.burst)
        self.tokens = self.burst
        self.t = now

    def reserve(self, now: float, max_wait_s: float) -> float | None:
        """Take a token: the seconds to wait before using it (0: at once), or None if that would be more
        than `max_wait_s` (nothing taken)."""
        self.tokens = min(self.burst, self.tokens + (now - self.t) * self.per_s)
        self.t = now
        wait = max(0.0, (1.0 - self.tokens) / self.per_s)
        if wait > max_wait_s:
            return None
        self.tokens -= 1.0
        return wait


class WriteRates:
    """The buckets of one host's workers (made on a worker's first write of a kind)."""

    def __init__(self, cfg: WriteRatesConfig, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[object]] = asyncio.sleep):
        self.cfg = cfg
        self.clock = clock
        self.sleep = sleep
        self.buckets: dict[tuple[str, str], TokenBucket] = {}
        self.recent: dict[tuple[str, str], deque[float]] = {}
        """Each worker's writes of each kind (times, the last WINDOW_S seconds): what a refusal counts."""
        self.waited = 0
        self.refused = 0
        """Writes that waited for their token, and writes refused, since the host started."""

    async def take(self, worker: str, tool: str) -> None:
        """Wait for `worker`'s turn to make this write (`tool`), or raise ToolFailure saying it goes too
        fast (after `max_wait_s`). Tools that do not write pass at once."""
        kind = KINDS.get(tool)
        if kind is None or not self.cfg.enabled:
            return
        key = (worker, kind)
        rate: WriteRate = getattr(self.cfg, kind)
        now = self.clock()
        bucket = self.buckets.get(key)
        if bucket is None:
            bucket = self.buckets[key] = TokenBucket(rate, now)
        times = self.recent.setdefault(key, deque())
        times.append(now)
        while times and times[0] < now - WINDOW_S:
            times.popleft()
        wait = bucket.reserve(now, self.cfg.max_wait_s)
        if wait is None:
            self.refused += 1
            n = len(times)
            await self.sleep(self.cfg.max_wait_s)
            raise ToolFailure(
                f"slow down: {n} {kind} writes in the last {WINDOW_S:g} s, several at once; the limit is "
                f"{rate.per_s:g} a second (bursts of {rate.burst}). This {tool} was not done (it waited "
                f"{self.cfg.max_wait_s:g} s for its turn): make one call at a time, and {_ADVICE[kind]}")
        if wait > 0:
            self.waited += 1
            await self.sleep(wait)
