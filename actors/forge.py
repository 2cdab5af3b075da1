"""ForgeActor: a forge (agensh_ray.services.registry: the embedded one with its git
smart-HTTP server, or the Gitea adapter with its webhook intake) inside
a Ray actor. Threaded, so the HTTP server and API calls run side by side; the
forge serialises what must be serialised."""

from __future__ import annotations

import threading
from pathlib import Path

import ray

from agensh_ray.models import ForgeEvent, PullRequest
from agensh_ray.services.registry import make_forge
from agensh_ray.trace import ForgeRow, IntakeRow, PrChangeRow, TraceWriter, diff_changes


@ray.remote(num_cpus=0, max_concurrency=16)
class ForgeActor:
    def __init__(self, root: str, run_dir: str, run_id: str, kind: str = "embedded", options: dict | None = None):
        self.forge = make_forge(kind, Path(root), options)
        self.trace = TraceWriter(run_dir, "forge", run_id)
        intake = getattr(self.forge, "intake", None)
        if intake is not None:  # refused webhooks: one trace row each, nothing else
            intake.on_rejected = lambda reason, remote, delivery: self.trace.write(
                IntakeRow(event_id=f"intake:{delivery or '-'}", source=remote, reason=reason, delivery=delivery)
            )
        self._traced = 0
        self._lock = threading.Lock()

    def init_repo(self, starter_dir: str, title: str, body: str) -> None:
        self.forge.init_repo(Path(starter_dir), title, body)

    def url(self) -> str:
        return self.forge.url

    def _trace_events(self) -> None:
        with self._lock:
            events = self.forge.events_since(self._traced)
            authors: dict[int, str] = {}
            for ev in events:
                if ev.pr is not None and ev.pr not in authors and hasattr(self.forge, "pr_author"):
                    authors[ev.pr] = self.forge.pr_author(ev.pr)  # known from the webhooks, no REST call
                if ev.pr is not None and ev.pr not in authors:
                    try:
                        authors[ev.pr] = self.forge.pr_view(ev.pr, with_diff=False).author
                    except Exception:
                        authors[ev.pr] = None
                author = authors.get(ev.pr) if ev.pr else None
                verdict = ev.detail.split(":", 1)[0].strip() if ev.kind == "pr_reviewed" else None
                self.trace.write(
                    ForgeRow(
                        ts=ev.ts, worker_id=ev.actor, event_id=ev.event_id, seq=ev.seq, kind=ev.kind, pr=ev.pr,
                        pr_author=author, ref=ev.ref, detail=ev.detail[:2000], verdict=verdict,
                    )
                )
                if ev.pr is not None and ev.kind in ("pr_opened", "pr_merged", "pr_closed"):
                    # Snapshot the lines the PR changes (analysis: hotspots, duplicated work).
                    try:
                        pr = self.forge.pr_view(ev.pr, with_diff=True)
                        changes = diff_changes(pr.diff or "", pr.files)
                    except Exception:
                        changes = []
                    for ch in changes:
                        self.trace.write(
                            PrChangeRow(ts=ev.ts, worker_id=ev.actor, event_id=ev.event_id, pr=ev.pr,
                                        pr_author=author, snapshot=ev.kind, **ch)
                        )
                self._traced = ev.seq

    def _after(self, result):
        self._trace_events()
        return result

    def add_user(self, name: str) -> str:
        return self.forge.add_user(name)

    def clone_url(self, user: str) -> str:
        return self.forge.clone_url(user)

    def issue_view(self, number: int):
        return self.forge.issue_view(number)

    def pr_create(self, author: str, head: str, title: str, body: str = "") -> PullRequest:
        return self._after(self.forge.pr_create(author, head, title, body))

    def pr_list(self, state: str = "open") -> list[PullRequest]:
        return self.forge.pr_list(state)

    def pr_view(self, number: int, with_diff: bool = True) -> PullRequest:
        return self.forge.pr_view(number, with_diff)

    def pr_review(self, number: int, reviewer: str, verdict: str, body: str = "") -> PullRequest:
        return self._after(self.forge.pr_review(number, reviewer, verdict, body))

    def pr_comment(self, number: int, author: str, body: str) -> PullRequest:
        return self._after(self.forge.pr_comment(number, author, body))

    def pr_merge(self, number: int, merger: str) -> PullRequest:
        try:
            return self._after(self.forge.pr_merge(number, merger))
        finally:
            self._trace_events()

    def pr_close(self, number: int, by: str) -> PullRequest:
        return self._after(self.forge.pr_close(number, by))

    def events_since(self, cursor: int, limit: int = 1000) -> list[ForgeEvent]:
        self._trace_events()  # pushes arrive through git, not through this actor
        return self.forge.events_since(cursor, limit)

    def main_head(self) -> str:
        return self.forge.main_head()

    def close(self) -> None:
        self._trace_events()
        self.trace.close()
        self.forge.close()
