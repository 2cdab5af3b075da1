"""The queues of one host's workers (inside a WorkerActor): `HostInbox` expands each `Event` a
router ships once per host into its workers' queues, and keeps a cursor per source, so a batch
replayed by a restarted router is dropped instead of reaching the agent twice.
"""

from __future__ import annotations

from heapq import merge
from operator import itemgetter
from typing import Any, Iterable

from agensh_ray.wire import HIGH, LOW, SOURCES, Event, Queued, Shared


class HostInbox:
    """The queues of one host's workers plus the per-source cursors that make
    delivery exactly-once to the agent under router replays.

    A host is fed by one router, in order (one call in flight), so "seq <= my cursor
    for that source" is exactly "already queued". Queues hold one shared record per
    event and host, `(n, event_id, event)`; the per-worker `Queued` value is made only
    when the agent takes it. Under policy `all` every worker takes every entry, so this
    is the hottest code of a 1,024-worker run: a broadcast costs one list append per
    worker, a take one small tuple per item.
    """

    def __init__(self, workers: Iterable[str]):
        self.workers = list(workers)
        self.cursors: dict[str, int] = {s: 0 for s in SOURCES}
        self._hi: dict[str, list[tuple[int, str, Any]]] = {w: [] for w in self.workers}
        self._lo: dict[str, list[tuple[int, str, Any]]] = {w: [] for w in self.workers}
        self._every: dict[tuple[int, str], list[list[tuple[int, str, Any]]]] = {}
        self._n = 0
        self.accepted = 0
        """Events that reached at least one queue (replays and foreign workers excluded)."""
        self.duplicates = 0
        """Replayed events dropped by the cursor check."""

    def _all_but(self, queues: dict[str, list], author: str) -> list[list]:
        """The queues of every worker but `author` (cached: the list is built once per author)."""
        key = (id(queues), author if author in queues else "")
        qs = self._every.get(key)
        if qs is None:
            qs = self._every[key] = [q for w, q in queues.items() if w != author]
        return qs

    def _targets(self, queues: dict[str, list], named: tuple[str, ...] | None, other: tuple[str, ...] | None,
                 author: str) -> list[list]:
        if named is None:
            if not other:
                return self._all_but(queues, author)
            return [q for w, q in queues.items() if w != author and w not in other]
        return [queues[w] for w in named if w in queues and w != author]

    def accept(self, events: list[Event | Any], cursors: dict[str, int]) -> int:
        """Queue a router batch; returns how many (worker, event) items are new.

        Events at or below this host's cursor for their source are replays and are dropped.
        Then the cursors move to `cursors` (the router's read position, which may be past the last
        event: nothing in between concerned this host). A `Delivery` (one worker, one event) is
        accepted too. The host wakes `event.worker_id` (set for DMs and forge notifications).
        """
        new = 0
        cur = self.cursors
        seen = dict(cur)  # as of the batch start: one seq may come as several events (one per forge target)
        for ev in events:
            if ev.__class__ is not Event:
                ev = _from_delivery(ev)
            if ev.seq <= seen.get(ev.source, 0):
                self.duplicates += 1
                continue
            if ev.seq > cur.get(ev.source, 0):
                cur[ev.source] = ev.seq
            self._n += 1
            eid = f"{ev.source}:{ev.seq}"
            reached = 0
            hq = self._targets(self._hi, ev.high, ev.low, ev.author)
            if hq:
                rec = (self._n, eid, ev, Shared(eid, HIGH, ev.kind, ev.text, ev.enqueue_ts, ev.label))
                for q in hq:
                    q.append(rec)
                reached += len(hq)
            lq = self._targets(self._lo, ev.low, ev.high, ev.author)
            if lq:
                kind = _LOW_KIND.get(ev.kind, ev.kind)
                rec = (self._n, eid, ev, Shared(eid, LOW, kind, ev.text, ev.enqueue_ts, ev.label))
                for q in lq:
                    q.append(rec)
                reached += len(lq)
            new += reached
            self.accepted += reached > 0
        for src, c in cursors.items():
            if c > cur.get(src, 0):
                cur[src] = c
        return new

    def push_local(self, d: Any) -> None:
        """Events the host makes itself (nudges, wind-down; a `Delivery`): not replayed, no dedup."""
        self._n += 1
        q = Queued(d.event_id, d.worker_id, d.priority, d.kind, d.text, d.enqueue_ts)
        s = Shared(d.event_id, d.priority, d.kind, d.text, d.enqueue_ts)
        (self._hi if d.priority == HIGH else self._lo)[d.worker_id].append((self._n, d.event_id, q, s))

    def has_any(self, worker: str) -> bool:
        return bool(self._hi[worker] or self._lo[worker])

    def has_urgent(self, worker: str) -> bool:
        return bool(self._hi[worker])

    def kinds(self, worker: str) -> set[str]:
        """Kinds waiting for the worker (a scan of its queue; the host asks when a DM, a forge
        notification or its own prompt wakes the worker, not on every board entry)."""
        out = {r[3].kind for r in self._hi[worker]}
        out.update(r[3].kind for r in self._lo[worker])
        return out

    def pending(self, worker: str) -> int:
        return len(self._hi[worker]) + len(self._lo[worker])

    def queued(self) -> int:
        """Items waiting over all workers of the host."""
        return sum(map(len, self._hi.values())) + sum(map(len, self._lo.values()))

    @property
    def queues(self) -> dict[str, list[tuple[int, str, Any]]]:
        """Per worker, its waiting records (to count them: `take` gives what the agent reads)."""
        return {w: self._hi[w] + self._lo[w] for w in self.workers}

    def _pop(self, worker: str, urgent_only: bool) -> list[tuple[int, str, Any, Shared]]:
        hq = self._hi[worker]
        hi = hq[:]
        hq.clear()  # cleared in place: `_all_but` keeps references to these lists
        lq = self._lo[worker]
        if urgent_only or not lq:
            return hi
        lo = lq[:]
        lq.clear()
        return list(merge(hi, lo, key=itemgetter(0))) if hi else lo

    def take_shared(self, worker: str, urgent_only: bool) -> list[Shared]:
        """Hand the worker's queued items to its agent, oldest first (only the high ones if urgent_only),
        as values shared by the host's workers: no allocation per item. The hot path under policy
        `all`, where every worker takes every entry (the caller knows which worker it asked for)."""
        return [r[3] for r in self._pop(worker, urgent_only)]

    def take(self, worker: str, urgent_only: bool) -> list[Queued]:
        """`take_shared`, with one `Queued` per item that names the worker (about a microsecond each)."""
        mk = tuple.__new__
        return [mk(Queued, (r[1], worker, *r[3][1:])) if r[2].__class__ is Event else r[2]
                for r in self._pop(worker, urgent_only)]


_LOW_KIND = {"board": "summary"}
"""A board entry delivered low is a summary line."""


def _from_delivery(d: Any) -> Event:
    src, seq = source_of(d.event_id)
    mine = (d.worker_id,)
    return Event(src, seq, d.kind, d.text, "", d.enqueue_ts, mine if d.priority == HIGH else (),
                 mine if d.priority != HIGH else ())


def source_of(event_id: str) -> tuple[str, int]:
    src, _, seq = event_id.partition(":")
    return src, int(seq)
