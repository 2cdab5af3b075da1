"""RouterActor: reads the durable sources by cursor and pushes deliveries to
its hosts, one batched call per host (see agensh_ray.routing.Fanout).

On (re)start it asks its hosts for their cursors and resumes from the lowest:
a replayed batch is dropped by the hosts, so nothing is lost and nothing
reaches an agent twice.
"""

from __future__ import annotations

import asyncio
import logging
import os

import ray

from agensh_ray.routing import Fanout

log = logging.getLogger(__name__)


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1)
class RouterActor:
    def __init__(self, router_id: str, hosts: dict, board: str, chat: str, forge: str, policy: str,
                 poll_timeout_s: float):
        """hosts: host_id -> (WorkerActor name, [worker ids]); services by actor name.

        Names, not handles: the constructor arguments stay small and inline, so Ray can
        always restart this actor."""
        from actors.board import BoardHandle

        self.router_id = router_id
        self.handles = {h: ray.get_actor(name) for h, (name, _) in hosts.items()}
        self.fanout = Fanout({h: list(ws) for h, (_, ws) in hosts.items()}, policy=policy)
        self.board = BoardHandle(ray.get_actor(board), name=board)
        self.chat, self.forge = ray.get_actor(chat), ray.get_actor(forge)
        self.poll_timeout_s = poll_timeout_s
        self.cursors: dict[str, int] = {}
        self.delivered = 0
        self._tasks: list[asyncio.Task] = []
        self._stopping = False

    async def ensure_started(self) -> int:
        """Start the source loops (idempotent); called by the driver, again after a restart."""
        if not self._tasks:
            got = await asyncio.gather(*(h.cursors.remote() for h in self.handles.values()))
            for src in ("board", "chat", "forge"):
                self.cursors[src] = min((c.get(src, 0) for c in got), default=0)
            if self.fanout.policy == "relevant" and self.cursors["board"]:
                # Rebuild the claims view without re-delivering.
                for e in await self.board.asince(0, self.cursors["board"]):
                    self.fanout._track_claims(e)
            self._tasks = [
                asyncio.create_task(self._loop("board"), name="board"),
                asyncio.create_task(self._loop("chat"), name="chat"),
                asyncio.create_task(self._loop("forge"), name="forge"),
            ]
        return os.getpid()

    async def _read(self, src: str, cursor: int):
        if src == "board":
            return await self.board.await_since(cursor, self.poll_timeout_s)
        if src == "chat":
            return await self.chat.wait_since.remote(cursor, self.poll_timeout_s)
        events = await self.forge.events_since.remote(cursor)
        if not events:
            await asyncio.sleep(min(0.5, self.poll_timeout_s))
        return events

    async def _loop(self, src: str) -> None:
        split = {"board": self.fanout.board, "chat": self.fanout.chat, "forge": self.fanout.forge}[src]
        while not self._stopping:
            try:
                batch = await self._read(src, self.cursors[src])
                if not batch:
                    continue
                per_host = split(batch)
                new_cursor = batch[-1].seq
                await asyncio.gather(
                    *(h.deliver.remote(per_host.get(hid, []), {src: new_cursor}) for hid, h in self.handles.items())
                )
                self.cursors[src] = new_cursor
                self.delivered += sum(len(v) for v in per_host.values())
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("router %s: %s loop failed; retrying", self.router_id, src)
                await asyncio.sleep(0.5)

    def status(self) -> dict:
        return {"cursors": dict(self.cursors), "delivered": self.delivered, "pid": os.getpid()}

    async def stop(self) -> None:
        self._stopping = True
        for t in self._tasks:
            t.cancel()
