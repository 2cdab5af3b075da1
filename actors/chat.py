"""ChatActor: the chat feed (agensh_ray.services.chat.feed.ChatFeed: the
message trace and the routers' long poll) inside a Ray actor, over the chat
chosen by name (the embedded one, or the Mattermost adapter with its
websocket stream). An async actor: long polls wait on its event loop."""

from __future__ import annotations

import os
from pathlib import Path

import ray

from agensh_ray import mirror
from agensh_ray.actors.supervise import LIVENESS, heartbeat, whereabouts
from agensh_ray.liveness import LoopProbe
from agensh_ray.services.chat.feed import ChatFeed
from agensh_ray.services.registry import make_chat
from agensh_ray.trace import TraceWriter


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=0, concurrency_groups=LIVENESS)
class ChatActor(ChatFeed):
    def __init__(self, root: str, run_dir: str, run_id: str, kind: str = "embedded", options: dict | None = None):
        mirror.attach(root, restore_missing=True)  # an object-store run: its log fetched if missing here, shipped
        super().__init__(make_chat(kind, Path(root), options), TraceWriter(run_dir, "chat", run_id))
        self._probe = LoopProbe()  # how long its event loop has not run, for the heartbeat

    def pid(self) -> int:
        return os.getpid()

    def where(self) -> dict:
        """Its pid and Ray node (the driver's Watch)."""
        return whereabouts()

    @ray.method(concurrency_group="liveness")
    def heartbeat(self) -> dict:
        """Its pid, Ray node and event-loop stall, from a concurrency group of its own (the driver's Watch)."""
        return heartbeat(getattr(self, "_probe", None))
