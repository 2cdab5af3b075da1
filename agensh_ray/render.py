"""Every text an agent reads about a board entry, a message, a pull request or a delivery, in one
place.

The tool results (agensh_ray/tools.py), the hand-off summary (agensh_ray/handoff.py), the events a
router fans out (agensh_ray/routing/fanout.py) and the block of new events a worker host appends to
a tool result or a turn prompt all word these things the same way; the sim agent parses some of
them with regular expressions, so a change here is a change of what every agent reads.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from agensh_ray.models import BoardEntry, ChatMessage, ForgeEvent, PullRequest


def fmt_entry(e: BoardEntry) -> str:
    """A board entry in a tool result."""
    more = " [+detail: board_unfold]" if e.has_detail else ""
    return f"#{e.seq} {e.type.value} {e.worker_id}: {e.text}{more}"


def fmt_message(m: ChatMessage) -> str:
    """A chat message in a tool result."""
    where = f"DM {m.sender} -> {m.to}" if m.to else f"#{m.channel} {m.sender}"
    return f"[{where}] {m.text}"


def fmt_pr(pr: PullRequest, long: bool = False) -> str:
    """A pull request: one line, or (long) with its body, files, reviews, comments and diff."""
    line = f"PR #{pr.number} [{pr.state}] {pr.head} -> {pr.base} by {pr.author}: {pr.title}"
    if pr.state == "merged":
        line += f" (merged by {pr.merged_by})"
    if not long:
        return line
    parts = [line]
    if pr.body:
        parts.append(pr.body)
    if pr.files:
        parts.append("files: " + ", ".join(pr.files))
    for r in pr.reviews:
        parts.append(f"review by {r.reviewer}: {r.verdict} {r.body}".rstrip())
    for c in pr.comments:
        parts.append(f"comment by {c.author}: {c.body}")
    if pr.diff:
        parts.append(pr.diff)
    return "\n".join(parts)


def board_text(e: BoardEntry) -> str:
    """A new board entry as it is delivered to the other workers."""
    return f"[board #{e.seq} {e.type.value} {e.worker_id}] {e.text}"


def dm_text(m: ChatMessage) -> str:
    """A direct message as it is delivered to its recipient."""
    return f"[DM from {m.sender}] {m.text}"


def post_text(m: ChatMessage) -> str:
    """A channel post as it is delivered to the other workers."""
    return f"[#{m.channel} {m.sender}] {m.text}"


def forge_text(fe: ForgeEvent) -> str:
    """A forge event as it is delivered to the workers it notifies."""
    what = f"PR #{fe.pr} " if fe.pr else ""
    return f"[forge] {what}{fe.kind.replace('_', ' ')} by {fe.actor}: {fe.detail}".rstrip(": ")


def render(deliveries: list[Any], mid_turn: bool) -> str:
    """The text an agent reads: urgent items verbatim, summaries folded into one line."""
    if not deliveries:
        return ""
    lines = ["--- new for you while you work ---" if mid_turn else "--- since your last turn ---"]
    summary: Counter[str] = Counter()
    for d in deliveries:
        if d.kind == "summary":
            summary[getattr(d, "label", "") or "other"] += 1
        else:
            lines.append(d.text)
    if summary:
        what = ", ".join(f"{n} {k}" for k, n in sorted(summary.items()))
        lines.append(f"[board] {sum(summary.values())} other new entries ({what}); board_read shows them")
    return "\n".join(lines)
