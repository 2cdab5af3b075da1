"""The board as a Ray actor, and `BoardHandle`, the facade everyone else uses.

`BoardActor` is an async actor that owns one `agensh_ray.board.Board` and
delegates to it. Writes go through a group-commit loop: calls that arrive
while an fsync is in flight are queued and written together with the next
single write + fsync, which runs in a thread so readers are not blocked. An
entry becomes visible to readers (recent/since/wait_since/grep/unfold) only
after its batch is durable, and seqs are assigned in commit order.

The actor is detached, named, `max_restarts=-1` and `max_task_retries=-1`: if
its process dies, Ray restarts it (the constructor reloads the log) and
re-sends the calls that were in flight. `BoardHandle` gives every write a
`request_id` if it has none, so a re-sent write returns the entry that was
already written instead of writing it twice.

Refusals (`BoardError`) are returned as values across the Ray boundary and
re-raised by the facade, so callers get the plain message, not a wrapped
traceback.

Hot paths at 1,024 workers: a write's answer is (seq, ts) per entry, not the
entry (the writer has the rest); a host's concurrent writes leave in shared calls
(`_WriteCoalescer`, client-side group commit); a host keeps its own copy of the
recent view and asks only for what changed (`recent_delta`), so a read costs
the new entries, not 2,000; a long grep runs in slices of a few milliseconds
on the event loop, so writes go on meanwhile, and stops after `grep_budget_s`.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import os
import time
import uuid
from collections import deque
from pathlib import Path
from typing import Any

import ray

from agensh_ray.board import (
    Board,
    BoardError,
    BoardLimits,
    RecentDelta,
    Row,
    _seq_of,
    apply_recent_delta,
    entries_from_acks,
)
from agensh_ray.models import BoardEntry, BoardEntryIn, EntryType
from agensh_ray.trace import BoardRow, TraceWriter

_BOARD_TRACE_FIELDS = {"ts", "worker_id", "event_id", "seq", "type", "text", "has_detail"}
"""What `BoardActor._trace_backlog` writes: every BoardRow column but run_id and schema_version (the
trace writer fills those in). Checked at import, so the row model and this path cannot drift apart."""
assert _BOARD_TRACE_FIELDS | {"run_id", "schema_version"} == set(BoardRow.model_fields), (
    "BoardActor._trace_backlog must write BoardRow's columns"
)

GREP_SLICE_S = 0.004
"""A long grep yields the event loop this often (seconds), so a write waits at most about this long."""
DEFAULT_MAX_CONCURRENCY = 4096
"""Concurrent calls the actor accepts (long polls from up to 1,024 workers plus their writes)."""


@ray.remote
class BoardActor:
    """Owns a `Board`; every method is async and returns BoardError instead of raising it.

    Create it with `get_or_create_board` (named, detached, restarted on death).
    """

    def __init__(
        self,
        log_path: str,
        limits: BoardLimits | None = None,
        time_scale: float = 1.0,
        start_time: float | None = None,
        run_dir: str | None = None,
        run_id: str = "",
    ) -> None:
        self._trace = TraceWriter(run_dir, "board", run_id) if run_dir else None
        # Entry timestamps stay real UTC (the trace joins tables on them); time_scale compresses the
        # schedule constant instead: a claim TTL of 1 schedule hour lasts 1/time_scale wall hours.
        # (start_time is kept for callers; the clock no longer needs it.)
        limits = limits or BoardLimits()
        scale = float(time_scale)
        if scale != 1.0:
            limits = limits.model_copy(update={"claim_ttl_s": limits.claim_ttl_s / scale})
        self._board = Board(Path(log_path), limits, time.time)
        self._gc_ms: deque[tuple[int, float]] = deque(maxlen=1000)
        """(generation, pause ms) of this process's latest garbage collections, for `info`."""
        self._gc_t0 = 0.0
        gc.callbacks.append(self._on_gc)
        # Everything alive now (Ray, pydantic, pyarrow, the reloaded board) lives as long as the
        # process: out of the collector's sight, a full collection walks only what came later
        # (measured: full-collection pauses of ~30 ms under write load without this).
        gc.freeze()
        self._queue: list[tuple[list[Any], asyncio.Future[list[Any]], bool]] = []
        """Write calls waiting for the next commit: (entries, answer, compact answer wanted)."""
        self._flusher: asyncio.Task[None] | None = None
        self._changed: asyncio.Event | None = None
        self._commits = 0
        self._written = 0
        self._write_ms: deque[float] = deque(maxlen=10_000)
        """Inside-the-actor latency of the latest write calls (queue + fsync), for `info`."""
        self._untraced: list[Row] = []
        """Committed entries whose `board` trace rows are not written yet (written during the next fsync)."""

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_t0 = time.perf_counter()
        else:
            self._gc_ms.append((info["generation"], (time.perf_counter() - self._gc_t0) * 1000))

    # ------------------------------------------------------------ writes (group commit)

    def _event(self) -> asyncio.Event:
        if self._changed is None:
            self._changed = asyncio.Event()
        return self._changed

    def _notify(self) -> None:
        ev = self._event()
        self._changed = asyncio.Event()
        ev.set()

    async def write_acks(self, entries: list[Any]) -> list[Any]:
        """The write path: entries as `EntryFields` tuples; answers in the compact form
        (`agensh_ray.board.entries_from_acks` makes the models on the writer's side)."""
        return await self._submit(entries, compact=True)

    async def _submit(self, entries: list[Any], compact: bool) -> list[Any]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[list[Any]] = loop.create_future()
        t0 = loop.time()
        self._queue.append((entries, fut, compact))
        if self._flusher is None:
            self._flusher = asyncio.ensure_future(self._flush_loop())
        res = await asyncio.shield(fut)
        self._write_ms.append((loop.time() - t0) * 1000)
        return res

    async def write_batch(self, entries: list[Any]) -> list[BoardEntry | BoardError]:
        return [r if isinstance(r, BoardError) else r.entry() for r in await self._submit(list(entries), False)]

    async def write(self, entry: Any) -> BoardEntry | BoardError:
        (res,) = await self.write_batch([entry])
        return res

    async def _flush_loop(self) -> None:
        board = self._board
        try:
            while self._queue:
                batch, self._queue = self._queue, []
                flat = [e for entries, _, _ in batch for e in entries]
                try:
                    pb = board.prepare_batch(flat)
                    if pb.data:
                        io = asyncio.ensure_future(asyncio.to_thread(board.commit_io, pb))
                        self._trace_backlog()  # the previous batches' trace rows, while the fsync runs
                        try:
                            await io
                        except BaseException:
                            board.abort(pb)
                            raise
                        self._commits += 1
                        self._written += len(pb.new)
                    results = board.apply(pb)
                except Exception as exc:  # IO failure: every caller of this batch gets it
                    for _, fut, _ in batch:
                        if not fut.done():
                            fut.set_exception(exc)
                    continue
                k = 0
                for entries, fut, compact in batch:
                    if not fut.done():
                        fut.set_result((pb.acks if compact else results)[k : k + len(entries)])
                    k += len(entries)
                if pb.new:
                    self._notify()
                    if self._trace is not None:
                        self._untraced.extend(p.row for p in pb.new)
            self._trace_backlog()
        finally:
            self._flusher = None

    def _trace_backlog(self) -> None:
        rows, self._untraced = self._untraced, []
        if not rows:
            return
        write = self._trace.write_fields  # type: ignore[union-attr]
        for r in rows:  # BoardRow's fields, from entries the board has validated
            write("board", {"ts": r.ts, "worker_id": r.worker_id, "event_id": f"board:{r.seq}", "seq": r.seq,
                            "type": r.type, "text": r.text, "has_detail": r.has_detail})

    # ------------------------------------------------------------ reads

    async def recent(self, limit: int | None = None) -> list[BoardEntry]:
        return self._board.recent(limit)

    async def since(self, cursor: int, limit: int = 1000) -> list[BoardEntry]:
        return self._board.since(cursor, limit)

    async def since_rows(self, cursor: int, limit: int = 1000) -> list[Row]:
        return self._board.since_rows(cursor, limit)

    async def wait_since(self, cursor: int, timeout_s: float = 30.0, limit: int = 1000) -> list[BoardEntry]:
        return [r.entry() for r in await self.wait_since_rows(cursor, timeout_s, limit)]

    async def wait_since_rows(self, cursor: int, timeout_s: float = 30.0, limit: int = 1000) -> list[Row]:
        """Entries with seq > cursor as soon as there are any, or [] after timeout_s."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, float(timeout_s))
        while self._board.last_seq <= cursor:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return []
            try:
                await asyncio.wait_for(self._event().wait(), remaining)
            except asyncio.TimeoutError:
                return []
        return self._board.since_rows(cursor, limit)

    async def recent_delta(self, have_lo: int, have_hi: int) -> RecentDelta:
        return self._board.recent_delta(have_lo, have_hi)

    async def grep(
        self, pattern: str, regex: bool = True, limit: int = 50, type: str | None = None
    ) -> list[BoardEntry] | BoardError:
        """Runs in slices of about GREP_SLICE_S on the event loop, so writes and reads go on during a
        long search; stopped after `grep_budget_s`."""
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        budget = self._board.limits.grep_budget_s
        slice_end = t0 + GREP_SLICE_S
        try:
            steps = self._board.grep_steps(pattern, regex=regex, limit=limit, type=type)
            while True:
                try:
                    searched = next(steps)
                except StopIteration as done:
                    return done.value
                now = loop.time()
                if now - t0 > budget:
                    total = len(self._board)
                    return BoardError(
                        f"grep {pattern!r} stopped after {budget:g} s having searched the newest {searched:,} of "
                        f"{total:,} entries; a pattern with a plain word in it (or regex=false) searches an index "
                        "and is fast"
                    )
                if now >= slice_end:
                    await asyncio.sleep(0)
                    slice_end = loop.time() + GREP_SLICE_S
        except BoardError as exc:
            return exc

    async def unfold(self, seq: int) -> BoardEntry | BoardError:
        try:
            return self._board.unfold(seq)
        except BoardError as exc:
            return exc

    async def last_seq(self) -> int:
        return self._board.last_seq

    async def cursor_at(self, ts: int) -> int:
        return self._board.cursor_at(ts)

    async def pid(self) -> int:
        return os.getpid()

    async def close(self) -> None:
        """Flush the trace (end of run)."""
        if self._trace is not None:
            self._trace_backlog()
            self._trace.close()

    async def info(self) -> dict[str, Any]:
        """Where the log is, how big the board is, and group-commit counters since this process started."""
        return {
            "log_path": str(self._board.log_path),
            "entries": len(self._board),
            "last_seq": self._board.last_seq,
            "last_ts": self._board.last_ts,
            "claim_ttl_s": self._board.limits.claim_ttl_s,
            "pid": os.getpid(),
            "commits": self._commits,
            "entries_committed": self._written,
            "write_ms_p50": _pct(self._write_ms, 0.5),
            "write_ms_p99": _pct(self._write_ms, 0.99),
            "gc_pauses": len(self._gc_ms),
            "gc_pause_max_ms": round(max((ms for _, ms in self._gc_ms), default=0.0), 2),
            "gc_gen2_pauses": sum(1 for g, _ in self._gc_ms if g == 2),
        }


class _WriteCoalescer:
    """Client-side group commit: while `MAX_INFLIGHT` write calls from this process are in flight,
    further writes queue and leave together in the next call. A host serving 64 workers thus makes
    one call per burst instead of one per entry, and an idle one adds no delay."""

    MAX_INFLIGHT = 2

    def __init__(self, actor: Any, loop: asyncio.AbstractEventLoop) -> None:
        self.actor = actor
        self.loop = loop
        self.queue: list[tuple[list[Any], asyncio.Future[list[BoardEntry | BoardError]]]] = []
        self.inflight = 0
        self.senders: set[asyncio.Task[None]] = set()
        """Strong references: the loop keeps only weak ones, and a collected sender strands its callers."""

    async def write(self, entries: list[Any]) -> list[BoardEntry | BoardError]:
        fut: asyncio.Future[list[BoardEntry | BoardError]] = self.loop.create_future()
        self.queue.append((entries, fut))
        if self.inflight < self.MAX_INFLIGHT:
            self.inflight += 1
            task = self.loop.create_task(self._send())
            self.senders.add(task)
            task.add_done_callback(self.senders.discard)
        return await fut

    async def _send(self) -> None:
        try:
            while self.queue:
                batch, self.queue = self.queue, []
                try:
                    res = await self.actor.write_acks.remote([e for entries, _ in batch for e in entries])
                except BaseException as exc:  # the actor died for good, or we are cancelled: tell every caller
                    for _, fut in batch:
                        if not fut.done():
                            fut.set_exception(exc)
                    if isinstance(exc, asyncio.CancelledError):
                        raise
                    continue
                k = 0
                for entries, fut in batch:
                    if not fut.done():
                        fut.set_result(res[k : k + len(entries)])
                    k += len(entries)
        finally:
            self.inflight -= 1


class _RecentReader:
    """One recent-view fetch in flight per process: readers that arrive during a fetch are all served
    by the next one (started when it returns), so their answer is as fresh as their call, and 64
    workers reading at once cost the board one or two small deltas, not 64."""

    def __init__(self, handle: "BoardHandle", loop: asyncio.AbstractEventLoop) -> None:
        self.handle = handle
        self.loop = loop
        self.waiters: list[asyncio.Future[list[BoardEntry]]] = []
        self.task: asyncio.Task[None] | None = None
        self.fetches = 0
        self.rows = 0
        """Calls made and entries received (a reader that keeps up receives each entry about once)."""

    async def read(self) -> list[BoardEntry]:
        h = self.handle
        fed = h._fed_view(self.loop.time())
        if fed is not None:
            return fed
        if not h._wrote and self.loop.time() - h._view_at < h.RECENT_MAX_AGE_S and not self.waiters:
            return h._view
        fut: asyncio.Future[list[BoardEntry]] = self.loop.create_future()
        self.waiters.append(fut)
        if self.task is None or self.task.done():
            self.task = self.loop.create_task(self._fetch())
        return await fut

    async def _fetch(self) -> None:
        h = self.handle
        while self.waiters:
            waiters, self.waiters = self.waiters, []
            try:
                held = h._view
                started, h._wrote = self.loop.time(), False
                delta = await h.actor.recent_delta.remote(*h._bounds(held))
                self.fetches += 1
                self.rows += len(delta.rows)
                view = h._merge_view(held, delta)
                h._view_at = started
                h._fetched(delta)
            except BaseException as exc:
                h._wrote = True  # unknown: fetch again next time
                for w in waiters:
                    if not w.done():
                        w.set_exception(exc)
                if isinstance(exc, asyncio.CancelledError):
                    raise
                continue
            for w in waiters:
                if not w.done():
                    w.set_result(view)


def _oldest_claim(entries: list[BoardEntry]) -> int | None:
    return min((e.ts for e in entries if e.type is EntryType.CLAIM), default=None)


def _pct(xs: Any, q: float) -> float | None:
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 2) if xs else None


def _raise_if_error(value: Any) -> Any:
    if isinstance(value, BoardError):
        raise BoardError(str(value)) from None
    return value


def _entries(rows: list[Any]) -> list[Any]:
    """Rows from the actor as `BoardEntry` models (refusals stay `BoardError`s)."""
    return [r.entry() if isinstance(r, Row) else r for r in rows]


_RID_PREFIX = uuid.uuid4().hex[:16]
_rid_counter = itertools.count()


def _request_id() -> str:
    """A fresh idempotency key: this process's random prefix and a counter (unique across processes
    and restarts, and ~10x cheaper than a uuid4 per entry on a host writing for 64 workers)."""
    return f"{_RID_PREFIX}{next(_rid_counter):x}"


def _wire(entry: Any) -> Any:
    """A write request as the actor takes it: an `EntryFields` tuple with an idempotency key, so a
    retried call cannot write it twice. Dicts pass through (the board validates them)."""
    if isinstance(entry, BoardEntryIn):
        return (entry.type, entry.text, entry.detail, entry.worker_id, entry.request_id or _request_id())
    if isinstance(entry, dict) and entry.get("request_id") is None:
        return {**entry, "request_id": _request_id()}
    return entry


class BoardHandle:
    """Facade over the board actor: sync methods for plain code, `a*` coroutines for async actors.

    Picklable: pass it to other actors and tasks. Methods raise `BoardError` with
    the board's own message when a request is refused (`write_batch` returns the
    errors in place instead, so one bad entry does not hide the others).
    """

    FED_MAX_AGE_S = 2.0
    """A WorkerActor's copy of the recent view is kept current by the board events its router delivers
    (`observe`): `arecent` answers from it, without a call, while deliveries keep coming (a router
    that stops delivering for this long sends readers back to the board)."""
    VIEW_SLACK = 1000
    """Entries a fed copy keeps beyond the view's size, for CLAIMs that expire out of it."""

    RECENT_MAX_AGE_S = 0.5
    """`arecent` may answer from this process's copy of the view if it was fetched less than this long
    ago and this process wrote nothing since (so a worker always sees its own writes). 64 workers
    on a host reading at once then cost the board about two small calls a second."""

    def __init__(self, actor: Any, name: str | None = None, namespace: str | None = None) -> None:
        self.actor = actor
        self.name = name
        self.namespace = namespace
        self._view: list[BoardEntry] = []
        self._view_at = float("-inf")
        """Loop time at which the fetch that produced `_view` started."""
        self._wrote = False
        """A write from this process was acknowledged after that fetch started."""
        self._exact = -1
        """`_view` holds every entry of the board up to this seq (-1: not known to be exact)."""
        self._fed_at = float("-inf")
        """Loop time of the last delivery that kept `_view` exact (see `observe`)."""
        self._trimmed = False
        """`observe` dropped old entries from `_view` since the last fetch."""
        self._limit = 0
        self._claim_ttl_us = 0
        self._oldest_claim_ts: int | None = None
        """The oldest CLAIM stamp in `_view` (None: none there), so a read filters only when one expired."""
        self._own: list[BoardEntry] = []
        """This process's acknowledged writes that the delivery stream has not brought yet."""
        self._writer: _WriteCoalescer | None = None
        self._reader: _RecentReader | None = None

    def __repr__(self) -> str:
        return f"BoardHandle(name={self.name!r}, namespace={self.namespace!r})"

    def __getstate__(self) -> dict[str, Any]:
        # The recent-view copy and the write queue belong to one process.
        return {"actor": self.actor, "name": self.name, "namespace": self.namespace}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["actor"], state["name"], state["namespace"])

    def _merge_view(self, held: list[BoardEntry], delta: RecentDelta) -> list[BoardEntry]:
        view = apply_recent_delta(held, delta)
        if not self._view or not view or view[-1].seq >= self._view[-1].seq:
            self._view = view  # keep the newest of concurrent answers
        return view

    def _fetched(self, delta: RecentDelta) -> None:
        """A fetch made the copy exact up to the board's newest entry."""
        if self._view and self._view[-1].seq > delta.last_seq:
            return  # a newer answer (or delivery) already moved the copy on
        self._exact, self._trimmed = delta.last_seq, False
        self._limit, self._claim_ttl_us = delta.limit, delta.claim_ttl_us
        self._own = [e for e in self._own if e.seq > self._exact]
        self._oldest_claim_ts = _oldest_claim(self._view)

    def observe(self, rows: list[Row], cursor: int | None) -> None:
        """Board entries delivered to this process (seq order; ones it had are skipped) and the board
        cursor they bring it to. Keeps the recent-view copy exact if they continue it without a gap;
        else the copy is left to age and the next read fetches."""
        if self._exact < 0:
            return
        rows = [r for r in rows if r.seq > self._exact]
        if rows and rows[0].seq != self._exact + 1:
            self._exact = -1  # a gap: this copy is no longer exact
            return
        if rows:
            new = [r.entry() for r in rows]
            self._view = self._view + new  # a new list: answers already given stay as they were
            self._exact = rows[-1].seq
            if len(self._view) > self._limit + 2 * self.VIEW_SLACK:
                self._view = self._view[-(self._limit + self.VIEW_SLACK):]
                self._trimmed = True
                self._oldest_claim_ts = _oldest_claim(self._view)
            elif self._oldest_claim_ts is None:
                self._oldest_claim_ts = _oldest_claim(new)
            self._own = [e for e in self._own if e.seq > self._exact]
        if cursor is not None and cursor > self._exact:
            self._exact = -1  # entries up to the cursor went by without reaching this copy
            return
        self._fed_at = time.monotonic()  # the clock of asyncio's loop.time()

    def _fed_view(self, now: float) -> list[BoardEntry] | None:
        """The recent view from the fed copy and this process's own newer writes, or None if the
        copy cannot answer (not exact, not fed lately, or too many expired CLAIMs to fill it)."""
        if self._exact < 0 or now - self._fed_at >= self.FED_MAX_AGE_S:
            return None
        cutoff = int(time.time() * 1e6) - self._claim_ttl_us
        claim = EntryType.CLAIM
        if self._oldest_claim_ts is not None and self._oldest_claim_ts < cutoff:
            # A CLAIM expired: out of the copy for good (expiry only moves forward).
            self._view = [e for e in self._view if e.type is not claim or e.ts >= cutoff]
            self._oldest_claim_ts = _oldest_claim(self._view)
        view = self._view
        own = [e for e in self._own if e.seq > self._exact and (e.type is not claim or e.ts >= cutoff)]
        if own:  # all newer than the copy's entries
            view = view + sorted(own, key=_seq_of)
        if len(view) < self._limit and self._trimmed:
            return None
        return view[-self._limit:] if len(view) > self._limit > 0 else view

    @staticmethod
    def _cut(view: list[BoardEntry], limit: int | None) -> list[BoardEntry]:
        return view[-limit:] if limit is not None and limit > 0 else ([] if limit is not None else list(view))

    @staticmethod
    def _bounds(held: list[BoardEntry]) -> tuple[int, int]:
        return (held[0].seq, held[-1].seq) if held else (0, 0)

    # sync
    def write(self, entry: BoardEntryIn | dict[str, Any]) -> BoardEntry:
        (res,) = self.write_batch([entry])
        return _raise_if_error(res)

    def write_batch(self, entries: list[BoardEntryIn | dict[str, Any]]) -> list[BoardEntry | BoardError]:
        wire = [_wire(e) for e in entries]
        return entries_from_acks(wire, ray.get(self.actor.write_acks.remote(wire)))

    def recent(self, limit: int | None = None) -> list[BoardEntry]:
        """The recent view; this process keeps a copy and fetches only what changed (`recent_delta`)."""
        held = self._view
        return self._cut(self._merge_view(held, ray.get(self.actor.recent_delta.remote(*self._bounds(held)))), limit)

    def since(self, cursor: int, limit: int = 1000) -> list[BoardEntry]:
        return _entries(ray.get(self.actor.since_rows.remote(cursor, limit)))

    def wait_since(self, cursor: int, timeout_s: float = 30.0, limit: int = 1000) -> list[BoardEntry]:
        return _entries(ray.get(self.actor.wait_since_rows.remote(cursor, timeout_s, limit)))

    def grep(self, pattern: str, regex: bool = True, limit: int = 50, type: str | None = None) -> list[BoardEntry]:
        return _raise_if_error(ray.get(self.actor.grep.remote(pattern, regex, limit, type)))

    def unfold(self, seq: int) -> BoardEntry:
        return _raise_if_error(ray.get(self.actor.unfold.remote(seq)))

    def last_seq(self) -> int:
        return ray.get(self.actor.last_seq.remote())

    def pid(self) -> int:
        return ray.get(self.actor.pid.remote())

    def info(self) -> dict[str, Any]:
        return ray.get(self.actor.info.remote())

    # async (from async actors / coroutines)
    def _coalescer(self) -> _WriteCoalescer:
        loop = asyncio.get_running_loop()
        if self._writer is None or self._writer.loop is not loop:
            self._writer = _WriteCoalescer(self.actor, loop)
        return self._writer

    async def awrite(self, entry: BoardEntryIn | dict[str, Any]) -> BoardEntry:
        """Write one entry; concurrent writes from this process share calls (see `_WriteCoalescer`)."""
        (res,) = await self.awrite_batch([entry])
        return _raise_if_error(res)

    async def awrite_batch(self, entries: list[BoardEntryIn | dict[str, Any]]) -> list[BoardEntry | BoardError]:
        wire = [_wire(e) for e in entries]
        res = await self._coalescer().write(wire)
        self._wrote = True
        out = entries_from_acks(wire, res)
        if self._exact >= 0:  # a fed copy shows this process its own writes until the stream brings them
            self._own += [e for e in out if isinstance(e, BoardEntry) and e.seq > self._exact]
        return out

    async def arecent(self, limit: int | None = None) -> list[BoardEntry]:
        """The recent view as of this call or later; this process keeps a copy, fetches only what changed
        (`recent_delta`), and concurrent readers share one fetch (`_RecentReader`)."""
        loop = asyncio.get_running_loop()
        if self._reader is None or self._reader.loop is not loop:
            self._reader = _RecentReader(self, loop)
        return self._cut(await self._reader.read(), limit)

    async def asince(self, cursor: int, limit: int = 1000) -> list[BoardEntry]:
        return _entries(await self.actor.since_rows.remote(cursor, limit))

    async def await_since(self, cursor: int, timeout_s: float = 30.0, limit: int = 1000) -> list[BoardEntry]:
        return _entries(await self.actor.wait_since_rows.remote(cursor, timeout_s, limit))

    async def agrep(
        self, pattern: str, regex: bool = True, limit: int = 50, type: str | None = None
    ) -> list[BoardEntry]:
        return _raise_if_error(await self.actor.grep.remote(pattern, regex, limit, type))

    async def aunfold(self, seq: int) -> BoardEntry:
        return _raise_if_error(await self.actor.unfold.remote(seq))

    async def alast_seq(self) -> int:
        return await self.actor.last_seq.remote()

    def kill(self) -> None:
        """End the actor for good (end of run): no restart."""
        ray.kill(self.actor, no_restart=True)


def get_or_create_board(
    name: str,
    log_path: str | os.PathLike[str],
    limits: BoardLimits | None = None,
    namespace: str | None = None,
    time_scale: float = 1.0,
    start_time: float | None = None,
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
    run_dir: str | None = None,
    run_id: str = "",
) -> BoardHandle:
    """The named, detached board actor (created if absent) behind a `BoardHandle`.

    An existing actor of that name is returned as is (its log path and limits win).
    `time_scale` speeds up the board clock (`start + (now - start) * time_scale`,
    with `start_time` defaulting to now) so CLAIM expiry can be tested quickly.
    """
    actor = BoardActor.options(
        name=name,
        namespace=namespace,
        lifetime="detached",
        get_if_exists=True,
        max_restarts=-1,
        max_task_retries=-1,
        num_cpus=0,
        max_concurrency=max_concurrency,
    ).remote(
        os.path.abspath(os.fspath(log_path)),
        limits,
        time_scale,
        time.time() if start_time is None else start_time,
        run_dir,
        run_id,
    )
    return BoardHandle(actor, name=name, namespace=namespace)
