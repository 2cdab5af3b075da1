"""The board as a Ray actor, and `BoardHandle`, the facade everyone else uses.

Only the Ray edge lives here: `BoardActor` is `agensh_ray.board.BoardService` under `ray.remote`
(group commit, long poll, grep in a thread: see there), and `BoardHandle` is `agensh_ray.board.BoardClient`
over the actor handle (write coalescing, the recent-view copy, request ids: see there) plus the
blocking methods plain code uses, and pickling.

The actor is detached, named, `max_restarts=-1` and `max_task_retries=-1`: if its process dies, Ray
restarts it (the constructor reloads the log) and re-sends the calls that were in flight. The
facade gives every write a `request_id` if it has none, so a re-sent write returns the entry that was
already written instead of writing it twice. `grep` alone is never re-sent (`@ray.method
(max_task_retries=0)`): its caller is told the search was lost, and may ask again.
"""

from __future__ import annotations

import gc
import os
import time
from typing import Any

import ray
from ray.exceptions import RayActorError

from agensh_ray import mirror
from agensh_ray.actors.proxy import AsyncProxy
from agensh_ray.actors.supervise import LIVENESS, heartbeat, whereabouts
from agensh_ray.liveness import LoopProbe
from agensh_ray.board import BoardClient, BoardLimits, BoardService
from agensh_ray.board.client import as_entries, raise_if_error, wire_request
from agensh_ray.board.view import cut
from agensh_ray.errors import BoardError
from agensh_ray.models import BoardEntry, BoardEntryIn
from agensh_ray.wire import entries_from_acks

DEFAULT_MAX_CONCURRENCY = 4096
"""Concurrent calls the actor accepts (long polls from up to 1,024 workers plus their writes)."""


@ray.remote(concurrency_groups=LIVENESS)
class BoardActor(BoardService):
    """A `BoardService` in its own process. Create it with `get_or_create_board`."""

    def __init__(self, log_path: str, *args: Any, **kwargs: Any) -> None:
        # A run on an object store: the log's folder fetched if this node lacks it, then shipped.
        mirror.attach(os.path.dirname(log_path), restore_missing=True)
        super().__init__(log_path, *args, **kwargs)
        self._probe = LoopProbe()  # how long its event loop has not run, for the heartbeat
        # Everything alive now (Ray, pydantic, pyarrow, the reloaded board) lives as long as the
        # process: out of the collector's sight, a full collection walks only what came later
        # (measured: full-collection pauses of ~30 ms under write load without this).
        gc.freeze()

    @ray.method(max_task_retries=0)
    async def grep(
        self, pattern: str, regex: bool = True, limit: int = 50, type: str | None = None
    ) -> list[BoardEntry] | BoardError:
        """Never re-sent (unlike every other call): a board restarted mid-search must not run the search
        again, in case the search is what brought it down; the caller gets `SEARCH_LOST` instead."""
        return await BoardService.grep(self, pattern, regex, limit, type)

    def where(self) -> dict:
        """Its pid and Ray node (the driver's Watch)."""
        return whereabouts()

    @ray.method(concurrency_group="liveness")
    def heartbeat(self) -> dict:
        """Its pid, Ray node and event-loop stall, from a concurrency group of its own (the driver's Watch)."""
        return heartbeat(getattr(self, "_probe", None))


SEARCH_LOST = ("the board restarted while it ran this search, and a search is not run again on its own: "
               "call board_grep again if you still need it")
"""The refusal a grep gets when the board died under it (the call is not retried, see `BoardActor.grep`)."""


class BoardHandle(BoardClient):
    """Facade over the board actor: the `a*` coroutines of `BoardClient` for async actors, and
    blocking methods for plain code.

    Picklable: pass it to other actors and tasks (the recent-view copy and the write queue belong to
    one process and are not sent). Methods raise `BoardError` with the board's own message when a
    request is refused (`write_batch` returns the errors in place instead, so one bad entry does not
    hide the others).
    """

    def __init__(self, actor: Any, name: str | None = None, namespace: str | None = None) -> None:
        super().__init__(AsyncProxy(actor))
        self.actor = actor
        self.name = name
        self.namespace = namespace

    def __repr__(self) -> str:
        return f"BoardHandle(name={self.name!r}, namespace={self.namespace!r})"

    def __getstate__(self) -> dict[str, Any]:
        return {"actor": self.actor, "name": self.name, "namespace": self.namespace}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["actor"], state["name"], state["namespace"])

    # blocking
    def write(self, entry: BoardEntryIn | dict[str, Any]) -> BoardEntry:
        (res,) = self.write_batch([entry])
        return raise_if_error(res)

    def write_batch(self, entries: list[BoardEntryIn | dict[str, Any]]) -> list[BoardEntry | BoardError]:
        wire = [wire_request(e) for e in entries]
        return entries_from_acks(wire, ray.get(self.actor.write_acks.remote(wire)))

    def recent(self, limit: int | None = None) -> list[BoardEntry]:
        """The recent view; this process keeps a copy and fetches only what changed (`recent_delta`)."""
        view = self.view
        held = view.view
        return cut(view.merge(held, ray.get(self.actor.recent_delta.remote(*view.bounds()))), limit)

    def since(self, cursor: int, limit: int = 1000) -> list[BoardEntry]:
        return as_entries(ray.get(self.actor.since_rows.remote(cursor, limit)))

    def wait_since(self, cursor: int, timeout_s: float = 30.0, limit: int = 1000) -> list[BoardEntry]:
        return as_entries(ray.get(self.actor.wait_since_rows.remote(cursor, timeout_s, limit)))

    def grep(self, pattern: str, regex: bool = True, limit: int = 50, type: str | None = None) -> list[BoardEntry]:
        try:
            return raise_if_error(ray.get(self.actor.grep.remote(pattern, regex, limit, type)))
        except RayActorError:
            raise BoardError(SEARCH_LOST) from None

    async def agrep(
        self, pattern: str, regex: bool = True, limit: int = 50, type: str | None = None
    ) -> list[BoardEntry]:
        try:
            return await super().agrep(pattern, regex, limit, type)
        except RayActorError:
            raise BoardError(SEARCH_LOST) from None

    def unfold(self, seq: int) -> BoardEntry:
        return raise_if_error(ray.get(self.actor.unfold.remote(seq)))

    def last_seq(self) -> int:
        return ray.get(self.actor.last_seq.remote())

    def pid(self) -> int:
        return ray.get(self.actor.pid.remote())

    def info(self) -> dict[str, Any]:
        return ray.get(self.actor.info.remote())

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
    scheduling_strategy: Any = None,
    resources: dict[str, float] | None = None,
) -> BoardHandle:
    """The named, detached board actor (created if absent) behind a `BoardHandle`.

    An existing actor of that name is returned as is (its log path and limits win).
    `time_scale` compresses the CLAIM TTL (a TTL of 1 schedule hour lasts 1/time_scale wall hours),
    so CLAIM expiry can be tested quickly; `start_time` is kept for callers. `scheduling_strategy`:
    where Ray places it (the driver pins it to its own node); None: Ray's default. `resources`: what else it
    asks for (the driver's `--services-resource`: a node type it may run, and be restarted, on).
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
        scheduling_strategy=scheduling_strategy,
        resources=resources,
    ).remote(
        os.path.abspath(os.fspath(log_path)),
        limits,
        time_scale,
        time.time() if start_time is None else start_time,
        run_dir,
        run_id,
    )
    return BoardHandle(actor, name=name, namespace=namespace)
