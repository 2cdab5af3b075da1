"""ChatActor: the embedded chat inside a Ray actor, plus a long poll for routers."""

from __future__ import annotations

import asyncio
from pathlib import Path

import ray

from agensh_ray.models import ChatMessage
from agensh_ray.trace import MessageRow, TraceWriter
from services.chat.embedded import EmbeddedChat


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=0)
class ChatActor:
    def __init__(self, root: str, run_dir: str, run_id: str):
        self.chat = EmbeddedChat(Path(root))
        self.trace = TraceWriter(run_dir, "chat", run_id)
        self._changed = asyncio.Condition()

    def add_user(self, name: str) -> None:
        self.chat.add_user(name)

    async def _record(self, msg: ChatMessage) -> ChatMessage:
        self.trace.write(
            MessageRow(
                ts=msg.ts, worker_id=msg.sender, event_id=msg.event_id, seq=msg.seq,
                kind="dm" if msg.is_dm else "channel", sender=msg.sender, recipient=msg.to, text=msg.text,
            )
        )
        async with self._changed:
            self._changed.notify_all()
        return msg

    async def post(self, sender: str, text: str) -> ChatMessage:
        return await self._record(self.chat.post(sender, text))

    async def dm(self, sender: str, to: str, text: str) -> ChatMessage:
        return await self._record(self.chat.dm(sender, to, text))

    def history(self, user: str, limit: int = 50) -> list[ChatMessage]:
        return self.chat.history(user, limit)

    def messages_since(self, cursor: int, limit: int = 1000) -> list[ChatMessage]:
        return self.chat.messages_since(cursor, limit)

    async def wait_since(self, cursor: int, timeout_s: float, limit: int = 1000) -> list[ChatMessage]:
        if self.chat.last_seq <= cursor:
            async with self._changed:
                try:
                    await asyncio.wait_for(self._changed.wait_for(lambda: self.chat.last_seq > cursor), timeout_s)
                except asyncio.TimeoutError:
                    return []
        return self.chat.messages_since(cursor, limit)

    def last_seq(self) -> int:
        return self.chat.last_seq

    def close(self) -> None:
        self.trace.close()
        self.chat.close()
