"""ForgeActor: the embedded forge (its git smart-HTTP server included) inside
a Ray actor. Threaded, so the HTTP server and API calls run side by side; the
forge serialises what must be serialised."""

from __future__ import annotations

import threading
from pathlib import Path

import ray

from agensh_ray.models import ForgeEvent, PullRequest
from agensh_ray.trace import ForgeRow, TraceWriter
from services.forge.embedded import EmbeddedForge


@ray.remote(num_cpus=0, max_concurrency=16)
class ForgeActor:
    def __init__(self, root: str, run_dir: str, run_id: str):
        self.forge = EmbeddedForge(Path(root))
        self.forge.start()
        self.trace = TraceWriter(run_dir, "forge", run_id)
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
                if ev.pr is not None and ev.pr not in authors:
                    try:
                        authors[ev.pr] = self.forge.pr_view(ev.pr, with_diff=False).author
                    except Exception:
                        authors[ev.pr] = None
                self.trace.write(
                    ForgeRow(
                        ts=ev.ts, worker_id=ev.actor, event_id=ev.event_id, seq=ev.seq, kind=ev.kind, pr=ev.pr,
                        pr_author=authors.get(ev.pr) if ev.pr else None, ref=ev.ref, detail=ev.detail[:2000],
                    )
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
