"""Event routing: who gets which event, with which priority, and the
per-worker queues it lands in.

`Fanout` (inside a RouterActor) turns source events — board entries, chat
messages, forge events, each read by cursor from a durable source — into one
list of `Event`s per host. An event is shipped once per host with its targets
as a rule ("every worker of the host but the author"), never once per worker:
one board entry costs 16 small items for 1,024 workers on 16 hosts, not 1,023.

`HostInbox` (inside a WorkerActor) expands the rule into its workers' queues
and keeps a cursor per source, so a batch replayed by a restarted router is
dropped instead of reaching the agent twice.

Priorities (DESIGN.md): DMs, new board entries and FAILs are high (mid-turn,
appended to the next infra-tool result); channel posts, forge notifications
and, under the `relevant` policy, board entries that do not touch a worker's
claims are low (next turn start; board ones folded into one summary line).

`TurnClock` says when a worker's host-made prompts are due: the idle nudge,
the share-findings prompt and the wind-down notices.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from heapq import merge
from operator import itemgetter
from typing import Any, Iterable, NamedTuple

from agensh_ray.models import BoardEntry, ChatMessage, EntryType, ForgeEvent, now_us
from agensh_ray.wire import Row

SOURCES = ("board", "chat", "forge")
POLICIES = ("all", "relevant")

HIGH, LOW = "high", "low"

WORD_RE = re.compile(r"[a-z0-9][a-z0-9_]+")
"""Words of a CLAIM / entry for the `relevant` policy: lower-case runs of two or more letters,
digits or underscores ('textkit/commands/tac.py' -> textkit, commands, tac, py)."""

STOP_WORDS = frozenset(
    """
    a an and are as at be been but by can do does done for from has have he her his how i if in into is it
    its me my no not now of on or our she so than that the their them then there these they this to up us
    was we were what when where which who will with you your all any also only just more most new old one
    two some very via vs
    claim claims claimed claiming mine take taking work working on doing will add adding added fix fixing
    fixed implement implementing implemented build building write writing wrote test tests testing
    file files code module modules function functions command commands subcommand subcommands py src lib
    main branch pr prs patch merge merged
    """.split()
)
"""Words too common to make two things 'overlap' (English function words, the task's verbs)."""


def words(text: str) -> frozenset[str]:
    """The distinctive words of a text (see WORD_RE, minus STOP_WORDS)."""
    return frozenset(WORD_RE.findall(text.lower())) - STOP_WORDS


def source_of(event_id: str) -> tuple[str, int]:
    src, _, seq = event_id.partition(":")
    return src, int(seq)


def board_text(e: BoardEntry) -> str:
    return f"[board #{e.seq} {e.type.value} {e.worker_id}] {e.text}"


class Event(NamedTuple):
    """One source event as a router ships it to one host: its text once, its targets as a rule.

    `high` and `low` name the host's workers that get it at that priority; `None` means "every other
    worker of the host": all of them but the author and those named in the other field. A tuple, not a
    pydantic model: 1,024 workers make this the hottest value of the run (it is built by `Fanout`
    from validated models and never crosses the agent boundary).
    """

    source: str
    """board | chat | forge (the cursor it advances)."""
    seq: int
    kind: str
    """board | dm | channel | forge (a board entry delivered low becomes a `summary`)."""
    text: str
    author: str
    enqueue_ts: int
    high: tuple[str, ...] | None = ()
    low: tuple[str, ...] | None = ()
    label: str = ""
    """The board entry type (summaries count them per type)."""
    row: Row | None = None
    """A board event's entry (without detail): the host keeps its copy of the recent view from it."""

    @property
    def event_id(self) -> str:
        return f"{self.source}:{self.seq}"

    @property
    def worker_id(self) -> str | None:
        """The one worker this event is for (DMs and forge notifications), None for a broadcast."""
        named = (self.high or ()) + (self.low or ())
        return named[0] if len(named) == 1 and self.high is not None and self.low is not None else None


class Shared(NamedTuple):
    """One event as it reaches the agents of a host, made once per event and priority and shared by
    all of them (what `HostInbox.take_shared` returns: `Queued` without the worker id)."""

    event_id: str
    priority: str
    kind: str
    text: str
    enqueue_ts: int
    label: str = ""


class Queued(NamedTuple):
    """One event as it reaches one agent (what `HostInbox.take` returns; fields as in `Delivery`)."""

    event_id: str
    worker_id: str
    priority: str
    kind: str
    text: str
    enqueue_ts: int
    label: str = ""


# ------------------------------------------------------------------ router side


@dataclass
class Claim:
    words: frozenset[str]
    ts: int
    """Board clock, microseconds (the CLAIM entry's ts)."""


@dataclass
class Fanout:
    """Decides the targets of source events for the hosts one router serves.

    policy `all` (the paper's): every board entry goes to every other worker, high.
    policy `relevant`: FAILs, and entries sharing a distinctive word with a worker's active CLAIM,
    are high for that worker; the rest go low and are summarised at its next turn start.

    A worker's active claim is its latest CLAIM, until it publishes a PATCH_SUMMARY or the claim is
    older than `claim_ttl_s` on the board clock (as the board hides it from the recent view).
    Words held by more than half of the claimants (when there are at least 4) are treated as
    common to the task, not as an overlap.
    """

    hosts: dict[str, list[str]]
    policy: str = "all"
    claim_ttl_s: float = 3600.0
    claims: dict[str, Claim] = field(default_factory=dict)
    _index: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"unknown delivery policy {self.policy!r}; valid: {', '.join(POLICIES)}")
        self.host_of = {w: h for h, ws in self.hosts.items() for w in ws}

    # -- claims ------------------------------------------------------------------------
    def track(self, e: BoardEntry) -> None:
        """Update the claims view from one board entry (also used to rebuild it after a restart)."""
        if e.type is EntryType.CLAIM:
            self._drop_claim(e.worker_id)
            c = Claim(words(e.text), e.ts)
            self.claims[e.worker_id] = c
            for wd in c.words:
                self._index[wd].add(e.worker_id)
        elif e.type is EntryType.PATCH_SUMMARY:
            self._drop_claim(e.worker_id)

    def _drop_claim(self, worker: str) -> None:
        old = self.claims.pop(worker, None)
        if old is not None:
            for wd in old.words:
                holders = self._index.get(wd)
                if holders is not None:
                    holders.discard(worker)
                    if not holders:
                        del self._index[wd]

    def claimants(self, text: str, now_ts: int) -> set[str]:
        """Workers whose active claim shares a distinctive word with `text` (now_ts: board clock, us)."""
        oldest = now_ts - int(self.claim_ttl_s * 1e6)
        common = max(2, len(self.claims) // 2) if len(self.claims) >= 4 else None
        out: set[str] = set()
        for wd in words(text):
            holders = self._index.get(wd)
            if not holders or (common is not None and len(holders) > common):
                continue
            out.update(w for w in holders if self.claims[w].ts >= oldest)
        return out

    # -- per source ----------------------------------------------------------------------
    def board(self, entries: Iterable[BoardEntry]) -> dict[str, list[Event]]:
        out: dict[str, list[Event]] = defaultdict(list)
        ts = now_us()
        for e in entries:
            row = Row(e.seq, e.ts, e.type.value, e.text, e.worker_id, e.has_detail)
            base = Event("board", e.seq, "board", board_text(e), e.worker_id, ts, label=e.type.value, row=row)
            if self.policy == "all" or e.type is EntryType.FAIL:
                ev = base._replace(high=None)
                for h in self.hosts:
                    out[h].append(ev)
            else:
                hot = self.claimants(e.text, e.ts)
                hot.discard(e.worker_id)
                by_host: dict[str, list[str]] = defaultdict(list)
                for w in hot:
                    h = self.host_of.get(w)
                    if h is not None:
                        by_host[h].append(w)
                cold = base._replace(low=None)
                for h in self.hosts:
                    mine = by_host.get(h)
                    out[h].append(base._replace(high=tuple(sorted(mine)), low=None) if mine else cold)
            self.track(e)  # an entry never overlaps its own author's claim, so order does not matter
        return out

    def chat(self, messages: Iterable[ChatMessage]) -> dict[str, list[Event]]:
        out: dict[str, list[Event]] = defaultdict(list)
        ts = now_us()
        for m in messages:
            if m.to is not None:
                h = self.host_of.get(m.to)
                if h is not None and m.to != m.sender:
                    out[h].append(Event("chat", m.seq, "dm", f"[DM from {m.sender}] {m.text}", m.sender, ts, (m.to,)))
                continue
            ev = Event("chat", m.seq, "channel", f"[#{m.channel} {m.sender}] {m.text}", m.sender, ts, (), None)
            for h in self.hosts:
                out[h].append(ev)
        return out

    def forge(self, events: Iterable[ForgeEvent]) -> dict[str, list[Event]]:
        out: dict[str, list[Event]] = defaultdict(list)
        ts = now_us()
        for fe in events:
            what = f"PR #{fe.pr} " if fe.pr else ""
            text = f"[forge] {what}{fe.kind.replace('_', ' ')} by {fe.actor}: {fe.detail}".rstrip(": ")
            for w in dict.fromkeys(fe.notify):  # one event per worker: forge events are few, and each wakes its worker
                h = self.host_of.get(w)
                if h is not None and w != fe.actor:
                    out[h].append(Event("forge", fe.seq, "forge", text, fe.actor, ts, (), (w,)))
        return out

    def split(self, source: str, batch: list[Any]) -> dict[str, list[Event]]:
        return {"board": self.board, "chat": self.chat, "forge": self.forge}[source](batch)


# ------------------------------------------------------------------ host side


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


def render(deliveries: list[Any], mid_turn: bool) -> str:
    """The text an agent reads: urgent items verbatim, summaries folded into one line."""
    if not deliveries:
        return ""
    lines = ["--- new for you while you work ---" if mid_turn else "--- since your last turn ---"]
    summary: Counter[str] = Counter()
    for d in deliveries:
        if d.kind == "summary":
            summary[getattr(d, "label", "") or "other"] += 1
        else:
            lines.append(d.text)
    if summary:
        what = ", ".join(f"{n} {k}" for k, n in sorted(summary.items()))
        lines.append(f"[board] {sum(summary.values())} other new entries ({what}); board_read shows them")
    return "\n".join(lines)


# ------------------------------------------------------------------ host-made prompts


class Due(NamedTuple):
    """A prompt the host owes a worker: kind nudge | share_findings | wind_down."""

    kind: str
    priority: str = LOW
    last: bool = False
    """wind_down: the last notice ("merge only what is ready, then stop"), not an earlier one."""
    minutes_left: float = 0.0


@dataclass
class TurnClock:
    """When one worker's host-made prompts are due. Plain and clock-free: every time is in schedule
    seconds since the run started (the host multiplies wall time by `time_scale`).

    - idle nudge: `idle_nudge_s` after the end of its last turn with no new turn (once per idle spell);
    - share-findings: at the end of a turn that wrote nothing to the board (not after a turn that the
      host's own prompts started, so prompts never loop);
    - wind-down: each notice `wind_down_s` before the deadline, once; a worker that starts after a
      notice's time gets only the latest notice due.
    """

    idle_nudge_s: float
    deadline_s: float
    wind_down_s: tuple[float, ...] = (2700.0, 300.0)
    share_findings: bool = True
    last_turn_end: float = 0.0
    in_turn: bool = False
    _nudged: bool = False
    _notices: list[float] = field(default_factory=list)
    _sent: int = 0

    HOST_KINDS = frozenset({"nudge", "share_findings", "wind_down", "handoff"})
    """Triggers made by the host itself."""

    def __post_init__(self) -> None:
        self._notices = sorted((b for b in self.wind_down_s if 0 < b < self.deadline_s), reverse=True)

    @classmethod
    def from_config(cls, routing: Any, deadline_s: float, now_s: float = 0.0) -> "TurnClock":
        """From a `RoutingConfig` (a worker launched at `now_s` counts as having just ended a turn)."""
        return cls(
            idle_nudge_s=routing.idle_nudge_s, deadline_s=deadline_s, wind_down_s=tuple(routing.wind_down_s),
            share_findings=routing.share_findings, last_turn_end=now_s,
        )

    def turn_started(self, now_s: float) -> None:
        self.in_turn = True

    def turn_ended(self, now_s: float, board_writes: int, trigger: str, stop_reason: str) -> Due | None:
        """Record a turn's end; returns the share-findings prompt if it is due now."""
        self.in_turn = False
        self.last_turn_end = now_s
        self._nudged = False
        if self.share_findings and board_writes == 0 and trigger not in self.HOST_KINDS and stop_reason == "end_turn":
            return Due("share_findings")
        return None

    def due(self, now_s: float) -> list[Due]:
        """The prompts due at `now_s` (each returned once)."""
        out: list[Due] = []
        k = self._sent
        while k < len(self._notices) and now_s >= self.deadline_s - self._notices[k]:
            k += 1
        if k > self._sent:
            self._sent = k
            before = self._notices[k - 1]
            out.append(Due("wind_down", HIGH, k == len(self._notices), before / 60))
        if not self.in_turn and not self._nudged and now_s - self.last_turn_end >= self.idle_nudge_s:
            self._nudged = True
            out.append(Due("nudge"))
        return out

    def next_due_in(self, now_s: float) -> float:
        """Schedule seconds until `due` may return something (0 if it would now; inf if never)."""
        nxt = float("inf")
        if self._sent < len(self._notices):
            nxt = self.deadline_s - self._notices[self._sent]
        if not self.in_turn and not self._nudged:
            nxt = min(nxt, self.last_turn_end + self.idle_nudge_s)
        return max(0.0, nxt - now_s)
