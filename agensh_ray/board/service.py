"""`BoardService`: one `Board` served to many concurrent callers on an asyncio event loop. The board
actor is this class under `ray.remote` (`agensh_ray.actors.board`); tests drive it directly.

Writes go through a group-commit loop: calls that arrive while an fsync is in flight are queued and
written together with the next single write + fsync, which runs in a thread so readers are not
blocked. An entry becomes visible to readers (recent/since/wait_since/grep/unfold) only after its
batch is durable, and seqs are assigned in commit order. The `board` trace rows of the committed
entries are written while the next fsync runs.

Reads answer from memory; `wait_since_rows` is a long poll woken by the next commit; a grep runs in a
thread of its own in steps of bounded work (its regexes are RE2: linear time, and matching releases the
GIL), so writes go on meanwhile; its caller is answered at `grep_budget_s` at the latest, with a refusal
that says how long it ran and how far it got, and its thread stops after the RE2 call it is in.

Every method is async and returns `BoardError` instead of raising it: a refusal crosses a process
boundary as a value, and the client (`agensh_ray.board.client`) raises it again with the board's
own message, not a wrapped traceback.
"""

from __future__ import annotations

import asyncio
import gc
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Generator
from dataclasses import replace
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from agensh_ray.board.leases import Lease, claim_life_wall_s
from agensh_ray.board.limits import BoardLimits
from agensh_ray.board.store import Board
from agensh_ray.errors import BoardError
from agensh_ray.inputs import whole_number
from agensh_ray.models import BoardEntry
from agensh_ray.trace import BoardRow, TraceWriter
from agensh_ray.trace.reconcile import missing_seqs
from agensh_ray.wire import RecentDelta, Row

_BOARD_TRACE_FIELDS = {"ts", "worker_id", "event_id", "seq", "type", "text", "has_detail"}
"""What `BoardService._trace_backlog` writes: every BoardRow column but run_id and schema_version (the
trace writer fills those in). Checked at import, so the row model and this path cannot drift apart."""
assert _BOARD_TRACE_FIELDS | {"run_id", "schema_version"} == set(BoardRow.model_fields), (
    "BoardService._trace_backlog must write BoardRow's columns"
)

GREP_THREADS = 2
"""Greps that run at once (each in a thread; more wait their turn, their budget running; a thread whose
caller was answered at the budget is busy until its current RE2 call ends)."""


class _Search:
    """One grep's steps as its thread runs them: how far it got, and a flag that stops it between steps."""

    def __init__(self, steps: Generator[int, None, list[int]], deadline: float) -> None:
        self.steps = steps
        self.deadline = deadline
        self.searched = 0
        self.stop = threading.Event()

    def run(self) -> list[int] | None:
        """Run the steps until done (the hits), or until stopped or past the deadline (None), checked
        before each step: a search that waited for a thread past its caller's answer does not start."""
        while not self.stop.is_set() and time.monotonic() < self.deadline:
            try:
                self.searched = next(self.steps)
            except StopIteration as done:
                return done.value
        self.steps.close()
        return None


class BoardService:
    """Owns a `Board`; every method is async and returns BoardError instead of raising it.

    In a run it is the board actor (`get_or_create_board`: named, detached, restarted on death; the
    constructor reloads the log). `clock` is the board's clock (entry stamps, CLAIM expiry)."""

    def __init__(
        self,
        log_path: str,
        limits: BoardLimits | None = None,
        time_scale: float = 1.0,
        start_time: float | None = None,
        run_dir: str | None = None,
        run_id: str = "",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._trace = TraceWriter(run_dir, "board", run_id) if run_dir else None
        # Entry timestamps stay real UTC (the trace joins tables on them); time_scale turns the schedule
        # constant into wall seconds instead, by the run's claim rule (agensh_ray/board/leases.py): under
        # `legacy` a claim TTL of 1 schedule hour lasts 1/time_scale wall hours; under `lease` never less
        # than claim_floor_wall_s. (start_time is kept for callers; the clock no longer needs it.)
        limits = limits or BoardLimits()
        life = claim_life_wall_s(limits.claim_ttl_s, float(time_scale), limits.claim_rule, limits.claim_floor_wall_s)
        if life != limits.claim_ttl_s:
            limits = limits.model_copy(update={"claim_ttl_s": life})
        self.board = Board(Path(log_path), limits, clock)
        self._gc_ms: deque[tuple[int, float]] = deque(maxlen=1000)
        """(generation, pause ms) of this process's latest garbage collections, for `info`."""
        self._gc_t0 = 0.0
        gc.callbacks.append(self._on_gc)
        self._queue: list[tuple[list[Any], asyncio.Future[list[Any]], bool]] = []
        """Write calls waiting for the next commit: (entries, answer, compact answer wanted)."""
        self._flusher: asyncio.Task[None] | None = None
        self._changed: asyncio.Event | None = None
        self._commits = 0
        self._written = 0
        self._write_ms: deque[float] = deque(maxlen=10_000)
        """Inside-the-service latency of the latest write calls (queue + fsync), for `info`."""
        self._untraced: list[Row] = []
        """Committed entries whose `board` trace rows are not written yet (written during the next fsync)."""
        self._grep_pool: ThreadPoolExecutor | None = None
        self._greps_started = 0
        self._greps_running = 0
        self._run_dir = run_dir
        self.reconciled = self._reconcile_trace()
        """Board rows written at construction for entries of the log no trace file held (a predecessor
        that died before flushing them)."""

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
        (`agensh_ray.wire.entries_from_acks` makes the models on the writer's side)."""
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
        board = self.board
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
        self._trace_rows(rows)

    def _trace_rows(self, rows: list[Any]) -> None:
        if not rows:
            return
        write = self._trace.write_fields  # type: ignore[union-attr]
        for r in rows:  # BoardRow's fields, from entries the board has validated
            write("board", {"ts": r.ts, "worker_id": r.worker_id, "event_id": f"board:{r.seq}", "seq": r.seq,
                            "type": r.type, "text": r.text, "has_detail": r.has_detail})

    def _reconcile_trace(self) -> int:
        """Write the `board` rows of logged entries that no trace file holds (agensh_ray/trace/reconcile.py);
        at construction (a restart included) and at close, after this writer's own flush."""
        if self._trace is None:
            return 0
        self._trace.flush()
        entries = {r.seq: r for r in self.board.since_rows(0, len(self.board) + 1)}
        missing = missing_seqs(self._run_dir, "board", entries)
        self._trace_rows([entries[s] for s in missing])
        self._trace.flush()
        return len(missing)

    # ------------------------------------------------------------ reads

    async def recent(self, limit: int | None = None) -> list[BoardEntry] | BoardError:
        try:
            return self.board.recent(limit)
        except BoardError as exc:
            return exc

    async def since(self, cursor: int, limit: int = 1000) -> list[BoardEntry] | BoardError:
        try:
            return self.board.since(cursor, limit)
        except BoardError as exc:
            return exc

    async def since_rows(self, cursor: int, limit: int = 1000) -> list[Row] | BoardError:
        try:
            return self.board.since_rows(cursor, limit)
        except BoardError as exc:
            return exc

    async def wait_since(
        self, cursor: int, timeout_s: float = 30.0, limit: int = 1000
    ) -> list[BoardEntry] | BoardError:
        rows = await self.wait_since_rows(cursor, timeout_s, limit)
        return rows if isinstance(rows, BoardError) else [r.entry() for r in rows]

    async def wait_since_rows(
        self, cursor: int, timeout_s: float = 30.0, limit: int = 1000
    ) -> list[Row] | BoardError:
        """Entries with seq > cursor as soon as there are any, or [] after timeout_s."""
        try:
            whole_number(limit, "limit", 1, None, BoardError)
        except BoardError as exc:
            return exc
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, float(timeout_s))
        while self.board.last_seq <= cursor:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return []
            try:
                await asyncio.wait_for(self._event().wait(), remaining)
            except asyncio.TimeoutError:
                return []
        return self.board.since_rows(cursor, limit)

    async def recent_delta(self, have_lo: int, have_hi: int) -> RecentDelta:
        return self.board.recent_delta(have_lo, have_hi)

    async def grep(
        self, pattern: str, regex: bool = True, limit: int = 50, type: str | None = None
    ) -> list[BoardEntry] | BoardError:
        """Runs in steps of bounded work in a thread of its own (RE2 releases the GIL while it matches),
        so writes and reads go on meanwhile on the event loop. Answered at `grep_budget_s` (counted from
        this call) at the latest, with a refusal that says how long it ran and how far it got; the
        thread stops after the RE2 call it is in (one entry at most)."""
        t0 = time.monotonic()
        self._greps_started += 1
        total = len(self.board)
        try:
            steps = self.board.grep_steps(pattern, regex=regex, limit=limit, type=type)
        except BoardError as exc:
            return exc
        if self._grep_pool is None:
            self._grep_pool = ThreadPoolExecutor(GREP_THREADS, thread_name_prefix="board-grep")
        budget = self.board.limits.grep_budget_s
        search = _Search(steps, t0 + budget)
        self._greps_running += 1
        fut = asyncio.get_running_loop().run_in_executor(self._grep_pool, search.run)
        fut.add_done_callback(self._grep_done)
        try:
            hits = await asyncio.wait_for(asyncio.shield(fut), max(0.0, t0 + budget - time.monotonic()))
        except asyncio.TimeoutError:
            search.stop.set()  # its thread ends after its current step; the caller is answered now
            hits = None
        except asyncio.CancelledError:
            search.stop.set()
            raise
        if hits is None:
            return BoardError(
                f"grep {pattern!r} stopped after {time.monotonic() - t0:.2f} s having searched the newest "
                f"{search.searched:,} of {total:,} entries; a pattern with a plain word in it (or regex=false) "
                "searches an index and is fast"
            )
        return self.board.entries(hits)

    def _grep_done(self, fut: asyncio.Future[Any]) -> None:
        """A grep's thread has ended (answered, or stopped after its caller was)."""
        self._greps_running -= 1
        if not fut.cancelled():
            fut.exception()  # retrieved: a search that failed after its caller was answered is not logged

    async def unfold(self, seq: int) -> BoardEntry | BoardError:
        try:
            return self.board.unfold(seq)
        except BoardError as exc:
            return exc

    async def last_seq(self) -> int:
        return self.board.last_seq

    async def cursor_at(self, ts: int) -> int:
        return self.board.cursor_at(ts)

    async def pid(self) -> int:
        return os.getpid()

    def close(self) -> None:
        """End of run: flush the trace, close the log, stop counting garbage collections (idempotent)."""
        if self._trace is not None:
            self._trace_backlog()
            self._reconcile_trace()
            self._trace.close()
        if self._grep_pool is not None:
            self._grep_pool.shutdown(wait=False, cancel_futures=True)
        self.board.close()
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)

    async def claims(self, key: str | None = None) -> list[Lease] | BoardError:
        """The open claims on `key`, oldest first (every open claim when None): `Board.open_claims`."""
        try:
            return [replace(c) for c in self.board.open_claims(key)]  # copies: a caller in this process owns them
        except BoardError as exc:
            return exc

    async def touch(self, worker: str) -> None:
        """`worker` acted on the forge: its open claims are renewed (`Board.touch`, rule `lease`)."""
        if isinstance(worker, str) and worker:
            self.board.touch(worker)

    async def info(self) -> dict[str, Any]:
        """Where the log is, how big the board is, and group-commit counters since this process started."""
        board = self.board
        return {
            "log_path": str(board.log_path),
            "entries": len(board),
            "last_seq": board.last_seq,
            "last_ts": board.last_ts,
            "claim_ttl_s": board.limits.claim_ttl_s,
            "claim_rule": board.limits.claim_rule,
            "pid": os.getpid(),
            "commits": self._commits,
            "entries_committed": self._written,
            "write_ms_p50": _pct(self._write_ms, 0.5),
            "write_ms_p99": _pct(self._write_ms, 0.99),
            "gc_pauses": len(self._gc_ms),
            "gc_pause_max_ms": round(max((ms for _, ms in self._gc_ms), default=0.0), 2),
            "gc_gen2_pauses": sum(1 for g, _ in self._gc_ms if g == 2),
            "greps_started": self._greps_started,
            "greps_running": self._greps_running,
        }


def _pct(xs: Any, q: float) -> float | None:
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 2) if xs else None
