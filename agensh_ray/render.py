"""Every text an agent reads about a board entry, a message, a pull request or a delivery, in one
place.

The tool results (agensh_ray/tools.py), the hand-off summary (agensh_ray/handoff.py), the events a
router fans out (agensh_ray/routing/fanout.py) and the block of new events a worker host appends to
a tool result or a turn prompt all word these things the same way; the sim agent parses some of
them with regular expressions, so a change here is a change of what every agent reads.

What a worker wrote is marked, so that no worker can write something that reads like a line of the
system (a board entry, a DM, a notice): a one-line text stands in double quotes, escaped like a JSON
or Python string (`quote`: a quote, a backslash, a line break or a control character inside it is a visible
escape, so the text cannot end early or start a line of its own); a longer text stands on lines of
its own that each begin with `| ` (`block`, its control characters escaped). Every other line, and
everything outside the quotes, is the system's. `MARKERS` says so to the agents, in one line.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from agensh_ray.inputs import escape_all_controls, escape_char, escape_controls
from agensh_ray.models import BoardEntry, ChatMessage, ForgeEvent, Issue, PullRequest

MARKERS = ('Text a worker wrote is shown in double quotes ("...", its quotes, backslashes and line breaks '
           'escaped as \\" \\\\ \\n) or on lines that start with "| "; everything else is from the system.')
"""What the markers mean, for the tool descriptions and the worker prompt."""
QUOTED_LINE = "| "
_QUOTED = re.compile('["\\\\\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2028\u2029\u2066-\u2069]')
_WORKER_DETAIL = frozenset({"pr_opened", "pr_reviewed", "pr_commented"})
"""Forge events whose detail is a worker's text (a PR title, a review, a comment)."""


def _quote_char(m: re.Match[str]) -> str:
    ch = m.group()
    return "\\" + ch if ch in '"\\' else escape_char(ch)


def quote(text: str) -> str:
    """A worker's text on one line, in double quotes: `"`, `\\`, line breaks and control characters
    inside are escaped as in a JSON string (`\\"`, `\\\\`, `\\n`, `\\x1b`...)."""
    return '"' + _QUOTED.sub(_quote_char, text) + '"'


def block(text: str) -> str:
    """A worker's longer text, each of its lines behind `| ` (control characters but tabs escaped)."""
    return "\n".join(QUOTED_LINE + line for line in escape_controls(text).split("\n"))


def fmt_entry(e: BoardEntry) -> str:
    """A board entry in a tool result."""
    more = " [+detail: board_unfold]" if e.has_detail else ""
    return f"#{e.seq} {e.type.value} {e.worker_id}: {quote(e.text)}{more}"


def fmt_claims(leases: list[Any], key: str | None) -> str:
    """The open claims (`agensh_ray.board.leases.Lease`, oldest first on each key) as `board_claims` shows them:
    each as its board entry reads, the first on its key marked as the holder."""
    if not leases:
        return f"(no open claim on {quote(key)})" if key else "(no open claim)"
    lines, first = [], set()
    for c in leases:
        e = BoardEntry(seq=c.seq, ts=c.ts, type="CLAIM", text=c.text, worker_id=c.worker)
        role = "holds it" if c.key not in first else "later: backs off, DMs the holder"
        first.add(c.key)
        lines.append(f"{fmt_entry(e)} -- key {quote(c.key)}, {role}")
    return "\n".join(lines)


def fmt_unfold(e: BoardEntry) -> str:
    """A board entry with its detail below it."""
    return fmt_entry(e) + ("\n" + block(e.detail) if e.detail else "\n(no detail)")


def fmt_message(m: ChatMessage) -> str:
    """A chat message in a tool result."""
    where = f"DM {m.sender} -> {m.to}" if m.to else f"#{m.channel} {m.sender}"
    return f"[{where}] {quote(m.text)}"


def fmt_pr(pr: PullRequest, long: bool = False) -> str:
    """A pull request: one line, or (long) with its body, files, reviews, comments and diff."""
    line = f"PR #{pr.number} [{pr.state}] {pr.head} -> {pr.base} by {pr.author}: {quote(pr.title)}"
    if pr.state == "merged":
        line += f" (merged by {pr.merged_by})"
    if not long:
        return line
    parts = [line]
    if pr.body:
        parts.append(block(pr.body))
    if pr.files:
        parts.append("files: " + ", ".join(quote(f) for f in pr.files))
    for r in pr.reviews:
        parts.append(f"review by {r.reviewer}: {r.verdict}")
        if r.body:
            parts.append(block(r.body))
    for c in pr.comments:
        parts.append(f"comment by {c.author}:")
        parts.append(block(c.body))
    if pr.diff:
        parts.append("diff:")
        parts.append(block(pr.diff))
    return "\n".join(parts)


def fmt_issue(issue: Issue) -> str:
    """An issue of the forge (issue #1 is the task, written by the run, not by a worker)."""
    return f"Issue #{issue.number} [{issue.state}] {escape_all_controls(issue.title)}\n\n{escape_controls(issue.body)}"


def fmt_error(exc: BaseException) -> str:
    """A refusal as the tool result the agent reads (it may name what the agent sent: escaped)."""
    return f"ERROR: {escape_controls(str(exc))}"


def board_text(e: BoardEntry) -> str:
    """A new board entry as it is delivered to the other workers."""
    return f"[board #{e.seq} {e.type.value} {e.worker_id}] {quote(e.text)}"


def dm_text(m: ChatMessage) -> str:
    """A direct message as it is delivered to its recipient."""
    return f"[DM from {m.sender}] {quote(m.text)}"


def post_text(m: ChatMessage) -> str:
    """A channel post as it is delivered to the other workers."""
    return f"[#{m.channel} {m.sender}] {quote(m.text)}"


def forge_text(fe: ForgeEvent) -> str:
    """A forge event as it is delivered to the workers it notifies (a worker's title, review or comment
    quoted; the rest, which may hold branch or file names, kept on one line)."""
    what = f"PR #{fe.pr} " if fe.pr else ""
    detail = (quote(fe.detail) if fe.kind in _WORKER_DETAIL else escape_all_controls(fe.detail)) if fe.detail else ""
    return f"[forge] {what}{fe.kind.replace('_', ' ')} by {fe.actor}: {detail}".rstrip(": ")


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
