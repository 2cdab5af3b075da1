"""ChatActor: a chat (agensh_ray.services.registry: the embedded one, or the Mattermost
adapter with its websocket stream) inside a Ray actor, plus a long poll for
routers.

Embedded: every message goes through post/dm here, which trace it and wake
the routers. Mattermost: messages also arrive from the websocket (a DM from
a person, say), so the adapter's log calls back for every new message,
from whichever thread saw it; the callback traces it and wakes the routers
on the actor's loop.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import ray

from agensh_ray.models import ChatMessage
from agensh_ray.services.registry import make_chat
from agensh_ray.trace import MessageRow, TraceWriter


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=0)
class ChatActor:
    def __init__(self, root: str, run_dir: str, run_id: str, kind: str = "embedded", options: dict | None = None):
        self.chat = make_chat(kind, Path(root), options)
        self.trace = TraceWriter(run_dir, "chat", run_id)
        self._changed = asyncio.Condition()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pushed = hasattr(self.chat, "add_listener")
        """True when the chat reports its own new messages (they may not come through post/dm)."""
        if self._pushed:
            self.chat.add_listener(self._on_message)

    def add_user(self, name: str) -> None:
        self.chat.add_user(name)

    def _trace(self, msg: ChatMessage) -> None:
        self.trace.write(
            MessageRow(
                ts=msg.ts, worker_id=msg.sender, event_id=msg.event_id, seq=msg.seq,
                kind="dm" if msg.is_dm else "channel", sender=msg.sender, recipient=msg.to, text=msg.text,
            )
        )

    def _on_message(self, msg: ChatMessage) -> None:
        """From any thread: trace, then wake the long polls on the actor's loop."""
        self._trace(msg)
        if self._loop is not None:
            self._loop.call_soon_threadsafe(lambda: asyncio.ensure_future(self._notify()))

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def _record(self, msg: ChatMessage) -> ChatMessage:
        self._trace(msg)
        await self._notify()
        return msg

    async def post(self, sender: str, text: str) -> ChatMessage:
        if self._pushed:
            return await asyncio.to_thread(self.chat.post, sender, text)
        return await self._record(self.chat.post(sender, text))

    async def dm(self, sender: str, to: str, text: str) -> ChatMessage:
        if self._pushed:
            return await asyncio.to_thread(self.chat.dm, sender, to, text)
        return await self._record(self.chat.dm(sender, to, text))

    def history(self, user: str, limit: int = 50) -> list[ChatMessage]:
        return self.chat.history(user, limit)

    def messages_since(self, cursor: int, limit: int = 1000) -> list[ChatMessage]:
        return self.chat.messages_since(cursor, limit)

    async def wait_since(self, cursor: int, timeout_s: float, limit: int = 1000) -> list[ChatMessage]:
        self._loop = asyncio.get_running_loop()
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
