"""What both chats refuse, in the words the agent reads (the embedded chat and
the Mattermost adapter raise exactly these)."""

from __future__ import annotations

from collections.abc import Iterable

from agensh_ray.errors import ChatError
from agensh_ray.inputs import escape_controls, whole_number

MAX_TEXT = 4000
"""Longest message, in characters."""
MAX_HISTORY = 1000
"""Most messages one history read returns."""


def check_text(text: object) -> str:
    """The message text as it is kept, or ChatError if it is empty, not text, or too long.

    A message may have several lines (a plan, a list); its other control characters are escaped
    (`agensh_ray.inputs.escape_controls`), and readers see it quoted on one line
    (`agensh_ray.render`), so no message can pass for a DM or a notice of the system."""
    if not isinstance(text, str) or not text.strip():
        raise ChatError("message text is empty")
    if len(text) > MAX_TEXT:
        raise ChatError(f"message is {len(text)} characters; the limit is {MAX_TEXT}")
    text = escape_controls(text)
    if len(text) > MAX_TEXT:
        raise ChatError(f"message is {len(text)} characters once its control characters are escaped; "
                        f"the limit is {MAX_TEXT}")
    return text


def check_limit(limit: object) -> int:
    """A history read's `limit`, or ChatError naming its range."""
    return whole_number(limit, "limit", 1, MAX_HISTORY, ChatError)


def check_dm(sender: str, to: str, users: Iterable[str]) -> None:
    """ChatError unless `to` is a known user other than the sender."""
    known = set(users)
    if to not in known:
        names = ", ".join(sorted(n for n in known if n != "admin")[:20])
        raise ChatError(f"unknown recipient '{to}'; workers are named like: {names}")
    if to == sender:
        raise ChatError("a DM to yourself is not delivered; write to the board or to a peer")
