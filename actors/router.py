"""RouterActor: a `RouterPump` (agensh_ray.routing.pump, where the routing logic and its settings
are explained) inside a Ray actor, reading the board, chat and forge actors through
`ServiceSources` and feeding WorkerActors.

Everything is named, not handed over: the constructor arguments stay small and inline, so Ray can
always restart this actor (`max_restarts=-1`), and the restarted pump resumes from its hosts'
cursors by itself. A host actor that is restarting (`ActorUnavailableError`) is a failed delivery, sent
again; one dead for good (`ActorDiedError`) is `HostGone` to the pump.
"""

from __future__ import annotations

import gc
import os
from typing import Any

import ray
from ray.exceptions import ActorUnavailableError, RayActorError

from agensh_ray.actors.board import BoardHandle
from agensh_ray.actors.proxy import AsyncProxy
from agensh_ray.actors.supervise import LIVENESS, heartbeat, whereabouts
from agensh_ray.liveness import LoopProbe
from agensh_ray.errors import HostAway, HostGone
from agensh_ray.routing import RouterPump, ServiceSources


class _HostLink:
    """A WorkerActor as the pump's `HostLink`: an actor dead for good is gone; one being restarted is
    a failed call the pump makes again (its new process starts with empty cursors and takes what comes)."""

    def __init__(self, actor: Any):
        self.actor = actor

    async def deliver(self, events: list, cursors: dict[str, int]) -> int:
        try:
            return await self.actor.deliver.remote(events, cursors)
        except ActorUnavailableError as exc:
            raise HostAway(str(exc).splitlines()[0]) from exc
        except RayActorError as exc:
            raise HostGone(str(exc)) from exc

    async def cursors(self) -> dict[str, int]:
        try:
            return await self.actor.cursors.remote()
        except ActorUnavailableError as exc:
            raise HostAway(str(exc).splitlines()[0]) from exc
        except RayActorError as exc:
            raise HostGone(str(exc)) from exc


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1, concurrency_groups=LIVENESS)
class RouterActor:
    def __init__(self, router_id: str, hosts: dict, board: str, chat: str, forge: str, policy: str,
                 poll_timeout_s: float, max_backlog: int = 20_000, linger_s: float = 0.15,
                 ship_interval_s: float = 0.0, cursor_sync_s: float = 1.0):
        """hosts: host_id -> (WorkerActor name, [worker ids]); services by actor name. The pump starts
        by itself (also after a restart)."""
        sources = ServiceSources(BoardHandle(ray.get_actor(board), name=board), AsyncProxy(ray.get_actor(chat)),
                                 AsyncProxy(ray.get_actor(forge)), poll_timeout_s)
        links = {h: (_HostLink(ray.get_actor(name)), list(ws)) for h, (name, ws) in hosts.items()}
        self.pump = RouterPump(router_id, sources, links, policy, max_backlog=max_backlog, linger_s=linger_s,
                               ship_interval_s=ship_interval_s, cursor_sync_s=cursor_sync_s)
        self.pump.start()
        self._probe = LoopProbe()  # how long its event loop has not run, for the heartbeat
        gc.freeze()  # what is alive now lives as long as the actor: full collections skip it (see actors/board.py)

    async def ensure_started(self) -> int:
        """Wait until the loops run (they start by themselves); returns the pid."""
        await self.pump.ensure_started()
        return os.getpid()

    async def where(self) -> dict:
        """Its pid and Ray node (the driver's Watch); starts the loops if they are not running."""
        await self.pump.ensure_started()
        return whereabouts()

    @ray.method(concurrency_group="liveness")
    def heartbeat(self) -> dict:
        """Its pid, Ray node and event-loop stall, from a concurrency group of its own (the driver's Watch)."""
        return heartbeat(getattr(self, "_probe", None))

    def status(self) -> dict:
        return {**self.pump.status(), "pid": os.getpid()}

    async def stop(self) -> None:
        await self.pump.stop()
