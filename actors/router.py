"""RouterActor: reads the durable sources by cursor and pushes events to its
hosts (see agensh_ray.routing.Fanout), one batched call per host.

Three source loops (board and chat by long poll, forge by polling) feed one
outbox per host; a sender per host keeps one `deliver(events, cursors)` call
in flight and sends everything that piled up meanwhile in the next one, so a
burst costs a few calls per host, not one per event, and a slow or dead host
never holds up the others. A Ray call costs about a millisecond of CPU on each
side, far more than routing an event, so the loops trade a little latency for
fewer calls: a source is read at most every `linger_s` (150 ms; a RoutingConfig setting, like
`ship_interval_s`, an optional extra spacing of the calls to one host), and a host that got no events
learns the new cursors only every `cursor_sync_s`. The read loops pause while any outbox holds more
than `max_backlog` events.

No loss, no duplicate: each host keeps a cursor per source and drops events at
or below it. The actor restarts itself (`max_restarts=-1`); its constructor
schedules `_resume`, which asks the hosts for their cursors and reads again
from the lowest: what a host already has is dropped by that host.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import time
from typing import Any

import ray
from ray.exceptions import RayActorError

from agensh_ray.routing import SOURCES, Event, Fanout

log = logging.getLogger(__name__)

RESUME_PAGE = 10_000
"""Board entries per call when rebuilding the claims view after a restart."""


class _Outbox:
    """What waits for one host: events in source order and the cursors they bring the host to."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.cursors: dict[str, int] = {}
        self.sent: dict[str, int] = {}
        self.ready = asyncio.Event()
        self.drained = asyncio.Event()
        self.drained.set()
        self.dead = False
        self.calls = 0


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1)
class RouterActor:
    def __init__(self, router_id: str, hosts: dict, board: str, chat: str, forge: str, policy: str,
                 poll_timeout_s: float, max_backlog: int = 20_000, linger_s: float = 0.15,
                 ship_interval_s: float = 0.0, cursor_sync_s: float = 1.0):
        """hosts: host_id -> (WorkerActor name, [worker ids]); services by actor name.

        Names, not handles: the constructor arguments stay small and inline, so Ray can
        always restart this actor. The source loops start by themselves (also after a restart)."""
        from agensh_ray.actors.board import BoardHandle

        self.router_id = router_id
        self.handles = {h: ray.get_actor(name) for h, (name, _) in hosts.items()}
        self.fanout = Fanout({h: list(ws) for h, (_, ws) in hosts.items()}, policy=policy)
        self.board = BoardHandle(ray.get_actor(board), name=board)
        self.chat, self.forge = ray.get_actor(chat), ray.get_actor(forge)
        self.poll_timeout_s = poll_timeout_s
        self.max_backlog = max_backlog
        self.linger_s = linger_s
        """Pause after each read that returned something, so the next read carries what arrived
        meanwhile: at most 1/linger_s reads per source and second."""
        self.ship_interval_s = ship_interval_s
        """At most one deliver call per host per interval (events wait at most this long)."""
        self.cursor_sync_s = cursor_sync_s
        """A host that got no events still learns the read position this often (only a restarted
        router needs it, to resume close to where it stopped)."""
        self.cursors: dict[str, int] = {}
        self.shipped = 0
        self.outboxes = {h: _Outbox() for h in self.handles}
        self._tasks: list[asyncio.Task] = []
        self._stopping = False
        self._resumed = asyncio.get_running_loop().create_task(self._resume(), name="resume")
        gc.freeze()  # what is alive now lives as long as the actor: full collections skip it (see actors/board.py)

    # -- start / resume --------------------------------------------------------------
    async def _resume(self) -> None:
        got: dict[str, dict[str, int]] = {}
        for h, handle in self.handles.items():
            try:
                got[h] = await handle.cursors.remote()
            except RayActorError:
                log.warning("router %s: host %s is gone; not routing to it", self.router_id, h)
                self.outboxes[h].dead = True
        for src in SOURCES:
            self.cursors[src] = min((c.get(src, 0) for c in got.values()), default=0)
        for h, c in got.items():
            self.outboxes[h].sent = dict(c)
        if self.fanout.policy == "relevant" and self.cursors["board"]:
            await self._rebuild_claims(self.cursors["board"])
        self._tasks = [asyncio.create_task(self._read_loop(s), name=s) for s in SOURCES]
        self._tasks += [asyncio.create_task(self._send_loop(h), name=f"send-{h}") for h in self.handles]

    async def _rebuild_claims(self, upto: int) -> None:
        """Replay the claim-relevant window of the board into the claims view (nothing is delivered)."""
        info = await self.board.actor.info.remote()
        self.fanout.claim_ttl_s = info.get("claim_ttl_s", self.fanout.claim_ttl_s)
        cursor = await self.board.actor.cursor_at.remote(info["last_ts"] - int(self.fanout.claim_ttl_s * 1e6))
        while cursor < upto:
            page = await self.board.asince(cursor, min(RESUME_PAGE, upto - cursor))
            if not page:
                break
            for e in page:
                self.fanout.track(e)
            cursor = page[-1].seq

    async def ensure_started(self) -> int:
        """Wait until the loops run (they start by themselves); returns the pid."""
        try:
            await asyncio.shield(self._resumed)
        except Exception:
            log.exception("router %s: resume failed; retrying", self.router_id)
            self._resumed = asyncio.get_running_loop().create_task(self._resume(), name="resume")
            await asyncio.shield(self._resumed)
        return os.getpid()

    # -- reading -----------------------------------------------------------------------
    async def _read(self, src: str, cursor: int) -> list[Any]:
        if src == "board":
            return await self.board.await_since(cursor, self.poll_timeout_s)
        if src == "chat":
            return await self.chat.wait_since.remote(cursor, self.poll_timeout_s)
        events = await self.forge.events_since.remote(cursor)
        if not events:
            await asyncio.sleep(min(0.5, self.poll_timeout_s))
        return events

    async def _read_loop(self, src: str) -> None:
        while not self._stopping:
            try:
                for ob in self.outboxes.values():
                    if not ob.dead:
                        await ob.drained.wait()
                batch = await self._read(src, self.cursors[src])
                if not batch:
                    continue
                per_host = self.fanout.split(src, batch)
                cursor = batch[-1].seq
                for h, ob in self.outboxes.items():
                    if ob.dead:
                        continue
                    evs = per_host.get(h)
                    ob.cursors[src] = cursor
                    if evs:
                        ob.events.extend(evs)
                        if len(ob.events) > self.max_backlog:
                            ob.drained.clear()
                        ob.ready.set()
                self.cursors[src] = cursor
                if self.linger_s > 0:
                    await asyncio.sleep(self.linger_s)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("router %s: %s loop failed; retrying", self.router_id, src)
                await asyncio.sleep(0.5)

    # -- sending -----------------------------------------------------------------------
    async def _send_loop(self, h: str) -> None:
        ob, handle = self.outboxes[h], self.handles[h]
        loop = asyncio.get_running_loop()
        last = 0.0
        while not self._stopping and not ob.dead:
            try:
                await asyncio.wait_for(ob.ready.wait(), self.cursor_sync_s)
            except asyncio.TimeoutError:  # no events for this host lately: just the cursors, if they moved
                if all(ob.sent.get(s, 0) >= c for s, c in ob.cursors.items()):
                    continue
            wait = last + self.ship_interval_s - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)  # let more pile up: one call carries them all
            ob.ready.clear()
            last = loop.time()
            events, ob.events = ob.events, []
            cursors = dict(ob.cursors)
            ob.drained.set()
            try:
                await handle.deliver.remote(events, cursors)
            except asyncio.CancelledError:
                raise
            except RayActorError:
                log.warning("router %s: host %s died; not routing to it any more", self.router_id, h)
                ob.dead, ob.events = True, []
                ob.drained.set()
                return
            except Exception:
                log.exception("router %s: deliver to %s failed; retrying", self.router_id, h)
                ob.events[:0] = events  # the host drops whatever of it arrived
                ob.ready.set()
                await asyncio.sleep(0.5)
                continue
            ob.sent = cursors
            ob.calls += 1
            self.shipped += len(events)

    # -- control -----------------------------------------------------------------------
    def status(self) -> dict:
        return {
            "cursors": dict(self.cursors),
            "shipped": self.shipped,
            "calls": sum(ob.calls for ob in self.outboxes.values()),
            "backlog": sum(len(ob.events) for ob in self.outboxes.values()),
            "dead_hosts": sorted(h for h, ob in self.outboxes.items() if ob.dead),
            "pid": os.getpid(),
            "time": time.time(),
        }

    async def stop(self) -> None:
        self._stopping = True
        for t in self._tasks:
            t.cancel()
