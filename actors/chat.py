"""ChatActor: the chat feed (agensh_ray.services.chat.feed.ChatFeed: the
message trace and the routers' long poll) inside a Ray actor, over the chat
chosen by name (the embedded one, or the Mattermost adapter with its
websocket stream). An async actor: long polls wait on its event loop."""

from __future__ import annotations

import os
from pathlib import Path

import ray

from agensh_ray import mirror
from agensh_ray.actors.supervise import whereabouts
from agensh_ray.services.chat.feed import ChatFeed
from agensh_ray.services.registry import make_chat
from agensh_ray.trace import TraceWriter


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=0)
class ChatActor(ChatFeed):
    def __init__(self, root: str, run_dir: str, run_id: str, kind: str = "embedded", options: dict | None = None):
        mirror.attach(root, restore_missing=True)  # an object-store run: its log fetched if missing here, shipped
        super().__init__(make_chat(kind, Path(root), options), TraceWriter(run_dir, "chat", run_id))

    def pid(self) -> int:
        return os.getpid()

    def where(self) -> dict:
        """Its pid and Ray node (the driver's Watch)."""
        return whereabouts()
