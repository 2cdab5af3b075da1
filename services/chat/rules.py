"""What both chats refuse, in the words the agent reads (the embedded chat and
the Mattermost adapter raise exactly these)."""

from __future__ import annotations

from collections.abc import Iterable

from agensh_ray.errors import ChatError

MAX_TEXT = 4000
"""Longest message, in characters."""


def check_text(text: object) -> str:
    """The message text, or ChatError if it is empty, not text, or too long."""
    if not isinstance(text, str) or not text.strip():
        raise ChatError("message text is empty")
    if len(text) > MAX_TEXT:
        raise ChatError(f"message is {len(text)} characters; the limit is {MAX_TEXT}")
    return text


def check_dm(sender: str, to: str, users: Iterable[str]) -> None:
    """ChatError unless `to` is a known user other than the sender."""
    known = set(users)
    if to not in known:
        names = ", ".join(sorted(n for n in known if n != "admin")[:20])
        raise ChatError(f"unknown recipient '{to}'; workers are named like: {names}")
    if to == sender:
        raise ChatError("a DM to yourself is not delivered; write to the board or to a peer")
