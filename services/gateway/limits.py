"""Admission of model calls under a provider's limits, fair across workers.

A `Lane` holds one limit (a provider/model, or a whole provider) on one node's gateway: a token
bucket of requests and one of tokens (each refilled at this node's share of the cluster-wide
rate, holding `burst_s` seconds of it), and a count of calls in flight. A call that finds nobody
waiting and room in every bucket goes at once; the others wait in their worker's queue, and the
queues are served round-robin, one call per worker per round, so a worker that fires many calls
cannot starve one that fires few.

The token bucket is charged an estimate when a call is admitted (its request body's size / 4) and
corrected by the provider's count when it ends. A call the provider refused with a 429 is
refunded (the provider did not count it either); a 429 that says the limit is exhausted (the
remaining-requests header at 0) pauses the lane until the provider's Retry-After.

`Admission` is the asyncio face of the lanes: callers await `acquire` and must `release`. A
node's share of each limit comes from the `LimitCoordinator` (coordinator.py) through
`set_shares`.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from agensh_ray.config import ModelLimit

UNLIMITED = ModelLimit()


class TokenBucket:
    def __init__(self, rate_per_s: float, burst: float, now: float):
        self.rate = rate_per_s
        self.burst = burst
        self.level = burst
        self.t = now

    def refill(self, now: float) -> None:
        if now > self.t:
            self.level = min(self.burst, self.level + (now - self.t) * self.rate)
            self.t = now

    def wait(self, amount: float, now: float) -> float:
        """Seconds until `amount` (at most a whole burst) can be taken; 0 if now."""
        self.refill(now)
        need = min(amount, self.burst)
        if self.level >= need:
            return 0.0
        return (need - self.level) / self.rate if self.rate > 0 else math.inf

    def take(self, amount: float) -> None:
        self.level -= amount

    def give(self, amount: float) -> None:
        """Put back (or, negative, take more): a refund or a correction by the provider's count."""
        self.level = min(self.burst, self.level + amount)

    def set_rate(self, rate_per_s: float, burst: float, now: float) -> None:
        self.refill(now)
        self.rate, self.burst = rate_per_s, burst
        self.level = min(self.level, burst)


@dataclass(eq=False)
class Ticket:
    """One admitted (or waiting) call."""

    lane: Lane
    worker: str
    tokens: float
    """The estimate charged to the token bucket at admission."""
    arrived: float
    granted: float | None = None
    fut: asyncio.Future | None = field(default=None, repr=False)

    @property
    def queued_s(self) -> float:
        return (self.granted if self.granted is not None else self.arrived) - self.arrived


class Lane:
    """One limit on one gateway: buckets, calls in flight, and the workers' queues (plain, clock given)."""

    def __init__(self, key: str, limit: ModelLimit, burst_s: float, now: float, share: float = 1.0):
        self.key = key
        self.limit = limit
        self.burst_s = burst_s
        self.share = share
        self.requests = TokenBucket(0, 0, now) if limit.rpm else None
        self.tokens = TokenBucket(0, 0, now) if limit.tpm else None
        self.max_streams: int | None = None
        self.active = 0
        self.paused_until = 0.0
        self.queues: dict[str, deque[Ticket]] = {}
        self.turns: deque[str] = deque()
        """Workers with a call waiting, in round-robin order."""
        self.granted = 0
        self.set_share(share, now)
        for b in (self.requests, self.tokens):
            if b is not None:
                b.level = b.burst

    def set_share(self, share: float, now: float) -> None:
        """This node's fraction of the cluster-wide limit."""
        self.share = share
        if self.requests is not None:
            rate = self.limit.rpm * share / 60
            self.requests.set_rate(rate, max(1.0, rate * self.burst_s), now)
        if self.tokens is not None:
            rate = self.limit.tpm * share / 60
            self.tokens.set_rate(rate, max(1.0, rate * self.burst_s), now)
        if self.limit.max_streams is not None:
            self.max_streams = max(1, math.ceil(self.limit.max_streams * share))

    def waiting(self) -> int:
        return sum(len(q) for q in self.queues.values())

    def demand(self) -> int:
        return self.waiting() + self.active

    def blocked_for(self, tokens: float, now: float) -> float | None:
        """0: admit now; seconds to wait for the buckets or a pause; None: wait for a call to end."""
        if self.max_streams is not None and self.active >= self.max_streams:
            return None
        wait = max(0.0, self.paused_until - now)
        if self.requests is not None:
            wait = max(wait, self.requests.wait(1, now))
        if self.tokens is not None:
            wait = max(wait, self.tokens.wait(tokens, now))
        return wait

    def _grant(self, t: Ticket, now: float) -> None:
        t.granted = now
        self.active += 1
        self.granted += 1
        if self.requests is not None:
            self.requests.take(1)
        if self.tokens is not None:
            self.tokens.take(t.tokens)

    def try_admit(self, t: Ticket, now: float) -> bool:
        """The fast path: nobody waiting and room now."""
        if self.turns or self.blocked_for(t.tokens, now) != 0:
            return False
        self._grant(t, now)
        return True

    def enqueue(self, t: Ticket, front: bool = False) -> None:
        """Wait in the worker's queue (a retried call goes first in its own worker's queue)."""
        q = self.queues.get(t.worker)
        if q is None:
            q = self.queues[t.worker] = deque()
            self.turns.append(t.worker)
        q.appendleft(t) if front else q.append(t)

    def withdraw(self, t: Ticket) -> None:
        """A waiting call whose caller went away leaves its queue."""
        q = self.queues.get(t.worker)
        if q is not None and t in q:
            q.remove(t)
            if not q:
                del self.queues[t.worker]
                self.turns.remove(t.worker)

    def dispatch(self, now: float) -> tuple[list[Ticket], float | None]:
        """Admit what can go now, round-robin over the workers; returns the admitted and the seconds until
        the next could (None: when a call ends, or nobody waits)."""
        out: list[Ticket] = []
        while self.turns:
            w = self.turns[0]
            q = self.queues[w]
            head = q[0]
            if head.fut is not None and head.fut.done():  # its caller went away while it waited
                q.popleft()
                if not q:
                    self.turns.popleft()
                    del self.queues[w]
                continue
            wait = self.blocked_for(head.tokens, now)
            if wait != 0:
                return out, wait
            q.popleft()
            self._grant(head, now)
            out.append(head)
            self.turns.popleft()
            if q:
                self.turns.append(w)
            else:
                del self.queues[w]
        return out, None

    def release(self, t: Ticket, actual_tokens: float | None, refund: bool) -> None:
        """A call ended: free its slot; refund it (the provider refused it) or correct its token charge."""
        self.active -= 1
        if refund:
            if self.requests is not None:
                self.requests.give(1)
            if self.tokens is not None:
                self.tokens.give(t.tokens)
        elif self.tokens is not None and actual_tokens is not None:
            self.tokens.give(t.tokens - actual_tokens)


def limit_key(limits: dict[str, ModelLimit], provider: str, model: str) -> str:
    """The most specific configured key for a call: provider/model, provider/*, *; else its own key, unlimited."""
    for key in (f"{provider}/{model}", f"{provider}/*", "*"):
        if key in limits:
            return key
    return f"{provider}/{model}"


class Admission:
    """The lanes of one gateway, awaited from its event loop."""

    def __init__(self, limits: dict[str, ModelLimit], burst_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic):
        self.limits = limits
        self.burst_s = burst_s
        self.clock = clock
        self.lanes: dict[str, Lane] = {}
        self.shares: dict[str, float] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}

    def lane(self, provider: str, model: str) -> Lane:
        key = limit_key(self.limits, provider, model)
        lane = self.lanes.get(key)
        if lane is None:
            lane = self.lanes[key] = Lane(key, self.limits.get(key, UNLIMITED), self.burst_s, self.clock(),
                                          self.shares.get(key, 1.0))
        return lane

    async def acquire(self, provider: str, model: str, worker: str, tokens: float, front: bool = False) -> Ticket:
        """Wait for room under the limit; the caller must `release` the ticket (also if cancelled after)."""
        lane = self.lane(provider, model)
        now = self.clock()
        t = Ticket(lane, worker, tokens, now)
        if lane.try_admit(t, now):
            return t
        t.fut = asyncio.get_running_loop().create_future()
        lane.enqueue(t, front)
        self._run(lane)
        try:
            await t.fut
        except asyncio.CancelledError:
            if t.granted is not None:  # admitted as it was cancelled: give the slot back
                lane.release(t, None, refund=True)
            else:
                lane.withdraw(t)
            self._run(lane)
            raise
        return t

    def release(self, t: Ticket, actual_tokens: float | None = None, refund: bool = False) -> None:
        t.lane.release(t, actual_tokens, refund)
        self._run(t.lane)

    def pause(self, t: Ticket, seconds: float) -> None:
        """The provider said the limit is exhausted: nobody on this lane goes for `seconds`."""
        t.lane.paused_until = max(t.lane.paused_until, self.clock() + seconds)

    def set_shares(self, shares: dict[str, float]) -> None:
        self.shares.update(shares)
        now = self.clock()
        for key, share in shares.items():
            lane = self.lanes.get(key)
            if lane is not None and lane.share != share:
                lane.set_share(share, now)
                self._run(lane)

    def demand(self) -> dict[str, int]:
        """Calls waiting or in flight per limited lane (what the coordinator shares the limits by)."""
        return {k: lane.demand() for k, lane in self.lanes.items() if lane.limit is not UNLIMITED}

    def _run(self, lane: Lane) -> None:
        timer = self._timers.pop(lane.key, None)
        if timer is not None:
            timer.cancel()
        admitted, wait = lane.dispatch(self.clock())
        for t in admitted:
            t.fut.set_result(None)
        if wait is not None and math.isfinite(wait):
            loop = asyncio.get_running_loop()
            self._timers[lane.key] = loop.call_later(max(wait, 0.001), self._run, lane)
