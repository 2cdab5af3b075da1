"""The embedded chat: one task channel plus direct messages, kept in an
append-only JSON-lines log so a restarted chat (or router) loses nothing.

Stands in for Mattermost on one machine; same `Chat` interface.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from agensh_ray.models import ChatMessage, now_us

MAX_TEXT = 4000


class ChatError(ValueError):
    """A message that cannot be sent, worded for the agent."""


class EmbeddedChat:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._log_path = self.root / "chat.jsonl"
        self._users: set[str] = set()
        self._messages: list[ChatMessage] = []
        self._lock = threading.Lock()
        if self._log_path.exists():
            for line in self._log_path.read_text().splitlines():
                try:
                    self._messages.append(ChatMessage.model_validate_json(line))
                except ValueError:
                    break  # a torn last line from a crash: everything before it is kept
        users = self.root / "users.txt"
        if users.exists():
            self._users = set(users.read_text().split())
        self._log = open(self._log_path, "a", encoding="utf-8")

    def add_user(self, name: str) -> None:
        with self._lock:
            if name in self._users:
                return
            self._users.add(name)
            with open(self.root / "users.txt", "a", encoding="utf-8") as f:  # O(1) per user at 1,024
                f.write(name + "\n")

    def post(self, sender: str, text: str) -> ChatMessage:
        return self._append(sender, None, text)

    def dm(self, sender: str, to: str, text: str) -> ChatMessage:
        if to not in self._users:
            known = ", ".join(sorted(self._users)[:20])
            raise ChatError(f"unknown recipient '{to}'; workers are named like: {known}")
        if to == sender:
            raise ChatError("a DM to yourself is not delivered; write to the board or to a peer")
        return self._append(sender, to, text)

    def _append(self, sender: str, to: str | None, text: str) -> ChatMessage:
        if not text.strip():
            raise ChatError("message text is empty")
        if len(text) > MAX_TEXT:
            raise ChatError(f"message is {len(text)} characters; the limit is {MAX_TEXT}")
        with self._lock:
            msg = ChatMessage(seq=len(self._messages) + 1, ts=now_us(), sender=sender, to=to, text=text)
            self._log.write(msg.model_dump_json() + "\n")
            self._log.flush()
            os.fsync(self._log.fileno())
            self._messages.append(msg)
            return msg

    def messages_since(self, cursor: int, limit: int = 1000) -> list[ChatMessage]:
        return self._messages[cursor : cursor + limit]

    def history(self, user: str, limit: int = 50) -> list[ChatMessage]:
        mine = [m for m in self._messages if m.to is None or m.to == user or m.sender == user]
        return mine[-limit:]

    @property
    def last_seq(self) -> int:
        return len(self._messages)

    def close(self) -> None:
        if not self._log.closed:
            self._log.close()
