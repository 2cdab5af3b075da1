"""`BoardClient`: how a process uses the board, over any "board remote" whose methods it awaits.

The remote is the board actor behind `agensh_ray.actors.proxy.AsyncProxy` in a run, or a
`BoardService` itself in tests (no Ray): both answer `write_acks`, `recent_delta`, `since_rows`,
`wait_since_rows`, `grep`, `claims`, `touch`, `unfold`, `last_seq`, `cursor_at` and `info`, with refusals returned as
`BoardError` values, which the client raises again with the board's own message.

What the client adds, for the hot paths at 1,024 workers:
* every write gets a `request_id` if it has none, so a call re-sent after the board restarted
  returns the entry already written instead of writing it twice;
* a host's concurrent writes leave in shared calls (`_WriteCoalescer`, client-side group commit),
  and a write's answer is (seq, ts) per entry (`agensh_ray.wire.entries_from_acks`);
* the recent view is a local copy (`agensh_ray.board.view.RecentView`) fetched by delta, shared by
  concurrent readers (`_RecentReader`), and fed by the deliveries the host gets anyway (`observe`);
* every async call has a deadline (`CALL_DEADLINE_S`, beyond a long poll's own timeout): a call lost while
  the board actor restarts (Ray has hung such calls of async actors) fails with `BoardTimeout`
  instead of stranding its caller, and with it every writer queued behind it in this process.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections.abc import Callable
from typing import Any

from agensh_ray.board.view import RecentView, cut
from agensh_ray.errors import BoardError
from agensh_ray.models import BoardEntry, BoardEntryIn
from agensh_ray.wire import Row, entries_from_acks


CALL_DEADLINE_S = 120.0
"""How long a board call may go unanswered. A live board answers in milliseconds and a restarted one
replays its log in seconds; a call past this is lost, and a write may be sent again (its request id
makes that safe)."""


class BoardTimeout(TimeoutError):
    """A board call got no answer within its deadline."""


async def within(call: Any, deadline_s: float, what: str) -> Any:
    """Await `call`, or raise `BoardTimeout` naming `what` after `deadline_s`."""
    try:
        return await asyncio.wait_for(call, deadline_s)
    except asyncio.TimeoutError:
        raise BoardTimeout(f"the board did not answer {what} within {deadline_s:g} s (is it restarting?); "
                           "try again") from None


def raise_if_error(value: Any) -> Any:
    """A board answer, or its refusal raised with the board's own message."""
    if isinstance(value, BoardError):
        raise BoardError(str(value)) from None
    return value


def as_entries(rows: list[Any]) -> list[Any]:
    """Rows from the board as `BoardEntry` models (refusals stay `BoardError`s)."""
    return [r.entry() if isinstance(r, Row) else r for r in rows]


_RID_PREFIX = uuid.uuid4().hex[:16]
_rid_counter = itertools.count()


def _request_id() -> str:
    """A fresh idempotency key: this process's random prefix and a counter (unique across processes
    and restarts, and ~10x cheaper than a uuid4 per entry on a host writing for 64 workers)."""
    return f"{_RID_PREFIX}{next(_rid_counter):x}"


def wire_request(entry: Any) -> Any:
    """A write request as the board takes it: an `EntryFields` tuple with an idempotency key, so a
    retried call cannot write it twice. Dicts pass through (the board validates them)."""
    if isinstance(entry, BoardEntryIn):
        return (entry.type, entry.text, entry.detail, entry.worker_id, entry.request_id or _request_id())
    if isinstance(entry, dict) and entry.get("request_id") is None:
        return {**entry, "request_id": _request_id()}
    return entry


class _WriteCoalescer:
    """Client-side group commit: while `MAX_INFLIGHT` write calls from this process are in flight,
    further writes queue and leave together in the next call. A host serving 64 workers thus makes
    one call per burst instead of one per entry, and an idle one adds no delay."""

    MAX_INFLIGHT = 2

    def __init__(self, remote: Any, loop: asyncio.AbstractEventLoop, deadline_s: float) -> None:
        self.remote = remote
        self.loop = loop
        self.deadline_s = deadline_s
        self.queue: list[tuple[list[Any], asyncio.Future[list[Any]]]] = []
        self.inflight = 0
        self.senders: set[asyncio.Task[None]] = set()
        """Strong references: the loop keeps only weak ones, and a collected sender strands its callers."""

    async def write(self, entries: list[Any]) -> list[Any]:
        fut: asyncio.Future[list[Any]] = self.loop.create_future()
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
                    res = await within(self.remote.write_acks([e for entries, _ in batch for e in entries]),
                                       self.deadline_s, "a write")
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

    def __init__(self, remote: Any, view: RecentView, loop: asyncio.AbstractEventLoop, deadline_s: float) -> None:
        self.remote = remote
        self.deadline_s = deadline_s
        self.view = view
        self.loop = loop
        self.waiters: list[asyncio.Future[list[BoardEntry]]] = []
        self.task: asyncio.Task[None] | None = None
        self.fetches = 0
        self.rows = 0
        """Calls made and entries received (a reader that keeps up receives each entry about once)."""

    async def read(self) -> list[BoardEntry]:
        v = self.view
        now = v.clock()
        fed = v.fed(now)
        if fed is not None:
            return fed
        if not self.waiters and (fresh := v.fresh(now)) is not None:
            return fresh
        fut: asyncio.Future[list[BoardEntry]] = self.loop.create_future()
        self.waiters.append(fut)
        if self.task is None or self.task.done():
            self.task = self.loop.create_task(self._fetch())
        return await fut

    async def _fetch(self) -> None:
        v = self.view
        while self.waiters:
            waiters, self.waiters = self.waiters, []
            try:
                held = v.view
                started, v.wrote = v.clock(), False
                delta = await within(self.remote.recent_delta(*v.bounds()), self.deadline_s, "a read")
                self.fetches += 1
                self.rows += len(delta.rows)
                view = v.merge(held, delta)
                v.view_at = started
                v.fetched(delta)
            except BaseException as exc:
                v.wrote = True  # unknown: fetch again next time
                for w in waiters:
                    if not w.done():
                        w.set_exception(exc)
                if isinstance(exc, asyncio.CancelledError):
                    raise
                continue
            for w in waiters:
                if not w.done():
                    w.set_result(view)


class BoardClient:
    """The board for async code, over a board remote (see module docstring). Methods raise
    `BoardError` with the board's own message when a request is refused (`awrite_batch` returns the
    errors in place instead, so one bad entry does not hide the others).

    The recent-view copy and the write queue belong to one process and one event loop."""

    def __init__(self, remote: Any, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time, deadline_s: float = CALL_DEADLINE_S) -> None:
        self.remote = remote
        self.deadline_s = deadline_s
        self.view = RecentView(clock, wall)
        self._writer: _WriteCoalescer | None = None
        self._reader: _RecentReader | None = None

    def _coalescer(self) -> _WriteCoalescer:
        loop = asyncio.get_running_loop()
        if self._writer is None or self._writer.loop is not loop:
            self._writer = _WriteCoalescer(self.remote, loop, self.deadline_s)
        return self._writer

    async def awrite(self, entry: BoardEntryIn | dict[str, Any]) -> BoardEntry:
        """Write one entry; concurrent writes from this process share calls (see `_WriteCoalescer`)."""
        (res,) = await self.awrite_batch([entry])
        return raise_if_error(res)

    async def awrite_batch(self, entries: list[BoardEntryIn | dict[str, Any]]) -> list[BoardEntry | BoardError]:
        wire = [wire_request(e) for e in entries]
        res = await self._coalescer().write(wire)
        out = entries_from_acks(wire, res)
        self.view.wrote_entries(out)
        return out

    async def arecent(self, limit: int | None = None) -> list[BoardEntry]:
        """The recent view as of this call or later; this process keeps a copy, fetches only what changed
        (`recent_delta`), and concurrent readers share one fetch (`_RecentReader`)."""
        loop = asyncio.get_running_loop()
        if self._reader is None or self._reader.loop is not loop:
            self._reader = _RecentReader(self.remote, self.view, loop, self.deadline_s)
        return cut(await self._reader.read(), limit)

    def observe(self, rows: list[Row], cursor: int | None) -> None:
        """Board entries delivered to this process and the board cursor they bring it to (see
        `RecentView.observe`): they keep the recent-view copy current without a call."""
        self.view.observe(rows, cursor)

    def fetch_counts(self) -> tuple[int, int]:
        """Recent-view fetches this process made on its current loop, and the entries they brought."""
        r = self._reader
        return (r.fetches, r.rows) if r is not None else (0, 0)

    async def _call(self, what: str, call: Any, extra_s: float = 0.0) -> Any:
        return await within(call, self.deadline_s + extra_s, what)

    async def asince(self, cursor: int, limit: int = 1000) -> list[BoardEntry]:
        return as_entries(raise_if_error(await self._call("a read", self.remote.since_rows(cursor, limit))))

    async def await_since(self, cursor: int, timeout_s: float = 30.0, limit: int = 1000) -> list[BoardEntry]:
        rows = await self._call("a long poll", self.remote.wait_since_rows(cursor, timeout_s, limit), timeout_s)
        return as_entries(raise_if_error(rows))

    async def agrep(
        self, pattern: str, regex: bool = True, limit: int = 50, type: str | None = None
    ) -> list[BoardEntry]:
        return raise_if_error(await self._call("a search", self.remote.grep(pattern, regex, limit, type)))

    async def aclaims(self, key: str | None = None) -> list[Any]:
        """The open claims on `key`, oldest first, or every open claim (`BoardService.claims`): `Lease`s."""
        return raise_if_error(await self._call("a claims lookup", self.remote.claims(key)))

    async def atouch(self, worker: str) -> None:
        """Renew `worker`'s open claims (it acted on the forge); see `BoardService.touch`."""
        await self._call("a claim renewal", self.remote.touch(worker))

    async def aunfold(self, seq: int) -> BoardEntry:
        return raise_if_error(await self._call("an unfold", self.remote.unfold(seq)))

    async def alast_seq(self) -> int:
        return await self._call("last_seq", self.remote.last_seq())

    async def acursor_at(self, ts: int) -> int:
        return await self._call("cursor_at", self.remote.cursor_at(ts))

    async def ainfo(self) -> dict[str, Any]:
        return await self._call("info", self.remote.info())
