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
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from pathlib import Path
from typing import Any

import ray

from agensh_ray.board import Board, BoardError, BoardLimits
from agensh_ray.models import BoardEntry, BoardEntryIn
from agensh_ray.trace import BoardRow, TraceWriter

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
        start = time.time() if start_time is None else float(start_time)
        scale = float(time_scale)
        if scale == 1.0:
            clock = time.time
        else:

            def clock() -> float:
                return start + (time.time() - start) * scale

        self._board = Board(Path(log_path), limits or BoardLimits(), clock)
        self._queue: list[tuple[list[Any], asyncio.Future[list[BoardEntry | BoardError]]]] = []
        self._flusher: asyncio.Task[None] | None = None
        self._changed: asyncio.Event | None = None
        self._commits = 0
        self._written = 0

    # ------------------------------------------------------------ writes (group commit)

    def _event(self) -> asyncio.Event:
        if self._changed is None:
            self._changed = asyncio.Event()
        return self._changed

    def _notify(self) -> None:
        ev = self._event()
        self._changed = asyncio.Event()
        ev.set()

    async def write_batch(self, entries: list[Any]) -> list[BoardEntry | BoardError]:
        fut: asyncio.Future[list[BoardEntry | BoardError]] = asyncio.get_running_loop().create_future()
        self._queue.append((list(entries), fut))
        if self._flusher is None:
            self._flusher = asyncio.ensure_future(self._flush_loop())
        return await asyncio.shield(fut)

    async def write(self, entry: Any) -> BoardEntry | BoardError:
        (res,) = await self.write_batch([entry])
        return res

    async def _flush_loop(self) -> None:
        board = self._board
        try:
            while self._queue:
                batch, self._queue = self._queue, []
                flat = [e for entries, _ in batch for e in entries]
                try:
                    pb = board.prepare_batch(flat)
                    if pb.data:
                        try:
                            await asyncio.to_thread(board.commit_io, pb)
                        except BaseException:
                            board.abort(pb)
                            raise
                        self._commits += 1
                        self._written += len(pb.new)
                    results = board.apply(pb)
                except Exception as exc:  # IO failure: every caller of this batch gets it
                    for _, fut in batch:
                        if not fut.done():
                            fut.set_exception(exc)
                    continue
                k = 0
                for entries, fut in batch:
                    if not fut.done():
                        fut.set_result(results[k : k + len(entries)])
                    k += len(entries)
                if pb.new:
                    self._notify()
                    if self._trace is not None:
                        for e in (p.entry for p in pb.new):
                            self._trace.write(
                                BoardRow(ts=e.ts, worker_id=e.worker_id, event_id=e.event_id, seq=e.seq,
                                         type=e.type.value, text=e.text, has_detail=e.has_detail)
                            )
        finally:
            self._flusher = None

    # ------------------------------------------------------------ reads

    async def recent(self, limit: int | None = None) -> list[BoardEntry]:
        return self._board.recent(limit)

    async def since(self, cursor: int, limit: int = 1000) -> list[BoardEntry]:
        return self._board.since(cursor, limit)

    async def wait_since(self, cursor: int, timeout_s: float = 30.0, limit: int = 1000) -> list[BoardEntry]:
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
        return self._board.since(cursor, limit)

    async def grep(
        self, pattern: str, regex: bool = True, limit: int = 50, type: str | None = None
    ) -> list[BoardEntry] | BoardError:
        try:
            return self._board.grep(pattern, regex=regex, limit=limit, type=type)
        except BoardError as exc:
            return exc

    async def unfold(self, seq: int) -> BoardEntry | BoardError:
        try:
            return self._board.unfold(seq)
        except BoardError as exc:
            return exc

    async def last_seq(self) -> int:
        return self._board.last_seq

    async def pid(self) -> int:
        return os.getpid()

    async def close(self) -> None:
        """Flush the trace (end of run)."""
        if self._trace is not None:
            self._trace.close()

    async def info(self) -> dict[str, Any]:
        """Where the log is, how big the board is, and group-commit counters since this process started."""
        return {
            "log_path": str(self._board.log_path),
            "entries": len(self._board),
            "last_seq": self._board.last_seq,
            "pid": os.getpid(),
            "commits": self._commits,
            "entries_committed": self._written,
        }


def _raise_if_error(value: Any) -> Any:
    if isinstance(value, BoardError):
        raise BoardError(str(value)) from None
    return value


def _with_request_id(entry: Any) -> Any:
    """Give a write an idempotency key so a retried call cannot write it twice."""
    if isinstance(entry, BoardEntryIn):
        if entry.request_id is None:
            return entry.model_copy(update={"request_id": uuid.uuid4().hex})
    elif isinstance(entry, dict) and entry.get("request_id") is None:
        return {**entry, "request_id": uuid.uuid4().hex}
    return entry


class BoardHandle:
    """Facade over the board actor: sync methods for plain code, `a*` coroutines for async actors.

    Picklable: pass it to other actors and tasks. Methods raise `BoardError` with
    the board's own message when a request is refused (`write_batch` returns the
    errors in place instead, so one bad entry does not hide the others).
    """

    def __init__(self, actor: Any, name: str | None = None, namespace: str | None = None) -> None:
        self.actor = actor
        self.name = name
        self.namespace = namespace

    def __repr__(self) -> str:
        return f"BoardHandle(name={self.name!r}, namespace={self.namespace!r})"

    # sync
    def write(self, entry: BoardEntryIn | dict[str, Any]) -> BoardEntry:
        return _raise_if_error(ray.get(self.actor.write.remote(_with_request_id(entry))))

    def write_batch(self, entries: list[BoardEntryIn | dict[str, Any]]) -> list[BoardEntry | BoardError]:
        return ray.get(self.actor.write_batch.remote([_with_request_id(e) for e in entries]))

    def recent(self, limit: int | None = None) -> list[BoardEntry]:
        return ray.get(self.actor.recent.remote(limit))

    def since(self, cursor: int, limit: int = 1000) -> list[BoardEntry]:
        return ray.get(self.actor.since.remote(cursor, limit))

    def wait_since(self, cursor: int, timeout_s: float = 30.0, limit: int = 1000) -> list[BoardEntry]:
        return ray.get(self.actor.wait_since.remote(cursor, timeout_s, limit))

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
    async def awrite(self, entry: BoardEntryIn | dict[str, Any]) -> BoardEntry:
        return _raise_if_error(await self.actor.write.remote(_with_request_id(entry)))

    async def awrite_batch(self, entries: list[BoardEntryIn | dict[str, Any]]) -> list[BoardEntry | BoardError]:
        return await self.actor.write_batch.remote([_with_request_id(e) for e in entries])

    async def arecent(self, limit: int | None = None) -> list[BoardEntry]:
        return await self.actor.recent.remote(limit)

    async def asince(self, cursor: int, limit: int = 1000) -> list[BoardEntry]:
        return await self.actor.since.remote(cursor, limit)

    async def await_since(self, cursor: int, timeout_s: float = 30.0, limit: int = 1000) -> list[BoardEntry]:
        return await self.actor.wait_since.remote(cursor, timeout_s, limit)

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
