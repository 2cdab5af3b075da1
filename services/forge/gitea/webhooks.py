"""Gitea's webhooks as forge events, readable by cursor: the durable
`ForgeEventLog` and the `GiteaWebhookMapper` that turns one webhook into at
most one event.

How it plugs into the routers: the intake (`intake.py`) runs *inside the
forge actor* (`GiteaForge.start()` starts it next to the REST adapter) and
hands every verified webhook to the mapper, which appends to the log. The
routers do not change: they already read `forge.events_since(cursor)` from
the forge actor, and `GiteaForge.events_since` reads this log. So webhooks
join the same at-least-once, replay-by-cursor path as the embedded forge's
events, and a restarted forge actor reloads the log (the intake binds the
same address again; Gitea's own delivery history covers the seconds it was
down). Events Gitea cannot send (a merge refused for a conflict) are appended
to the same log by the adapter. A redelivery (same `X-Gitea-Delivery`, or
without that header the same body: the intake then keys it by its hash) is
dropped.

Notify rules are the embedded forge's (services/forge/rules.py): review,
comment, merge, close by someone else -> the PR author; a comment by the
author -> the PR's reviewers; a push to an open PR's head branch -> its
reviewers; plus every known worker @mentioned in the text; never the actor.
"""

from __future__ import annotations

import json
import threading
from bisect import bisect_right
from pathlib import Path
from typing import Any

from agensh_ray.applog import AppendLog
from agensh_ray.models import ForgeEvent, now_us
from agensh_ray.services.forge import rules
from agensh_ray.services.forge.gitea.payloads import HookUser, Payload, parse

ZERO = "0" * 40


def _seq(e: ForgeEvent) -> int:
    return e.seq


class ForgeEventLog:
    """Append-only, durable ForgeEvent log (seq dense from 1) plus what the
    notify rules need to remember per PR (author, head branch, reviewers)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self.events: list[ForgeEvent] = []
        self.deliveries: set[str] = set()
        self.prs: dict[int, dict] = {}
        """pr -> {author, head, open, reviewers}."""
        self._log = AppendLog(self.path)
        for n, rec in enumerate(self._log.records(), 1):
            try:
                if self.events and rec.get("seq", 0) <= self.events[-1].seq:
                    raise ValueError(f"seq {rec.get('seq')} is not above {self.events[-1].seq}")
                self._fold(rec)
            except ValueError as exc:  # pydantic's ValidationError included
                self._log.skipped(n, exc)

    def _fold(self, rec: dict) -> ForgeEvent:
        ev = ForgeEvent.model_validate(rec)
        self.events.append(ev)
        if rec.get("delivery"):
            self.deliveries.add(rec["delivery"])
        if ev.pr is not None:
            st = self.prs.setdefault(ev.pr, {"author": None, "head": None, "open": True, "reviewers": []})
            if rec.get("pr_author"):
                st["author"] = rec["pr_author"]
            if rec.get("head"):
                st["head"] = rec["head"]
            if ev.kind in ("pr_merged", "pr_closed"):
                st["open"] = False
            if ev.kind == "pr_reviewed" and ev.actor not in st["reviewers"]:
                st["reviewers"].append(ev.actor)
        return ev

    def append(self, kind: str, actor: str, *, pr: int | None = None, ref: str | None = None, detail: str = "",
               notify: list[str] | None = None, ts: int | None = None, delivery: str | None = None,
               pr_author: str | None = None, head: str | None = None) -> ForgeEvent | None:
        """Append one event (notify: each once, never the actor); None if this delivery was already logged."""
        with self._changed:
            if delivery and delivery in self.deliveries:
                return None
            rec: dict[str, Any] = {
                "seq": (self.events[-1].seq if self.events else 0) + 1, "ts": ts or now_us(), "kind": kind,
                "actor": actor, "pr": pr, "ref": ref, "detail": detail,
                "notify": rules.notify_list(actor, notify or []),
            }
            extra = {"delivery": delivery, "pr_author": pr_author, "head": head}
            self._log.append({**rec, **{k: v for k, v in extra.items() if v}})
            ev = self._fold({**rec, **extra})
            self._changed.notify_all()
            return ev

    def since(self, cursor: int, limit: int = 1000) -> list[ForgeEvent]:
        with self._lock:
            i = bisect_right(self.events, cursor, key=_seq)
            return [e.model_copy() for e in self.events[i : i + max(0, limit)]]

    def wait_for(self, seq: int, timeout: float) -> bool:
        """Block until the log has `seq` events (tests)."""
        with self._changed:
            return self._changed.wait_for(lambda: bool(self.events) and self.events[-1].seq >= seq, timeout)

    def pr_state(self, pr: int) -> dict | None:
        with self._lock:
            st = self.prs.get(pr)
            return dict(st, reviewers=list(st["reviewers"])) if st else None

    def open_pr_for_branch(self, branch: str) -> int | None:
        with self._lock:
            for number, st in sorted(self.prs.items(), reverse=True):
                if st["open"] and st["head"] == branch:
                    return number
        return None

    def close(self) -> None:
        self._log.close()


class GiteaWebhookMapper:
    """Turns one Gitea webhook (event type + payload) into at most one forge event."""

    def __init__(self, log: ForgeEventLog, login_to_worker: dict[str, str]):
        self.log = log
        self.login_to_worker = {k.lower(): v for k, v in login_to_worker.items()}

    def who(self, user: HookUser | None) -> str:
        login = (user.login or user.username if user else None) or "unknown"
        return self.login_to_worker.get(login.lower(), login)

    def _mentioned(self, text: str | None) -> list[str]:
        workers = set(self.login_to_worker.values())
        out = []
        for name in rules.mentions(text):
            w = self.login_to_worker.get(name.lower(), name)
            if w in workers:
                out.append(w)
        return out

    def apply(self, event_type: str, payload: Payload | dict, delivery: str | None) -> ForgeEvent | None:
        """The event for this webhook (None: nothing a worker is notified of, or a delivery already logged).
        A dict payload is validated first (BadWebhook if it has not the shape payloads.py reads)."""
        if not isinstance(payload, Payload):
            payload = parse(json.dumps(payload).encode(), event_type)
        actor = self.who(payload.sender or payload.pusher)
        if event_type == "push":
            return self._push(payload, actor, delivery)
        pr = payload.pull_request
        if pr is None:
            return None  # issue events, repository events...: nothing a worker is notified of
        number = pr.number or payload.number
        author = self.who(pr.user)
        head = pr.head.ref if pr.head else None
        common = dict(pr=number, ref=head, delivery=delivery, pr_author=author, head=head)
        reviewers = (self.log.pr_state(number) or {"reviewers": []})["reviewers"]

        def event(kind: str, detail: str, text: str | None = None) -> ForgeEvent | None:
            notify = [*rules.concerned(kind, actor, author, reviewers), *self._mentioned(text)]
            return self.log.append(kind, actor, detail=detail, notify=notify, **common)

        action = payload.action
        if event_type == "pull_request":
            if action == "opened":
                return event("pr_opened", pr.title or "", pr.body)
            if action == "closed":
                if pr.merged:
                    return event("pr_merged", rules.merged_detail(head, pr.base.ref if pr.base else None,
                                                                  pr.merge_commit_sha))
                return event("pr_closed", pr.title or "")
            return None  # synchronized (the push event says it), edited, reopened, assigned...
        if event_type.startswith("pull_request_review_"):
            verdict = {"approved": "approve", "rejected": "request_changes", "comment": "comment"}.get(
                event_type.rsplit("_", 1)[-1], "comment")
            body = (payload.review.content if payload.review else "") or ""
            return event("pr_reviewed", rules.review_detail(verdict, body), body)
        if event_type in ("pull_request_comment", "issue_comment") and payload.comment:
            body = payload.comment.body or ""
            return event("pr_commented", body, body)
        return None

    def _push(self, payload: Payload, actor: str, delivery: str | None) -> ForgeEvent | None:
        ref = payload.ref or ""
        old, new = payload.before or ZERO, payload.after or ZERO
        branch = rules.branch_of(ref)
        number = self.log.open_pr_for_branch(branch) if branch else None
        reviewers = (self.log.pr_state(number) or {}).get("reviewers", []) if number else []
        return self.log.append("push", actor, pr=number, ref=ref, detail=rules.push_detail(ref, old, new),
                               notify=rules.concerned("push", actor, None, reviewers), delivery=delivery)
