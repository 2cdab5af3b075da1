"""The single-agent baseline's stop hook (`RunConfig.baseline`): when the agent ends its turn before the
deadline it is told to keep going (prompts/keep_going.md), until the deadline or `baseline_idle_turns` turns
in a row that did no work; then the worker stops and the run ends.

A turn did work when the agent edited a file (an ACP tool call of kind `edit`), used a forge tool that
changes something (`WORK_TOOLS`), or left its clone different from how the turn found it (HEAD, the index
or the working tree: `fingerprint`), which also catches edits made through the shell. Plain logic and one
git call, so the rule is tested without a host.
"""

from __future__ import annotations

import hashlib
import subprocess
from dataclasses import dataclass
from pathlib import Path

WORK_TOOLS = frozenset({"pr_create", "pr_merge", "pr_review", "pr_comment", "board_write", "send_dm", "channel_post"})
"""Infra tools whose successful call counts as work."""
NOT_ENDED = frozenset({"cancelled", "agent_died", "error"})
"""Turn endings the hook leaves alone: the run is stopping, the host is restarting the agent, or the turn
failed (a model outage is the host's to back off from, not the agent choosing to stop)."""


def fingerprint(workdir: Path) -> str:
    """HEAD, `git status --porcelain`, the diff against HEAD and the contents of untracked files of a clone,
    hashed ("" when git cannot tell): an edit to a file never added changes it too."""
    h = hashlib.sha256()
    for argv in (["rev-parse", "HEAD"], ["status", "--porcelain", "-uall"], ["diff", "HEAD"],
                 ["ls-files", "-o", "--exclude-standard", "-z"]):
        try:
            res = subprocess.run(["git", "-C", str(workdir), *argv], capture_output=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return ""
        h.update(res.stdout)
        if argv[0] == "ls-files":
            for name in filter(None, res.stdout.split(b"\0")):
                try:
                    h.update((workdir / name.decode(errors="surrogateescape")).read_bytes())
                except OSError:
                    h.update(b"?")
    return h.hexdigest()


@dataclass
class KeepGoing:
    """Counts a baseline worker's idle turns and says whether to tell it to keep going."""

    idle_limit: int
    """Consecutive turns without work after which the agent is let stop."""
    idle: int = 0
    """Turns without work in a row so far."""
    told: int = 0
    """Keep-going prompts sent."""

    def turn_ended(self, worked: bool, stop_reason: str, before_deadline: bool) -> str | None:
        """"keep_going" (prompt the agent again), "stop" (let it stop: the reason is `why_stop`) or None (this
        ending is not the agent's: leave it to the host)."""
        if stop_reason in NOT_ENDED:
            return None
        self.idle = 0 if worked else self.idle + 1
        if not before_deadline:
            return None  # the run ends at its deadline anyway
        if self.idle >= self.idle_limit:
            return "stop"
        self.told += 1
        return "keep_going"

    @property
    def why_stop(self) -> str:
        return f"baseline: {self.idle} turns in a row without work (after {self.told} keep-going prompts)"
