"""Who gets which event, with which priority: `Fanout` turns source events (board entries, chat
messages, forge events, each read by cursor from a durable source) into one list of `Event`s per
host of the router that holds it.

An event is shipped once per host with its targets as a rule ("every worker of the host but the
author"), never once per worker (see `agensh_ray.wire.Event`); the host's `HostInbox` expands the
rule into its workers' queues.

Priorities (DESIGN.md): DMs, new board entries and FAILs are high (mid-turn, appended to the next
infra-tool result); channel posts, forge notifications and, under the `relevant` policy, board
entries that do not touch a worker's claims are low (next turn start; board ones folded into one
summary line).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable

from agensh_ray.board.leases import ClaimBook, claim_key
from agensh_ray.models import BoardEntry, ChatMessage, EntryType, ForgeEvent, now_us
from agensh_ray.render import board_text, dm_text, forge_text, post_text, quote
from agensh_ray.routing.claims import Claims
from agensh_ray.wire import Event, Row

POLICIES = ("all", "relevant")
_WORD = re.compile(r"[\w-]+")


@dataclass
class Fanout:
    """Decides the targets of source events for the hosts one router serves.

    policy `all` (the paper's): every board entry goes to every other worker, high.
    policy `relevant`: FAILs, and entries sharing a distinctive word with a worker's active CLAIM,
    are high for that worker; the rest go low and are summarised at its next turn start.

    A worker's active claim is its latest CLAIM, until it publishes a PATCH_SUMMARY or the claim is
    older than `claim_ttl_s` on the board clock (as the board hides it from the recent view); what
    counts as an overlap is `Claims`'.
    """

    hosts: dict[str, list[str]]
    policy: str = "all"
    claim_ttl_s: float = 3600.0
    claims: Claims = field(default_factory=Claims)
    leases: ClaimBook | None = None
    """Under the claim rule `lease` (agensh_ray/board/leases.py): the open claims as the board keeps them, fed
    the same entries and the holders' PR actions; an overlapping CLAIM or PR is then pushed, high, to both the
    first holder and the newcomer (`_claim_overlap`, `_pr_overlap`). None (rule `legacy`): no overlap push."""
    seeded_upto: int = 0
    """The board entry the claim book was seeded at (`seed`): older entries, replayed, do not change it."""

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"unknown delivery policy {self.policy!r}; valid: {', '.join(POLICIES)}")
        self.host_of = {w: h for h, ws in self.hosts.items() for w in ws}

    # -- claims ------------------------------------------------------------------------
    def track(self, e: BoardEntry) -> None:
        """Update the claims from one board entry (also used to rebuild them after a restart)."""
        self.claims.track(e)

    def claimants(self, text: str, now_ts: int) -> set[str]:
        """Workers whose active claim shares a distinctive word with `text` (now_ts: board clock, us)."""
        return self.claims.claimants(text, now_ts - int(self.claim_ttl_s * 1e6))

    def seed(self, leases: list[Any], upto: int) -> None:
        """Start the claim book from the board's open claims as of its entry `upto` (a router's resume); the
        entries up to there, replayed, leave it alone."""
        if self.leases is None:
            return
        book = self.leases
        book.by_key.clear()
        book.by_worker.clear()
        for c in leases:
            book.by_key.setdefault(c.key, []).append(c)
            book.by_worker.setdefault(c.worker, []).append(c)
        self.seeded_upto = upto

    def use_leases(self, life_s: float, rule: str) -> None:
        """Follow the board's claim rule (its `info`): `lease` turns the overlap push on."""
        self.claim_ttl_s = life_s
        if rule == "lease":
            if self.leases is None:
                self.leases = ClaimBook(life_s, rule)
            else:
                self.leases.set_life(life_s, rule)
        else:
            self.leases = None

    def _push(self, out: dict[str, list[Event]], source: str, seq: int, text: str, workers: Iterable[str],
              ts: int, label: str) -> None:
        """One high event to each named worker (on its own host), whoever wrote what caused it."""
        by_host: dict[str, list[str]] = defaultdict(list)
        for w in dict.fromkeys(workers):
            h = self.host_of.get(w)
            if h is not None:
                by_host[h].append(w)
        for h, ws in by_host.items():
            out[h].append(Event(source, seq, "overlap", text, "", ts, tuple(ws), (), label=label))

    def _claim_overlap(self, out: dict[str, list[Event]], e: BoardEntry, ts: int) -> None:
        """A CLAIM on a key someone else holds: both are told at once (the earlier claim wins)."""
        book = self.leases
        assert book is not None
        key = claim_key(e.text)
        held = [c for c in book.open_on(key, e.ts) if c.worker != e.worker_id]
        book.entry(e.seq, e.ts, e.type.value, e.text, e.worker_id)
        if not held:
            return
        first = held[0]
        if first.seq > e.seq:  # (a replay): nothing to say
            return
        text = (f"[claims] overlap on {quote(key)}: {first.worker} claimed it first (#{first.seq}), "
                f"{e.worker_id} later (#{e.seq}). The earlier claim wins: {e.worker_id}, back off "
                f"(a FAIL `release KEY: why`) and DM {first.worker}.")
        self._push(out, "board", e.seq, text, (first.worker, e.worker_id), ts, "CLAIM")

    # -- per source ----------------------------------------------------------------------
    def board(self, entries: Iterable[BoardEntry]) -> dict[str, list[Event]]:
        out: dict[str, list[Event]] = defaultdict(list)
        ts = now_us()
        for e in entries:
            if self.leases is not None and e.seq > self.seeded_upto:
                if e.type is EntryType.CLAIM:
                    self._claim_overlap(out, e, ts)
                else:
                    self.leases.entry(e.seq, e.ts, e.type.value, e.text, e.worker_id)
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
                    out[h].append(Event("chat", m.seq, "dm", dm_text(m), m.sender, ts, (m.to,)))
                continue
            ev = Event("chat", m.seq, "channel", post_text(m), m.sender, ts, (), None)
            for h in self.hosts:
                out[h].append(ev)
        return out

    def _pr_overlap(self, out: dict[str, list[Event]], fe: ForgeEvent, ts: int) -> None:
        """A PR opened on a key someone else holds (its branch's last part or its title names the key): its
        author and the holder are told at once."""
        book = self.leases
        assert book is not None
        branch = (fe.ref or "").rsplit("/", 1)[-1].lower()
        title = fe.detail.lower()
        words = set(_WORD.findall(f"{branch} {title}"))
        for key in list(book.by_key):
            if key in words or (" " in key and key in title):
                held = book.open_on(key, fe.ts)
                if held and held[0].worker != fe.actor:
                    first = held[0]
                    text = (f"[claims] overlap on {quote(key)}: PR #{fe.pr} by {fe.actor} is about what "
                            f"{first.worker} claimed first (#{first.seq}). The earlier claim wins: "
                            f"{fe.actor} and {first.worker}, settle it by DM before either merges.")
                    self._push(out, "forge", fe.seq, text, (first.worker, fe.actor), ts, "PR")

    def forge(self, events: Iterable[ForgeEvent]) -> dict[str, list[Event]]:
        out: dict[str, list[Event]] = defaultdict(list)
        ts = now_us()
        for fe in events:
            if self.leases is not None and fe.kind.startswith("pr_"):
                self.leases.touch(fe.actor, fe.ts)  # a PR action renews its actor's claims (as the board's touch)
                if fe.kind == "pr_opened":
                    self._pr_overlap(out, fe, ts)
            text = forge_text(fe)
            for w in dict.fromkeys(fe.notify):  # one event per worker: forge events are few, and each wakes its worker
                h = self.host_of.get(w)
                if h is not None and w != fe.actor:
                    out[h].append(Event("forge", fe.seq, "forge", text, fe.actor, ts, (), (w,)))
        return out

    def split(self, source: str, batch: list[Any]) -> dict[str, list[Event]]:
        return {"board": self.board, "chat": self.chat, "forge": self.forge}[source](batch)
