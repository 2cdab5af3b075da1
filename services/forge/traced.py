"""ForgeTracer: a forge (embedded or Gitea) with the run's forge trace
written as it goes. The ForgeActor is this class inside Ray; tests drive it
directly.

Every forge event becomes one `ForgeRow` (with the PR's author, and the
verdict of a review), in seq order, exactly once: after every call that
changes the forge, and on `events_since`, because pushes arrive through git
(or Gitea's webhooks), not through these calls. An opened, merged or closed
PR also gets `PrChangeRow`s: a snapshot of the lines it changes (analysis:
hotspots, duplicated work). A webhook the Gitea intake refused becomes one
`IntakeRow` and nothing else. Thread-safe: the actor serves calls from
several threads and the rows are written under one lock."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from agensh_ray.models import ForgeEvent, Issue, PullRequest
from agensh_ray.seams import Forge
from agensh_ray.services.forge.rules import verdict_of
from agensh_ray.trace import ForgeRow, IntakeRow, PrChangeRow, TraceWriter, diff_changes
from agensh_ray.trace.reconcile import missing_seqs

SNAPSHOT_KINDS = ("pr_opened", "pr_merged", "pr_closed")


class ForgeTracer:
    """The Forge calls the run makes (worker ids as users), traced. Owns `forge` and `trace`: close() closes both."""

    def __init__(self, forge: Forge, trace: TraceWriter):
        self.forge = forge
        self.trace = trace
        intake = getattr(forge, "intake", None)
        if intake is not None:  # refused webhooks: one trace row each, nothing else
            intake.on_rejected = self._rejected
        self._lock = threading.Lock()
        self._traced = 0
        """Every event up to this seq is traced."""
        self.reconciled = self.reconcile_trace()
        """Forge rows written at construction for logged events no trace file held (a predecessor that
        died before flushing them; a restarted forge actor does not trace the whole log again)."""

    # ------------------------------------------------------------------ calls

    def init_repo(self, starter_dir: str, title: str, body: str) -> None:
        self.forge.init_repo(Path(starter_dir), title, body)

    def url(self) -> str:
        return self.forge.url

    def add_user(self, name: str) -> str:
        return self.forge.add_user(name)

    def clone_url(self, user: str) -> str:
        return self.forge.clone_url(user)

    def issue_view(self, number: int) -> Issue:
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
            self.trace_events()  # a refused merge may have logged a merge_conflict

    def pr_close(self, number: int, by: str) -> PullRequest:
        return self._after(self.forge.pr_close(number, by))

    def events_since(self, cursor: int, limit: int = 1000) -> list[ForgeEvent]:
        self.trace_events()  # pushes arrive through git, not through these calls
        return self.forge.events_since(cursor, limit)

    def main_head(self) -> str:
        return self.forge.main_head()

    def close(self) -> None:
        self.trace_events()
        self.reconcile_trace()
        self.trace.close()
        self.forge.close()

    # ---------------------------------------------------------------- tracing

    def _after(self, result: Any) -> Any:
        self.trace_events()
        return result

    def _rejected(self, reason: str, remote: str, delivery: str | None) -> None:
        self.trace.write(IntakeRow(event_id=f"intake:{delivery or '-'}", source=remote, reason=reason,
                                   delivery=delivery))

    def _author(self, pr: int) -> str | None:
        if hasattr(self.forge, "pr_author"):
            return self.forge.pr_author(pr)  # known from the webhooks, no REST call
        try:
            return self.forge.pr_view(pr, with_diff=False).author
        except Exception:
            return None

    def reconcile_trace(self) -> int:
        """Write the rows of logged events that no trace file holds (agensh_ray/trace/reconcile.py) and move the
        cursor past the log's end: at construction (a restart included) and at close."""
        with self._lock:
            self.trace.flush()
            logged = {e.seq: e for e in self.forge.events_since(0, 10**9)}
            missing = missing_seqs(self.trace.run_dir, "forge", logged)
            self._write_rows([logged[s] for s in missing])
            self._traced = max([self._traced, *logged])
            self.trace.flush()
            return len(missing)

    def trace_events(self) -> None:
        """Write the rows of every event not traced yet."""
        with self._lock:
            self._write_rows(self.forge.events_since(self._traced, 10**9))

    def _write_rows(self, events: list[ForgeEvent]) -> None:
        authors: dict[int, str | None] = {}
        for ev in events:
            if ev.pr is not None and ev.pr not in authors:
                authors[ev.pr] = self._author(ev.pr)
            author = authors.get(ev.pr) if ev.pr else None
            verdict = verdict_of(ev.detail) if ev.kind == "pr_reviewed" else None
            self.trace.write(
                ForgeRow(
                    ts=ev.ts, worker_id=ev.actor, event_id=ev.event_id, seq=ev.seq, kind=ev.kind, pr=ev.pr,
                    pr_author=author, ref=ev.ref, detail=ev.detail[:2000], verdict=verdict,
                )
            )
            if ev.pr is not None and ev.kind in SNAPSHOT_KINDS:
                self._snapshot(ev, author)
            self._traced = max(self._traced, ev.seq)

    def _snapshot(self, ev: ForgeEvent, author: str | None) -> None:
        """The lines the PR changes, as PrChangeRows (an unreadable PR: none)."""
        try:
            pr = self.forge.pr_view(ev.pr, with_diff=True)
            changes = diff_changes(pr.diff or "", pr.files)
        except Exception:
            changes = []
        for ch in changes:
            self.trace.write(
                PrChangeRow(ts=ev.ts, worker_id=ev.actor, event_id=ev.event_id, pr=ev.pr, pr_author=author,
                            snapshot=ev.kind, **ch)
            )
