"""The message log both chats keep: every message (channel posts and DMs) in
seq order, durable in an `AppendLog`, read by cursor (routers) and by user
(the agent's history).

A record is a `ChatMessage` plus the adapter's extra fields (Mattermost keeps
the post id, so a post seen both in its own REST answer and on the websocket
is logged once). Sequence numbers continue from the highest one reloaded.
"""

from __future__ import annotations

import logging
import threading
from bisect import bisect_right
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agensh_ray.applog import AppendLog
from agensh_ray.errors import ChatError
from agensh_ray.inputs import whole_number
from agensh_ray.models import ChatMessage
from agensh_ray.services.chat.rules import check_limit

log = logging.getLogger(__name__)


def _seq(m: ChatMessage) -> int:
    return m.seq


class MessageLog:
    """Durable chat messages; `key` (optional, e.g. a Mattermost post id) makes an append idempotent.
    Listeners hear every new message, from whichever thread appended it."""

    def __init__(self, path: Path):
        self._log = AppendLog(path)
        self._lock = threading.Lock()
        self.messages: list[ChatMessage] = []
        self.extra: dict[int, dict[str, Any]] = {}
        """seq -> the adapter's extra fields of that record."""
        self._by_key: dict[str, ChatMessage] = {}
        self.listeners: list[Callable[[ChatMessage], None]] = []
        for n, rec in enumerate(self._log.records(), 1):
            try:
                msg = ChatMessage.model_validate({k: rec[k] for k in ChatMessage.model_fields if k in rec})
            except ValidationError as exc:
                self._log.skipped(n, exc.errors()[0]["msg"])
                continue
            if self.messages and msg.seq <= self.messages[-1].seq:
                self._log.skipped(n, f"seq {msg.seq} is not above {self.messages[-1].seq}")
                continue
            self._keep(msg, {k: v for k, v in rec.items() if k not in ChatMessage.model_fields})

    def _keep(self, msg: ChatMessage, extra: dict[str, Any]) -> None:
        self.messages.append(msg)
        if extra:
            self.extra[msg.seq] = extra
            if extra.get("key"):
                self._by_key[extra["key"]] = msg

    def append(self, sender: str, to: str | None, text: str, ts: int, key: str | None = None,
               **extra: Any) -> tuple[ChatMessage, bool]:
        """(the message, whether it is new): durable before it is visible or returned."""
        with self._lock:
            if key is not None and key in self._by_key:
                return self._by_key[key], False
            msg = ChatMessage(seq=self.last_seq + 1, ts=ts, sender=sender, to=to, text=text)
            fields = {**extra, "key": key} if key is not None else extra
            self._log.append({**msg.model_dump(), **fields})
            self._keep(msg, fields)
        for cb in list(self.listeners):
            try:
                cb(msg)
            except Exception:
                log.exception("chat listener failed")
        return msg, True

    @property
    def last_seq(self) -> int:
        return self.messages[-1].seq if self.messages else 0

    def since(self, cursor: int, limit: int = 1000) -> list[ChatMessage]:
        """Messages with seq > cursor, oldest first, at most `limit` (1 or more: ChatError otherwise)."""
        whole_number(limit, "limit", 1, None, ChatError)
        i = bisect_right(self.messages, cursor, key=_seq)
        return self.messages[i : i + limit]

    def history(self, user: str, limit: int = 50) -> list[ChatMessage]:
        """The newest channel posts and the DMs to or from `user`, oldest first (at most `limit`, 1 to
        MAX_HISTORY: ChatError otherwise)."""
        limit = check_limit(limit)
        mine = [m for m in self.messages if m.to is None or m.to == user or m.sender == user]
        return mine[-limit:]

    def close(self) -> None:
        self._log.close()


class LoggedChat:
    """The reads every chat answers from its message log (`self.log`): what the routers and the history
    tool see is the log, whichever adapter filled it."""

    log: MessageLog

    def messages_since(self, cursor: int, limit: int = 1000) -> list[ChatMessage]:
        return self.log.since(cursor, limit)

    def history(self, user: str, limit: int = 50) -> list[ChatMessage]:
        return self.log.history(user, limit)

    @property
    def last_seq(self) -> int:
        return self.log.last_seq

