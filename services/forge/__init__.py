"""The shared git workspace with pull requests.

`Forge` is the seam: the embedded forge (default, one machine) and the Gitea
adapter implement it. Implementations are registered by name and imported
only when chosen.
"""

from __future__ import annotations

from typing import Protocol

from agensh_ray.models import ForgeEvent, Issue, PullRequest, ReviewVerdict


class Forge(Protocol):
    """What workers and the run driver need from a forge. All calls are synchronous."""

    def add_user(self, name: str) -> str:
        """Create a user (idempotent) and return its access token."""

    def clone_url(self, user: str) -> str:
        """HTTP URL of the repository carrying this user's credentials."""

    def issue_view(self, number: int) -> Issue: ...

    def pr_create(self, author: str, head: str, title: str, body: str = "", base: str = "main") -> PullRequest: ...

    def pr_list(self, state: str = "open") -> list[PullRequest]:
        """state: open | merged | closed | all."""

    def pr_view(self, number: int, with_diff: bool = True) -> PullRequest: ...

    def pr_review(self, number: int, reviewer: str, verdict: ReviewVerdict, body: str = "") -> PullRequest: ...

    def pr_comment(self, number: int, author: str, body: str) -> PullRequest: ...

    def pr_merge(self, number: int, merger: str) -> PullRequest:
        """Merge into the base; raises MergeConflict (with the files) or ForgeError."""

    def pr_close(self, number: int, by: str) -> PullRequest: ...

    def events_since(self, cursor: int, limit: int = 1000) -> list[ForgeEvent]:
        """Forge events with seq > cursor, oldest first."""

    def main_head(self) -> str:
        """Commit id of main."""

    def close(self) -> None: ...
