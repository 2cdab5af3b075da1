"""The embedded chat: one task channel plus direct messages, kept in a durable
message log (`chat.jsonl`) so a restarted chat (or router) loses nothing.

Stands in for Mattermost on one machine; same `agensh_ray.seams.Chat`
interface, same refusals (`rules.py`).
"""

from __future__ import annotations

import threading
from pathlib import Path

from agensh_ray.applog import AppendLog
from agensh_ray.models import ChatMessage, now_us
from agensh_ray.services.chat.log import LoggedChat, MessageLog
from agensh_ray.services.chat.rules import check_dm, check_text


class EmbeddedChat(LoggedChat):
    def __init__(self, root: Path):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.log = MessageLog(self.root / "chat.jsonl")
        self._users_log = AppendLog(self.root / "users.jsonl")
        self._users: set[str] = {r["name"] for r in self._users_log.records() if isinstance(r.get("name"), str)}
        self._lock = threading.Lock()

    def add_user(self, name: str) -> None:
        with self._lock:
            if name in self._users:
                return
            self._users_log.append({"name": name})  # one line per user: O(1) at 1,024 workers
            self._users.add(name)

    def post(self, sender: str, text: str) -> ChatMessage:
        return self.log.append(sender, None, check_text(text), ts=now_us())[0]

    def dm(self, sender: str, to: str, text: str) -> ChatMessage:
        check_dm(sender, to, self._users)
        return self.log.append(sender, to, check_text(text), ts=now_us())[0]

    def close(self) -> None:
        self.log.close()
        self._users_log.close()
