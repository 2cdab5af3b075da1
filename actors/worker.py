"""WorkerActor: hosts workers (see agensh_ray.worker.WorkerHost); only delegation here.

Restarted by Ray when its process dies (`max_restarts`, calls in flight not re-sent): the new
process comes up with nothing started, says so in `status` (`started` 0), and the driver starts it
again and launches its workers anew; each finds its clone in place and resumes with a hand-off
summary (WorkerHost.launch). Their agent processes died with the old process (the sandbox dies with
its parent; an unsandboxed agent sees its stdin close).

It gets the board, chat and forge by name, as the routers do, never as handles among its constructor's
arguments: Ray keeps a handle argument in its object store, where a restart may not find it any more (Ray
says so on the driver's terminal: "the actor restart will fail")."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import ray

from agensh_ray import mirror
from agensh_ray.actors.board import BoardHandle
from agensh_ray.actors.gateway import node_gateway
from agensh_ray.actors.proxy import AsyncProxy
from agensh_ray.actors.supervise import LIVENESS, heartbeat, whereabouts
from agensh_ray.liveness import LoopProbe
from agensh_ray.config import RunConfig
from agensh_ray.models import Delivery
from agensh_ray.worker import WorkerHost


class _Services:
    def __init__(self, board, chat, forge, gateway=None):
        self.board = board
        self.chat = AsyncProxy(chat)
        self.forge = AsyncProxy(forge)
        if gateway is not None:
            self.gateway = AsyncProxy(gateway)


MAX_RESTARTS = 10
"""Restarts of one WorkerActor before Ray gives up on it (a host that keeps dying is lost)."""


@ray.remote(num_cpus=0, max_restarts=MAX_RESTARTS, max_task_retries=0, concurrency_groups=LIVENESS)
class WorkerActor:
    def __init__(self, host_id, worker_ids, cfg_json, run_dir, run_id, board: str, chat: str, forge: str, clone_urls,
                 start_wall, task_root):
        """`board`, `chat`, `forge`: the actors' names (in this job's namespace)."""
        cfg = RunConfig.model_validate_json(cfg_json)
        board, chat, forge = BoardHandle(ray.get_actor(board), name=board), ray.get_actor(chat), ray.get_actor(forge)
        mirror.attach(run_dir, f"logs/{host_id}.*", *(f"logs/{w}.*" for w in worker_ids))  # agents' logs, shipped
        gateway = node_gateway(run_id) if cfg.gateway.enabled else None  # this node's model gateway
        self.host = WorkerHost(
            host_id, worker_ids, cfg, Path(run_dir), run_id, _Services(board, chat, forge, gateway), clone_urls,
            start_wall, Path(task_root),
        )
        self.host.node = ray.get_runtime_context().get_node_id()
        self._probe = LoopProbe()  # how long its event loop has not run, for the heartbeat
        gc.freeze()  # what is alive now lives as long as the actor: full collections skip it (see actors/board.py)

    async def start(self) -> int:
        await self.host.start()
        return os.getpid()

    def set_start(self, start_wall: float) -> None:
        """When the run's schedule starts (after every host and router is up)."""
        self.host.start_wall = start_wall

    async def launch(self, worker_id: str, again: bool = False) -> None:
        """Start a worker; `again`: it ran before, in a host process that died (WorkerHost.launch)."""
        await self.host.launch(worker_id, again)

    def deliver(self, deliveries: list[Delivery], cursors: dict[str, int]) -> int:
        return self.host.deliver(deliveries, cursors)

    def cursors(self) -> dict[str, int]:
        return self.host.cursors()

    def seed_cursors(self, cursors: dict[str, int]) -> None:
        """Start delivery at these source positions (a resumed run: what came before is in the hand-offs)."""
        self.host.inbox.accept([], cursors)

    def status(self) -> dict[str, int]:
        """The host's counters, plus `pid` and `started` (0 in a process Ray has just restarted)."""
        return {**self.host.status(), "pid": os.getpid(), "started": int(self.host.started)}

    def pid(self) -> int:
        return os.getpid()

    def where(self) -> dict:
        """Its pid and Ray node (the driver's Watch)."""
        return whereabouts()

    @ray.method(concurrency_group="liveness")
    def heartbeat(self) -> dict:
        """Its pid, Ray node and event-loop stall, from a concurrency group of its own (the driver's Watch)."""
        return heartbeat(getattr(self, "_probe", None))

    def agent_pids(self) -> dict:
        return self.host.agent_pids()

    def mcp_url(self, worker_id: str) -> str:
        w = self.host.workers[worker_id]
        return self.host.tools.url(w.id, w.token)

    async def stop(self) -> None:
        await self.host.stop()
