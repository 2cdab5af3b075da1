"""The recent view as a reader keeps it: the delta math, and one process's copy of the view.

The recent view (the newest 2,000 entries, CLAIMs past their TTL left out) is what every agent reads
at turn start, 1,024 of them. A host does not fetch it whole: it keeps a copy (`RecentView`) and
asks the board only for what changed (`Board.recent_delta` -> `apply_recent_delta`). Better still,
the routers deliver every board entry to every host anyway: a copy that is known to be complete up
to some seq (`exact`) is kept current by those deliveries (`observe`), and then a read costs no call
at all while deliveries keep coming (the "fed view"). This process's own writes show at once (the
"own-writes overlay"), before the delivery stream brings them. A gap in the stream, or a stream that
stops for `FED_MAX_AGE_S`, sends readers back to the board.

Plain and single-threaded (one per process and event loop); clocks injected.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable

from agensh_ray.errors import BoardError
from agensh_ray.inputs import whole_number
from agensh_ray.models import BoardEntry, EntryType
from agensh_ray.wire import RecentDelta, Row


def seq_of(e: BoardEntry) -> int:
    return e.seq


def apply_recent_delta(held: list[BoardEntry], delta: RecentDelta) -> list[BoardEntry]:
    """The new recent view from the view a reader held (oldest first) and the board's delta."""
    rows = [r.entry() for r in delta.rows]
    if delta.reset or not held:
        return rows
    lo, hi = held[0].seq, held[-1].seq
    k = bisect_left(held, delta.first_seq, key=seq_of)
    claim, cutoff = EntryType.CLAIM, delta.claim_cutoff
    kept = [e for e in held[k:] if e.type is not claim or e.ts >= cutoff]
    return [e for e in rows if e.seq < lo] + kept + [e for e in rows if e.seq > hi]


def _oldest_claim(entries: list[BoardEntry]) -> int | None:
    return min((e.ts for e in entries if e.type is EntryType.CLAIM), default=None)


class RecentView:
    """One process's copy of the recent view: what it holds, how fresh it is, and whether the
    delivery stream keeps it exact (see module docstring). Answers are lists that are never changed
    afterwards (a new list replaces the old), so a reader can keep what it was given."""

    FED_MAX_AGE_S = 2.0
    """A WorkerActor's copy of the recent view is kept current by the board events its router delivers
    (`observe`): a read answers from it, without a call, while deliveries keep coming (a router
    that stops delivering for this long sends readers back to the board)."""
    VIEW_SLACK = 1000
    """Entries a fed copy keeps beyond the view's size, for CLAIMs that expire out of it."""
    RECENT_MAX_AGE_S = 0.5
    """A read may answer from this process's copy of the view if it was fetched less than this long
    ago and this process wrote nothing since (so a worker always sees its own writes). 64 workers
    on a host reading at once then cost the board about two small calls a second."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self.clock = clock
        """Monotonic seconds (asyncio's `loop.time()` clock): how old the copy and its last feed are."""
        self.wall = wall
        """The board's clock (UTC seconds): CLAIM expiry in the fed copy."""
        self.view: list[BoardEntry] = []
        self.view_at = float("-inf")
        """Clock time at which the fetch that produced `view` started."""
        self.wrote = False
        """A write from this process was acknowledged after that fetch started."""
        self.exact = -1
        """`view` holds every entry of the board up to this seq (-1: not known to be exact)."""
        self.fed_at = float("-inf")
        """Clock time of the last delivery that kept `view` exact (see `observe`)."""
        self.trimmed = False
        """`observe` dropped old entries from `view` since the last fetch."""
        self.limit = 0
        self.claim_ttl_us = 0
        self.oldest_claim_ts: int | None = None
        """The oldest CLAIM stamp in `view` (None: none there), so a read filters only when one expired."""
        self.own: list[BoardEntry] = []
        """This process's acknowledged writes that the delivery stream has not brought yet."""

    # ------------------------------------------------------------ fetching from the board

    def bounds(self) -> tuple[int, int]:
        """The seqs held, as `recent_delta` takes them."""
        held = self.view
        return (held[0].seq, held[-1].seq) if held else (0, 0)

    def merge(self, held: list[BoardEntry], delta: RecentDelta) -> list[BoardEntry]:
        """The view from `held` (what was held when the fetch started) and the board's answer."""
        view = apply_recent_delta(held, delta)
        if not self.view or not view or view[-1].seq >= self.view[-1].seq:
            self.view = view  # keep the newest of concurrent answers
        return view

    def fetched(self, delta: RecentDelta) -> None:
        """A fetch made the copy exact up to the board's newest entry."""
        if self.view and self.view[-1].seq > delta.last_seq:
            return  # a newer answer (or delivery) already moved the copy on
        self.exact, self.trimmed = delta.last_seq, False
        self.limit, self.claim_ttl_us = delta.limit, delta.claim_ttl_us
        self.own = [e for e in self.own if e.seq > self.exact]
        self.oldest_claim_ts = _oldest_claim(self.view)

    def fresh(self, now: float) -> list[BoardEntry] | None:
        """The copy, if it was fetched less than `RECENT_MAX_AGE_S` ago with no write from here since."""
        if not self.wrote and now - self.view_at < self.RECENT_MAX_AGE_S:
            return self.view
        return None

    # ------------------------------------------------------------ fed by deliveries

    def observe(self, rows: list[Row], cursor: int | None) -> None:
        """Board entries delivered to this process (seq order; ones it had are skipped) and the board
        cursor they bring it to. Keeps the recent-view copy exact if they continue it without a gap;
        else the copy is left to age and the next read fetches."""
        if self.exact < 0:
            return
        rows = [r for r in rows if r.seq > self.exact]
        if rows and rows[0].seq != self.exact + 1:
            self.exact = -1  # a gap: this copy is no longer exact
            return
        if rows:
            new = [r.entry() for r in rows]
            self.view = self.view + new  # a new list: answers already given stay as they were
            self.exact = rows[-1].seq
            if len(self.view) > self.limit + 2 * self.VIEW_SLACK:
                self.view = self.view[-(self.limit + self.VIEW_SLACK):]
                self.trimmed = True
                self.oldest_claim_ts = _oldest_claim(self.view)
            elif self.oldest_claim_ts is None:
                self.oldest_claim_ts = _oldest_claim(new)
            self.own = [e for e in self.own if e.seq > self.exact]
        if cursor is not None and cursor > self.exact:
            self.exact = -1  # entries up to the cursor went by without reaching this copy
            return
        self.fed_at = self.clock()

    def wrote_entries(self, entries: list[BoardEntry]) -> None:
        """This process's writes were acknowledged: a fed copy shows them until the stream brings them."""
        self.wrote = True
        if self.exact >= 0:
            self.own += [e for e in entries if isinstance(e, BoardEntry) and e.seq > self.exact]

    def fed(self, now: float) -> list[BoardEntry] | None:
        """The recent view from the fed copy and this process's own newer writes, or None if the
        copy cannot answer (not exact, not fed lately, or too many expired CLAIMs to fill it)."""
        if self.exact < 0 or now - self.fed_at >= self.FED_MAX_AGE_S:
            return None
        cutoff = int(self.wall() * 1e6) - self.claim_ttl_us
        claim = EntryType.CLAIM
        if self.oldest_claim_ts is not None and self.oldest_claim_ts < cutoff:
            # A CLAIM expired: out of the copy for good (expiry only moves forward).
            self.view = [e for e in self.view if e.type is not claim or e.ts >= cutoff]
            self.oldest_claim_ts = _oldest_claim(self.view)
        view = self.view
        own = [e for e in self.own if e.seq > self.exact and (e.type is not claim or e.ts >= cutoff)]
        if own:  # all newer than the copy's entries
            view = view + sorted(own, key=seq_of)
        if len(view) < self.limit and self.trimmed:
            return None
        return view[-self.limit:] if len(view) > self.limit > 0 else view


def cut(view: list[BoardEntry], limit: int | None) -> list[BoardEntry]:
    """The newest `limit` entries of a view (a copy of all of them without a limit); BoardError for a
    limit below 1."""
    if limit is None:
        return list(view)
    return view[-whole_number(limit, "limit", 1, None, BoardError):]
