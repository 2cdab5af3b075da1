"""The router intake for Gitea: signed webhooks in, forge notifications out,
readable by cursor.

How it plugs into the routers: the intake runs *inside the forge actor*
(`GiteaForge.start()` starts it next to the REST adapter) and appends every
accepted event to a durable JSON-lines log, `ForgeEventLog`. The routers do
not change: they already read `forge.events_since(cursor)` from the forge
actor, and `GiteaForge.events_since` reads this log. So webhooks join the
same at-least-once, replay-by-cursor path as the embedded forge's events,
and a restarted forge actor reloads the log (the intake binds the same
address again; Gitea's own delivery history covers the seconds it was down).
Events Gitea cannot send (a merge refused for a conflict) are appended to
the same log by the adapter.

Request handling, in order: POST to the configured path only (else 404/405);
a body larger than `max_body` is refused with 413 before it is read; the
`X-Gitea-Signature` header must be the HMAC-SHA256 hex digest of the raw body
under the webhook secret, compared in constant time, else 401, one
`IntakeRow` in the trace and nothing else (the body is not parsed). A good
delivery is acknowledged with 200 even when it maps to no event (a
`pull_request_sync` duplicates the push event, say), and a redelivery
(same `X-Gitea-Delivery`) is dropped.

Notify rules are the embedded forge's: review, comment, merge, close by
someone else -> the PR author; a comment by the author -> the PR's
reviewers; a push to an open PR's head branch -> its reviewers; plus every
known worker @mentioned in the text; never the actor.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import threading
from bisect import bisect_right
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

from agensh_ray.applog import AppendLog
from agensh_ray.models import ForgeEvent, now_us
from agensh_ray.services.http_thread import serve_in_thread

log = logging.getLogger(__name__)

MAX_BODY = 5 * 1024 * 1024
"""Webhook bodies above this are refused (Gitea caps push payloads at a few MB of commits)."""
_MENTION_RE = re.compile(r"(?<![\w@/])@([A-Za-z0-9][A-Za-z0-9_.-]*)")
ZERO = "0" * 40


def mentions(text: str | None) -> list[str]:
    out: list[str] = []
    for m in _MENTION_RE.finditer(text or ""):
        name = m.group(1).rstrip(".-")
        if name and name not in out:
            out.append(name)
    return out


def signature(secret: str, body: bytes) -> str:
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


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
        """Append one event; None if this delivery was already logged."""
        with self._changed:
            if delivery and delivery in self.deliveries:
                return None
            rec: dict[str, Any] = {
                "seq": (self.events[-1].seq if self.events else 0) + 1, "ts": ts or now_us(), "kind": kind, "actor": actor, "pr": pr,
                "ref": ref, "detail": detail, "notify": [n for n in dict.fromkeys(notify or []) if n and n != actor],
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
    """Turns one Gitea webhook (event type + JSON payload) into at most one forge event."""

    def __init__(self, log: ForgeEventLog, login_to_worker: dict[str, str]):
        self.log = log
        self.login_to_worker = {k.lower(): v for k, v in login_to_worker.items()}

    def who(self, user: dict | None) -> str:
        login = (user or {}).get("login") or (user or {}).get("username") or "unknown"
        return self.login_to_worker.get(login.lower(), login)

    def _mentioned(self, text: str | None) -> list[str]:
        workers = set(self.login_to_worker.values())
        out = []
        for name in mentions(text):
            w = self.login_to_worker.get(name.lower(), name)
            if w in workers:
                out.append(w)
        return out

    def apply(self, event_type: str, payload: dict, delivery: str | None) -> ForgeEvent | None:
        actor = self.who(payload.get("sender") or payload.get("pusher"))
        if event_type == "push":
            return self._push(payload, actor, delivery)
        pr = payload.get("pull_request")
        if pr is None:
            return None  # issue events, repository events...: nothing a worker is notified of
        number = pr.get("number") or payload.get("number")
        author = self.who(pr.get("user"))
        head = (pr.get("head") or {}).get("ref")
        common = dict(pr=number, ref=head, delivery=delivery, pr_author=author, head=head)
        st = self.log.pr_state(number) or {"reviewers": []}
        action = payload.get("action")
        if event_type == "pull_request":
            if action == "opened":
                return self.log.append("pr_opened", actor, detail=pr.get("title", ""),
                                       notify=self._mentioned(pr.get("body")), **common)
            if action == "closed":
                if pr.get("merged"):
                    sha = (pr.get("merge_commit_sha") or "")[:12]
                    detail = f"merged {head} into {(pr.get('base') or {}).get('ref')} as {sha}"
                    return self.log.append("pr_merged", actor, detail=detail, notify=[author], **common)
                return self.log.append("pr_closed", actor, detail=pr.get("title", ""), notify=[author], **common)
            return None  # synchronized (the push event says it), edited, reopened, assigned...
        if event_type.startswith("pull_request_review_"):
            review = payload.get("review") or {}
            verdict = {"approved": "approve", "rejected": "request_changes", "comment": "comment"}.get(
                event_type.rsplit("_", 1)[-1], "comment")
            body = review.get("content") or ""
            detail = verdict + (f": {body}" if body else "")
            return self.log.append("pr_reviewed", actor, detail=detail,
                                   notify=[author, *self._mentioned(body)], **common)
        if event_type in ("pull_request_comment", "issue_comment") and payload.get("comment"):
            body = payload["comment"].get("body") or ""
            concerned = st["reviewers"] if actor == author else [author]
            return self.log.append("pr_commented", actor, detail=body,
                                   notify=[*concerned, *self._mentioned(body)], **common)
        return None

    def _push(self, payload: dict, actor: str, delivery: str | None) -> ForgeEvent | None:
        ref = payload.get("ref") or ""
        old, new = payload.get("before") or ZERO, payload.get("after") or ZERO
        if set(new) <= {"0"}:
            detail = f"deleted {ref} (was {old[:12]})"
        elif set(old) <= {"0"}:
            detail = f"created {ref} at {new[:12]}"
        else:
            detail = f"updated {ref}: {old[:12]} -> {new[:12]}"
        branch = ref[len("refs/heads/"):] if ref.startswith("refs/heads/") else None
        number = self.log.open_pr_for_branch(branch) if branch else None
        notify = (self.log.pr_state(number) or {}).get("reviewers", []) if number else []
        return self.log.append("push", actor, pr=number, ref=ref, detail=detail, notify=notify, delivery=delivery)


class WebhookIntake:
    """The HTTP endpoint. `on_rejected(reason, remote_addr, delivery)` is called for a refused delivery."""

    def __init__(self, mapper: GiteaWebhookMapper, secret: str, host: str = "127.0.0.1", port: int = 0,
                 path: str = "/hooks/gitea", max_body: int = MAX_BODY,
                 on_rejected: Callable[[str, str, str | None], None] | None = None):
        if not secret:
            raise ValueError("the webhook intake needs a secret (bootstrap writes one to the secrets file)")
        self.mapper = mapper
        self._secret = secret
        self.host, self.path, self.max_body = host, path, max_body
        self.on_rejected = on_rejected
        self._requested_port = port
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._server is not None:
            return
        outer = self

        class Handler(_IntakeHandler):
            intake = outer

        self._server, self._thread = serve_in_thread(self.host, self._requested_port, Handler, "gitea-intake")

    @property
    def port(self) -> int:
        assert self._server is not None, "start() the intake first"
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}{self.path}"

    def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def reject(self, reason: str, remote: str, delivery: str | None) -> None:
        log.warning("webhook refused from %s: %s", remote, reason)
        if self.on_rejected is not None:
            try:
                self.on_rejected(reason, remote, delivery)
            except Exception:
                log.exception("recording a refused webhook failed")

    def verify(self, body: bytes, sig: str | None) -> bool:
        return bool(sig) and hmac.compare_digest(signature(self._secret, body), sig.strip().lower())


class _IntakeHandler(BaseHTTPRequestHandler):
    intake: WebhookIntake
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args) -> None:  # noqa: A002
        log.debug("intake %s: %s", self.address_string(), format % args)

    def _reply(self, code: int, text: str) -> None:
        data = (text + "\n").encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)
        self.close_connection = True

    def do_GET(self) -> None:
        self._reply(405, "POST webhooks here")

    def do_POST(self) -> None:
        it = self.intake
        remote = self.client_address[0]
        delivery = self.headers.get("X-Gitea-Delivery")
        if urlsplit(self.path).path != it.path:
            self._reply(404, f"the intake listens on {it.path}")
            return
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self._reply(411, "Content-Length required")
            return
        if length < 0 or length > it.max_body:
            it.reject(f"body of {length} bytes exceeds {it.max_body}", remote, delivery)
            self._reply(413, f"body larger than {it.max_body} bytes")
            return
        body = self.rfile.read(length)
        if not it.verify(body, self.headers.get("X-Gitea-Signature")):
            it.reject("bad or missing X-Gitea-Signature", remote, delivery)
            self._reply(401, "bad signature")
            return
        event_type = self.headers.get("X-Gitea-Event-Type") or self.headers.get("X-Gitea-Event") or ""
        try:
            payload = json.loads(body)
        except ValueError:
            self._reply(400, "body is not JSON")
            return
        try:
            ev = it.mapper.apply(event_type, payload, delivery)
        except Exception:
            log.exception("webhook %s could not be mapped", event_type)
            self._reply(500, "could not process the event")
            return
        self._reply(200, f"ok {ev.event_id}" if ev else "ok (no notification)")
