"""ForgeActor: the traced forge (agensh_ray.services.forge.traced.ForgeTracer)
inside a Ray actor, over the forge chosen by name (the embedded one with its
git smart-HTTP server, or the Gitea adapter with its webhook intake).
Threaded, so the HTTP server and API calls run side by side; the forge
serialises what must be serialised.

Restarted by Ray when its process dies (`max_restarts=-1`): the constructor
reloads the forge's durable state, listens on the same port (the embedded
forge remembers it) and writes the forge rows the dead process had not
flushed (ForgeTracer.reconcile_trace). Calls in flight are not re-sent
(`max_task_retries=0`: a PR must not be opened twice): their callers get an
error and may ask again.

What only the Ray edge knows is decided here: on a cluster, the embedded
forge listens on this node's address, so the agents of other nodes can clone
and push."""

from __future__ import annotations

import os
from pathlib import Path

import ray

from agensh_ray import mirror
from agensh_ray.actors.supervise import LIVENESS, heartbeat, whereabouts
from agensh_ray.services.forge.traced import ForgeTracer
from agensh_ray.services.registry import make_forge
from agensh_ray.trace import TraceWriter


@ray.remote(num_cpus=0, max_concurrency=16, max_restarts=-1, max_task_retries=0, concurrency_groups=LIVENESS)
class ForgeActor(ForgeTracer):
    def __init__(self, root: str, run_dir: str, run_id: str, kind: str = "embedded", options: dict | None = None):
        options = dict(options or {})
        mirror.attach(root, restore_missing=True)  # an object-store run: its state fetched if missing here, shipped
        if kind == "embedded" and options.get("cluster"):
            options["host"] = ray.util.get_node_ip_address()
        super().__init__(make_forge(kind, Path(root), options), TraceWriter(run_dir, "forge", run_id))

    def pid(self) -> int:
        return os.getpid()

    def where(self) -> dict:
        """Its pid and Ray node (the driver's Watch)."""
        return whereabouts()

    @ray.method(concurrency_group="liveness")
    def heartbeat(self) -> dict:
        """Its pid, Ray node (a threaded actor: no event loop to probe), from a concurrency group of its own (the driver's Watch)."""
        return heartbeat(getattr(self, "_probe", None))
