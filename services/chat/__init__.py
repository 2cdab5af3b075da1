"""Messaging between workers: one task channel and direct messages.

`Chat` is the seam: the embedded chat (default) and the Mattermost adapter
implement it.
"""

from __future__ import annotations

from typing import Protocol

from agensh_ray.models import ChatMessage


class Chat(Protocol):
    def add_user(self, name: str) -> None: ...

    def post(self, sender: str, text: str) -> ChatMessage:
        """Post on the task channel."""

    def dm(self, sender: str, to: str, text: str) -> ChatMessage: ...

    def messages_since(self, cursor: int, limit: int = 1000) -> list[ChatMessage]:
        """Every message (posts and DMs) with seq > cursor, oldest first."""

    def history(self, user: str, limit: int = 50) -> list[ChatMessage]:
        """The newest channel posts and the DMs to or from `user`, oldest first."""
