"""Webhooks of the fake Gitea: their configuration (`/repos/{owner}/{repo}/hooks`),
the payloads (push, pull_request opened/closed/synchronized, reviews, issue
and PR comments) and their delivery.

Delivery is Gitea's: `gitea`-type hooks get the JSON body with
`X-Gitea-Event`, `X-Gitea-Event-Type`, `X-Gitea-Delivery` and
`X-Gitea-Signature` (HMAC-SHA256 hex of the body with the hook's secret),
in order, by one thread (`_hook_sender`), so the intake sees events in the
order they happened. The payload parts the spec defines (pull_request,
repository, sender, pusher, issue, comment, commits) are contract-checked
before they leave.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import uuid
from typing import Any

import httpx

from agensh_ray.services.fakes.gitea.git import ZERO
from agensh_ray.services.fakes.gitea.server import VERSION, ApiError, iso


class HooksApi:
    """Webhook config, the payload of each event, and the thread that delivers them."""

    def _hook_json(self, h: dict) -> dict:
        return {"id": h["id"], "type": h["type"], "branch_filter": h["branch_filter"],
                "config": {"url": h["url"], "content_type": h["content_type"], "http_method": "post"},
                "events": h["events"], "authorization_header": "", "active": h["active"],
                "updated_at": iso(h["updated"]), "created_at": iso(h["created"])}

    def _hooks(self, method: str, r: dict, rest: list[str], data: Any, perm: str | None) -> tuple[int, Any]:
        if perm != "admin":
            raise ApiError(403, "")
        if method == "GET" and not rest:
            return 200, [self._hook_json(h) for h in r["hooks"].values()]
        if method == "POST" and not rest:
            cfg = data["config"]
            if not cfg.get("url") or not cfg.get("content_type"):
                raise ApiError(422, "Missing config option: url / content_type")
            h = {"id": next(self._ids), "type": data["type"], "url": cfg["url"], "content_type": cfg["content_type"],
                 "secret": cfg.get("secret", ""), "events": data.get("events") or ["push"],
                 "active": bool(data.get("active")), "branch_filter": data.get("branch_filter") or "*",
                 "created": time.time(), "updated": time.time()}
            r["hooks"][h["id"]] = h
            return 201, self._hook_json(h)
        h = r["hooks"].get(int(rest[0])) if rest else None
        if h is None:
            raise ApiError(404, "")
        if method == "GET":
            return 200, self._hook_json(h)
        if method == "PATCH":
            cfg = data.get("config") or {}
            h.update({k: v for k, v in (("url", cfg.get("url")), ("content_type", cfg.get("content_type")),
                                         ("secret", cfg.get("secret"))) if v is not None})
            for k in ("events", "active", "branch_filter"):
                if data.get(k) is not None:
                    h[k] = data[k]
            h["updated"] = time.time()
            return 200, self._hook_json(h)
        if method == "DELETE":
            del r["hooks"][h["id"]]
            return 204, None
        raise ApiError(404, "")

    # ----------------------------------------------------------------- webhooks

    def _deliver(self, r: dict, event: str, event_type: str, payload: dict) -> None:
        for h in r["hooks"].values():
            if not h["active"]:
                continue
            wanted = set(h["events"])
            # As Gitea's pullHook(): "pull_request" subscribes to every pull request event.
            if not (event_type in wanted or event_type.startswith("pull_request") and "pull_request" in wanted):
                continue
            self._hook_q.put((h, event, event_type, payload))

    def _hook_sender(self) -> None:
        client = httpx.Client(timeout=10.0)
        try:
            while True:
                item = self._hook_q.get()
                try:
                    if item is None:
                        return
                    h, event, event_type, payload = item
                    self._check_payload(event_type, payload)
                    body = json.dumps(payload, indent=2).encode()
                    sig = hmac.new(h["secret"].encode(), body, hashlib.sha256).hexdigest()
                    delivery = str(uuid.uuid4())
                    headers = {
                        "Content-Type": "application/json", "User-Agent": f"Gitea/{VERSION}",
                        "X-Gitea-Delivery": delivery, "X-Gitea-Event": event, "X-Gitea-Event-Type": event_type,
                        "X-Gitea-Signature": sig, "X-Gogs-Delivery": delivery, "X-Gogs-Event": event,
                        "X-Gogs-Event-Type": event_type, "X-Gogs-Signature": sig,
                        "X-Hub-Signature-256": "sha256=" + sig, "X-GitHub-Delivery": delivery,
                        "X-GitHub-Event": event, "X-GitHub-Event-Type": event_type,
                    }
                    record = {"event": event, "event_type": event_type, "url": h["url"], "delivery": delivery}
                    try:
                        resp = client.post(h["url"], content=body, headers=headers)
                        record["status"] = resp.status_code
                    except httpx.HTTPError as exc:
                        record["error"] = str(exc)
                    self.deliveries.append(record)
                finally:
                    self._hook_q.task_done()
        finally:
            client.close()

    def _check_payload(self, event_type: str, payload: dict) -> None:
        if self.contract is None:
            return
        for key, ref in (("pull_request", "PullRequest"), ("repository", "Repository"), ("sender", "User"),
                         ("pusher", "User"), ("issue", "Issue"), ("comment", "Comment")):
            if payload.get(key) is not None:
                self.contract.check_definition(f"#/definitions/{ref}", payload[key], f"webhook {event_type}.{key}")
        for c in payload.get("commits") or []:
            self.contract.check_definition("#/definitions/PayloadCommit", c, f"webhook {event_type}.commits")

    def _payload_commit(self, r: dict, sha: str) -> dict:
        out = self._run(r, "show", "-s", "--format=%H%x00%an%x00%ae%x00%cn%x00%ce%x00%cI%x00%B", sha).stdout
        h, an, ae, cn, ce, when, msg = out.split("\0", 6)
        full = f"{r['owner']}/{r['name']}"
        return {"id": h, "message": msg, "url": f"{self.url}/{full}/commit/{h}",
                "author": {"name": an, "email": ae, "username": ""},
                "committer": {"name": cn, "email": ce, "username": ""}, "verification": None,
                "timestamp": when.strip(), "added": [], "removed": [], "modified": []}

    def _push_webhook(self, r: dict, user: str, ref: str, old: str, new: str) -> None:
        commits = []
        if new != ZERO:
            rng = new if old == ZERO else f"{old}..{new}"
            shas = self._run(r, "rev-list", "--max-count=20", rng, check=False).stdout.split()
            commits = [self._payload_commit(r, s) for s in shas]
        u = self._user_json(self.users[user.lower()])
        full = f"{r['owner']}/{r['name']}"
        payload = {
            "ref": ref, "before": old, "after": new, "compare_url": f"{self.url}/{full}/compare/{old[:10]}...{new[:10]}",
            "commits": commits, "total_commits": len(commits), "head_commit": commits[0] if commits else None,
            "repository": self._repo_json(r, user), "pusher": u, "sender": u,
        }
        self._deliver(r, "push", "push", payload)

    def _pr_webhook(self, r: dict, i: dict, action: str, sender: str, event_type: str = "pull_request",
                    review: dict | None = None) -> None:
        payload = {
            "action": action, "number": i["number"], "pull_request": self._pr_json(r, i, sender),
            "requested_reviewer": None, "repository": self._repo_json(r, sender),
            "sender": self._user_json(self.users[sender.lower()]), "commit_id": "", "review": review,
        }
        event = {"pull_request_review_approved": "pull_request_approved",
                 "pull_request_review_rejected": "pull_request_rejected",
                 "pull_request_review_comment": "pull_request_comment"}.get(event_type, "pull_request")
        self._deliver(r, event, event_type, payload)

    def _comment_webhook(self, r: dict, i: dict, c: dict, sender: str) -> None:
        payload = {
            "action": "created", "issue": self._issue_json(r, i),
            "pull_request": self._pr_json(r, i, sender) if i["is_pull"] else None,
            "comment": self._comment_json(r, i, c), "repository": self._repo_json(r, sender),
            "sender": self._user_json(self.users[sender.lower()]), "is_pull": i["is_pull"],
        }
        self._deliver(r, "issue_comment", "pull_request_comment" if i["is_pull"] else "issue_comment", payload)
