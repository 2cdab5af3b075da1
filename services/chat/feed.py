"""ChatFeed: a chat (embedded or Mattermost) with the run's message trace and
a long poll for the routers (`wait_since`). The ChatActor is this class inside
Ray; tests drive it directly on their own event loop.

Two ways a message arrives:

* the embedded chat sees every message through `post`/`dm` here, which trace
  it and wake the long polls;
* Mattermost also receives messages on its websocket (a DM from a person in
  the web interface, say), so the adapter calls back for every new message
  (`add_listener`), from whichever thread saw it; the callback traces it and
  wakes the long polls on the feed's event loop. `post`/`dm` then run the
  blocking REST call in a thread and leave tracing to that callback, so each
  message is traced once.
"""

from __future__ import annotations

import asyncio
import threading

from agensh_ray.models import ChatMessage
from agensh_ray.seams import Chat
from agensh_ray.trace import MessageRow, TraceWriter
from agensh_ray.trace.reconcile import missing_seqs


class ChatFeed:
    """Owns `chat` and `trace`: close() closes both."""

    def __init__(self, chat: Chat, trace: TraceWriter):
        self.chat = chat
        self.trace = trace
        self._changed = asyncio.Condition()
        self._loop: asyncio.AbstractEventLoop | None = None
        """The loop the long polls wait on (set by the first wait_since)."""
        self.polls_waiting = 0
        """Long polls parked now, waiting for a message."""
        self._traced: set[int] = set()
        """Seqs this feed has traced (the callback's thread and a reconciliation must not both write one)."""
        self._traced_lock = threading.Lock()
        self._pushed = hasattr(chat, "add_listener")
        """True when the chat reports its own new messages (they may not come through post/dm)."""
        if self._pushed:
            chat.add_listener(self._on_message)
        self.reconciled = self.reconcile_trace()
        """Message rows written at construction for logged messages no trace file held (a predecessor
        that died before flushing them)."""

    def add_user(self, name: str) -> None:
        self.chat.add_user(name)

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
        """Messages after `cursor`, waiting up to `timeout_s` for the first one ([] if none came)."""
        self._loop = asyncio.get_running_loop()
        if self.chat.last_seq <= cursor:
            async with self._changed:
                self.polls_waiting += 1
                try:
                    await asyncio.wait_for(self._changed.wait_for(lambda: self.chat.last_seq > cursor), timeout_s)
                except asyncio.TimeoutError:
                    return []
                finally:
                    self.polls_waiting -= 1
        return self.chat.messages_since(cursor, limit)

    def last_seq(self) -> int:
        return self.chat.last_seq

    def close(self) -> None:
        self.reconcile_trace()
        self.trace.close()
        self.chat.close()

    def reconcile_trace(self) -> int:
        """Write the `messages` rows of logged messages that no trace file holds (agensh_ray/trace/reconcile.py;
        the embedded chat only: a Mattermost server's history is not this run's log):
        at construction (a restart included) and at close. Needs the trace's run folder (None: nothing)."""
        run_dir = getattr(self.trace, "run_dir", None)
        if run_dir is None or self._pushed:  # Mattermost: its history is the server's, not this run's log
            return 0
        self.trace.flush()
        logged = {m.seq: m for m in self.chat.messages_since(0, 10**9)}
        missing = missing_seqs(run_dir, "messages", logged)
        for seq in missing:
            self._trace(logged[seq])
        self.trace.flush()
        return len(missing)

    # ---------------------------------------------------------------- inside

    def _trace(self, msg: ChatMessage) -> None:
        """One row per message, once: the websocket callback and a reconciliation may both offer it."""
        with self._traced_lock:
            if msg.seq in self._traced:
                return
            self._traced.add(msg.seq)
        self.trace.write(
            MessageRow(
                ts=msg.ts, worker_id=msg.sender, event_id=msg.event_id, seq=msg.seq,
                kind="dm" if msg.is_dm else "channel", sender=msg.sender, recipient=msg.to, text=msg.text,
            )
        )

    def _on_message(self, msg: ChatMessage) -> None:
        """From any thread: trace, then wake the long polls on the feed's loop."""
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
