"""The shared services of a run as actors: the chat and the forge, by the
names in the run config (the driver's one call)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agensh_ray.actors.chat import ChatActor
from agensh_ray.actors.forge import ForgeActor
from agensh_ray.services.registry import check_name, service_options


def make_services(cfg: Any, run_dir: Path, run_id: str, scheduling_strategy: Any = None,
                  forge_key: str | None = None, resources: dict | None = None) -> tuple[Any, Any]:
    """(chat actor, forge actor) for a run, named chat-<run_id> and forge-<run_id>, placed by
    `scheduling_strategy` (the driver pins them to its own node; None: Ray's default) and `resources` (a node
    type they may run, and be restarted, on: `--services-resource`). `forge_key`: the
    run's secret the embedded forge makes its tokens from; it travels in the actor's arguments only (never
    into a file), so a restarted forge actor gets it again and issues the same tokens."""
    check_name("forge", cfg.forge)
    check_name("chat", cfg.chat)
    opts = service_options(cfg)
    if getattr(cfg, "address", None):
        opts["cluster"] = "1"  # the embedded forge listens on its node's address (ForgeActor)
    rd = str(run_dir)
    forge_opts = {**opts, "token_key": forge_key} if forge_key else opts
    place = {"scheduling_strategy": scheduling_strategy, "resources": resources}
    chat = ChatActor.options(name=f"chat-{run_id}", **place).remote(
        str(Path(run_dir) / "chat"), rd, run_id, cfg.chat, opts)
    forge = ForgeActor.options(name=f"forge-{run_id}", **place).remote(
        str(Path(run_dir) / "forge"), rd, run_id, cfg.forge, forge_opts)
    return chat, forge
