"""Where a run's actors go and when its workers start: the Ray options of one WorkerActor, the resources of
the services (board, chat, forge, routers), the cluster's capacity check, and the launch schedule. Plain
functions of the run's settings (the driver applies them)."""

from __future__ import annotations

from agensh_ray.config import RunConfig
from agensh_ray.errors import CapacityError


def host_options(cfg: RunConfig, n_workers: int, cluster_slots: float | None) -> dict:
    """Ray options of one WorkerActor hosting n_workers: an agent slot per worker where the
    cluster declares slots, and the memory its agents need. Where it goes is its bundle of the run's placement
    group (`slot_bundles`, spread over the nodes; driver/slots.py), which the driver adds."""
    opts: dict = {}
    if cluster_slots is not None:
        opts["resources"] = {"agent_slot": n_workers}
    if memory := worker_memory(cfg, n_workers):
        opts["memory"] = memory
    return opts


def worker_memory(cfg: RunConfig, n_workers: int) -> int:
    """Bytes Ray reserves for a WorkerActor's n_workers agents (0 for the sim unless --worker-memory-mb)."""
    per_worker = cfg.worker_memory_mb if cfg.worker_memory_mb is not None else (0 if cfg.harness == "sim" else 450)
    return per_worker * n_workers * 1024 * 1024


def slot_bundles(cfg: RunConfig, sizes: list[int]) -> list[dict[str, float]]:
    """The run's placement group: one bundle per WorkerActor (`sizes`: its workers), what `host_options` asks."""
    return [{"agent_slot": float(n), **({"memory": float(m)} if (m := worker_memory(cfg, n)) else {})}
            for n in sizes]


SERVICES_SHARE = 0.001
"""How much of the services' node-type resource each service actor asks for: a marker, not a limit."""


def services_resources(cfg: RunConfig) -> dict[str, float] | None:
    """The resources each service actor (board, chat, forge, routers, the gateways' coordinator) asks for:
    a sliver of the node type named by `services_resource`, so Ray may place it, and restart it after a node
    loss, on any node of that type. None: the driver pins them to its own node (the head)."""
    return {cfg.services_resource: SERVICES_SHARE} if cfg.services_resource else None


def check_services_resource(cfg: RunConfig, cluster_resources: dict[str, float]) -> None:
    """Refuse a services resource no node declares (the services would wait for a node forever)."""
    name = cfg.services_resource
    if name and cluster_resources.get(name, 0) < SERVICES_SHARE:
        known = sorted(k for k in cluster_resources if k not in ("CPU", "GPU", "memory", "object_store_memory")
                       and not k.startswith("node:"))
        raise CapacityError(
            f"no node of the cluster declares the resource {name!r} that --services-resource names; declare it "
            f"on the nodes the board, chat, forge and routers may run on (ray start --resources "
            f"'{{\"{name}\": 1}}'), or leave --services-resource out. Custom resources declared: "
            f"{', '.join(known) or 'none'}"
        )


def check_capacity(cfg: RunConfig, total_slots: float | None, free_slots: float | None, nodes: int) -> None:
    """Refuse a run the cluster cannot seat, with the numbers, unless asked to queue."""
    if total_slots is None:
        return  # no agent_slot resource declared: a local instance, nothing to check
    if total_slots < cfg.workers:
        raise CapacityError(
            f"the cluster has {total_slots:.0f} agent slots in all ({nodes} nodes); this run needs {cfg.workers}. "
            "Add nodes (cluster.yaml declares 64 per node) or lower --workers."
        )
    if (free_slots or 0) < cfg.workers and not cfg.queue:
        raise CapacityError(
            f"only {free_slots or 0:.0f} of {total_slots:.0f} agent slots are free ({nodes} nodes); this run needs "
            f"{cfg.workers}. Wait for other runs to end, lower --workers, or pass --queue to wait for slots."
        )


def launch_offsets(cfg: RunConfig, n: int) -> list[float]:
    """Schedule seconds at which each worker starts: every launch_interval_s during the first
    launch_fast_after_s, then every launch_fast_interval_s."""
    out, t = [], 0.0
    for _ in range(n):
        out.append(t)
        t += cfg.launch_interval_s if t < cfg.launch_fast_after_s else cfg.launch_fast_interval_s
    return out
