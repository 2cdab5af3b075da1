"""The model gateway as Ray actors: a `GatewayActor` on every node (a `Gateway` with its HTTP front
on the node's loopback, where that node's agents reach it) and one `CoordinatorActor` on the head
(the `LimitCoordinator`: shares of the cluster-wide limits, the run's spending). Only delegation
and the sync loop here; the logic is in services/gateway/.

Why actors with their own HTTP front and not a Ray Serve deployment: every model call would then
pass through Serve's proxy and a Ray call to a replica, and every streamed chunk through Ray's
streaming generator; here a call costs the gateway's own work only, and the coordinator is off
the call's path (bench/gateway.py measures what the gateway adds to a call; Serve was not
measured).

The driver makes them (`Gateways.start`) before the worker hosts; a host finds its node's gateway
by name (`node_gateway`). The run's secret for the virtual keys goes from the driver to the
gateways; the providers' credentials are read by each gateway from its own node's environment or
secrets file and never travel.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import secrets as pysecrets
from pathlib import Path
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from agensh_ray.config import RunConfig
from agensh_ray.models import GatewayEndpoint, TurnReport
from agensh_ray.services.gateway import GatewayReport, GatewayServer, GatewayShares, LimitCoordinator, make_gateway

log = logging.getLogger(__name__)


@ray.remote(num_cpus=0, max_restarts=0)
class CoordinatorActor(LimitCoordinator):
    """The `LimitCoordinator` in its own process."""

    def __init__(self, cfg_json: str):
        super().__init__(RunConfig.model_validate_json(cfg_json).gateway)


@ray.remote(num_cpus=0, max_restarts=0, max_concurrency=64)
class GatewayActor:
    def __init__(self, cfg_json: str, run_dir: str, run_id: str, secret: bytes, name: str, coordinator: Any):
        cfg = RunConfig.model_validate_json(cfg_json)
        self.gateway = make_gateway(cfg, Path(run_dir), run_id, secret, name)
        self.server = GatewayServer(self.gateway)
        self.coordinator = coordinator
        self.interval = cfg.gateway.sync_interval_s
        self._sync: asyncio.Task | None = None
        gc.freeze()  # what lives now lives as long as the actor (see actors/board.py)

    async def start(self) -> str:
        if self._sync is None:
            await self.server.start()
            self._sync = asyncio.create_task(self._sync_loop(), name="gateway-sync")
        return self.server.url

    async def _sync_loop(self) -> None:
        while True:
            try:
                shares: GatewayShares = await self.coordinator.sync.remote(self.gateway.report())
                self.gateway.apply(shares)
            except Exception as exc:  # the coordinator is away: keep the last shares, try again
                log.warning("gateway %s: sync with the coordinator failed: %s", self.gateway.name, exc)
            await asyncio.sleep(self.interval)

    def endpoint(self, workers: list[str]) -> dict[str, GatewayEndpoint]:
        return self.gateway.endpoint(workers)

    def turn_report(self, worker: str, since_us: int, final: bool = False) -> TurnReport:
        return self.gateway.turn_report(worker, since_us, final)

    def status(self) -> dict:
        return self.gateway.status()

    def pid(self) -> int:
        return os.getpid()

    async def stop(self) -> None:
        if self._sync is not None:
            self._sync.cancel()
            try:  # the last spending reaches the coordinator
                self.gateway.apply(await self.coordinator.sync.remote(self.gateway.report()))
            except Exception:
                pass
        await self.server.close()
        if self.gateway.trace is not None:
            self.gateway.trace.close()


def gateway_name(run_id: str, node_id: str) -> str:
    return f"gateway-{run_id}-{node_id[:16]}"


def node_gateway(run_id: str) -> Any:
    """This node's gateway of the run (called from a worker host's process)."""
    return ray.get_actor(gateway_name(run_id, ray.get_runtime_context().get_node_id()))


class Gateways:
    """The run's gateways, one per alive node, and their coordinator (made by the driver)."""

    def __init__(self, cfg: RunConfig, run_dir: Path, run_id: str, placement: dict):
        cfg_json = cfg.model_dump_json()
        secret = pysecrets.token_bytes(32)
        self.coordinator = CoordinatorActor.options(name=f"gateway-coordinator-{run_id}",
                                                    **placement).remote(cfg_json)
        self.actors: dict[str, Any] = {}
        for node in ray.nodes():
            if not node.get("Alive"):
                continue
            nid = node["NodeID"]
            self.actors[nid] = GatewayActor.options(
                name=gateway_name(run_id, nid),
                scheduling_strategy=NodeAffinitySchedulingStrategy(nid, soft=False),
            ).remote(cfg_json, str(run_dir), run_id, secret, nid[:16], self.coordinator)
        self.urls = dict(zip(self.actors, ray.get([a.start.remote() for a in self.actors.values()])))

    def signal(self) -> str | None:
        """Set once the run is at its budget cap (the driver winds the run down)."""
        return ray.get(self.coordinator.signal.remote())

    def status(self) -> dict:
        out: dict = {}
        for s in ray.get([a.status.remote() for a in self.actors.values()]):
            for k, v in s.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    out[k] = out.get(k, 0) + v
        return out

    def stop(self) -> None:
        try:
            ray.get([a.stop.remote() for a in self.actors.values()], timeout=30)
        except Exception:
            log.exception("stopping the gateways failed")
        for a in [*self.actors.values(), self.coordinator]:
            ray.kill(a, no_restart=True)
