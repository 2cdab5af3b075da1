"""Event routing: who gets which event, with which priority, and the
per-worker queues it lands in.

`Fanout` (inside a RouterActor) turns source events — board entries, chat
messages, forge events, each read by cursor from a durable source — into
deliveries grouped per host. `HostInbox` (inside a WorkerActor) keeps one
queue per worker and a cursor per source, so a batch replayed by a restarted
router is dropped instead of reaching the agent twice.

Priorities (DESIGN.md): DMs, new board entries and FAILs are high (mid-turn,
appended to the next infra-tool result); channel posts and forge
notifications are low (next turn start).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

from agensh_ray.models import BoardEntry, ChatMessage, Delivery, EntryType, ForgeEvent, now_us

SOURCES = ("board", "chat", "forge")
WORD_RE = re.compile(r"[a-z0-9_][a-z0-9_\-]{2,}")


def source_of(event_id: str) -> tuple[str, int]:
    src, _, seq = event_id.partition(":")
    return src, int(seq)


def board_text(e: BoardEntry) -> str:
    return f"[board #{e.seq} {e.type.value} {e.worker_id}] {e.text}"


@dataclass
class Fanout:
    """Decides the targets of source events for the hosts one router serves.

    policy `all`: every board entry goes to every other worker, high priority.
    policy `relevant`: FAILs and entries that overlap a worker's active claims
    are high; the rest go low as a summary at the next turn start.
    """

    hosts: dict[str, list[str]]
    policy: str = "all"
    claims: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    """worker -> words of its active CLAIMs (for the relevant policy)."""

    def __post_init__(self) -> None:
        self.host_of = {w: h for h, ws in self.hosts.items() for w in ws}

    def _track_claims(self, e: BoardEntry) -> None:
        if e.type is EntryType.CLAIM:
            self.claims[e.worker_id] = set(WORD_RE.findall(e.text.lower())) - {"claim"}
        elif e.type is EntryType.PATCH_SUMMARY:
            self.claims.pop(e.worker_id, None)

    def _relevant(self, e: BoardEntry, worker: str) -> bool:
        if e.type is EntryType.FAIL:
            return True
        mine = self.claims.get(worker)
        return bool(mine) and bool(mine & set(WORD_RE.findall(e.text.lower())))

    def board(self, entries: list[BoardEntry]) -> dict[str, list[Delivery]]:
        out: dict[str, list[Delivery]] = defaultdict(list)
        ts = now_us()
        for e in entries:
            self._track_claims(e)
            text = board_text(e)
            for host, workers in self.hosts.items():
                for w in workers:
                    if w == e.worker_id:
                        continue
                    high = self.policy == "all" or self._relevant(e, w)
                    out[host].append(
                        Delivery(
                            event_id=e.event_id,
                            worker_id=w,
                            priority="high" if high else "low",
                            kind="board" if high else "summary",
                            text=text,
                            enqueue_ts=ts,
                        )
                    )
        return out

    def chat(self, messages: list[ChatMessage]) -> dict[str, list[Delivery]]:
        out: dict[str, list[Delivery]] = defaultdict(list)
        ts = now_us()
        for m in messages:
            if m.to is not None:
                host = self.host_of.get(m.to)
                if host is not None:
                    out[host].append(
                        Delivery(
                            event_id=m.event_id,
                            worker_id=m.to,
                            priority="high",
                            kind="dm",
                            text=f"[DM from {m.sender}] {m.text}",
                            enqueue_ts=ts,
                        )
                    )
                continue
            for host, workers in self.hosts.items():
                for w in workers:
                    if w != m.sender:
                        out[host].append(
                            Delivery(
                                event_id=m.event_id,
                                worker_id=w,
                                priority="low",
                                kind="channel",
                                text=f"[#{m.channel} {m.sender}] {m.text}",
                                enqueue_ts=ts,
                            )
                        )
        return out

    def forge(self, events: list[ForgeEvent]) -> dict[str, list[Delivery]]:
        out: dict[str, list[Delivery]] = defaultdict(list)
        ts = now_us()
        for ev in events:
            for w in ev.notify:
                host = self.host_of.get(w)
                if host is None or w == ev.actor:
                    continue
                what = f"PR #{ev.pr} " if ev.pr else ""
                out[host].append(
                    Delivery(
                        event_id=ev.event_id,
                        worker_id=w,
                        priority="low",
                        kind="forge",
                        text=f"[forge] {what}{ev.kind.replace('_', ' ')} by {ev.actor}: {ev.detail}".rstrip(": "),
                        enqueue_ts=ts,
                    )
                )
        return out


class HostInbox:
    """The queues of one host's workers plus the per-source cursors that make
    delivery exactly-once to the agent under router replays."""

    def __init__(self, workers: list[str]):
        self.queues: dict[str, list[Delivery]] = {w: [] for w in workers}
        self.cursors: dict[str, int] = {s: 0 for s in SOURCES}

    def accept(self, deliveries: list[Delivery], cursors: dict[str, int]) -> int:
        """Queue a router batch; events at or below this host's cursor are duplicates. Returns how many were new."""
        new = 0
        for d in deliveries:
            src, seq = source_of(d.event_id)
            if src in self.cursors and seq <= self.cursors[src]:
                continue
            q = self.queues.get(d.worker_id)
            if q is not None:
                q.append(d)
                new += 1
        for src, c in cursors.items():
            if c > self.cursors.get(src, 0):
                self.cursors[src] = c
        return new

    def push_local(self, d: Delivery) -> None:
        """Events the host makes itself (nudges, wind-down): not replayed, no dedup needed."""
        self.queues[d.worker_id].append(d)

    def has_any(self, worker: str) -> bool:
        return bool(self.queues[worker])

    def kinds(self, worker: str) -> set[str]:
        return {d.kind for d in self.queues[worker]}

    def has_urgent(self, worker: str) -> bool:
        return any(d.priority == "high" for d in self.queues[worker])

    def take(self, worker: str, urgent_only: bool) -> list[Delivery]:
        q = self.queues[worker]
        if not urgent_only:
            self.queues[worker] = []
            return q
        taken = [d for d in q if d.priority == "high"]
        self.queues[worker] = [d for d in q if d.priority != "high"]
        return taken


def render(deliveries: list[Delivery], mid_turn: bool) -> str:
    """The text an agent reads: urgent items verbatim, summaries folded into one line."""
    if not deliveries:
        return ""
    summary = [d for d in deliveries if d.kind == "summary"]
    items = [d for d in deliveries if d.kind != "summary"]
    head = "--- new for you while you work ---" if mid_turn else "--- since your last turn ---"
    lines = [head, *(d.text for d in items)]
    if summary:
        kinds = defaultdict(int)
        for d in summary:
            kinds[d.text.split()[2]] += 1
        what = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
        lines.append(f"[board] {len(summary)} other new entries ({what}); board_read shows them")
    return "\n".join(lines)
