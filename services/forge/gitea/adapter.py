"""The Forge protocol on a Gitea server (REST API v1 through `client.py`).

Every call is made with the token of the worker it is for (read from the
secrets file the bootstrap wrote), so Gitea's web interface shows who did
what; the run itself never holds the admin token. Workers push and fetch
straight to Gitea with `clone_url(user)`.

Semantics match the embedded forge, including its refusals and their
wording, with two Gitea-specific parts:

* **Merging.** Gitea decides mergeability asynchronously: right after a PR
  is opened or its head or base moves, a merge is refused with
  `405 Please try again later`. A conflicting PR gets the same 405 once the
  check is done (`mergeable: false`). So on a 405 the adapter looks at the
  PR: while Gitea is still checking, it polls with backoff (up to
  `merge_wait_s`) and retries; if the PR conflicts, it raises MergeConflict.
  A 409 (the merge itself hit a conflict: main moved between Gitea's check
  and the merge) is a conflict too.
* **Which files conflict.** Gitea's API does not say: `conflicts.py` asks
  real git on a bare mirror. If that fails, the agent still gets a clear
  ForgeError saying the PR conflicts with main and what to do.

Forge events come from Gitea's webhooks through the intake (`intake.py`,
`webhooks.py`) into a durable log that `events_since` reads; merge
conflicts, which Gitea sends no webhook for, are appended by the adapter.
The refusals and notify rules are shared with the embedded forge
(services/forge/rules.py).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

from agensh_ray.errors import ForgeError, GiteaAPIError, MergeConflict
from agensh_ray.models import Comment, ForgeEvent, Issue, PullRequest, Review, ReviewVerdict
from agensh_ray.services.forge import rules
from agensh_ray.services.forge.gitea.client import GiteaClient, gitea_ts
from agensh_ray.services.forge.gitea.conflicts import ConflictFinder
from agensh_ray.services.forge.gitea.intake import WebhookIntake
from agensh_ray.services.forge.gitea.webhooks import ForgeEventLog, GiteaWebhookMapper

_VERDICT_EVENT = {"approve": "APPROVED", "request_changes": "REQUEST_CHANGES", "comment": "COMMENT"}
_EVENT_VERDICT = {v: k for k, v in _VERDICT_EVENT.items()}


class GiteaForge:
    """See the module docstring. Build it with `from_secrets`; `start()` starts the intake."""

    def __init__(self, url: str, org: str, repo: str, users: dict[str, dict], state_dir: Path,
                 webhook_secret: str | None = None, intake_listen: str | None = None, merge_wait_s: float = 60.0,
                 trace_rejected=None):
        self.client = GiteaClient(url)
        self.url = self.client.url
        self.org, self.repo = org, repo
        self.users = users
        """worker name -> {login, token, ...}; "admin" is the run's own (non-admin) account."""
        self.state_dir = Path(state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.merge_wait_s = merge_wait_s
        self.events = ForgeEventLog(self.state_dir / "events.jsonl")
        self.login_to_worker = {u["login"]: name for name, u in users.items()}
        self.mapper = GiteaWebhookMapper(self.events, self.login_to_worker)
        self.intake: WebhookIntake | None = None
        if intake_listen:
            host, _, port = intake_listen.rpartition(":")
            self.intake = WebhookIntake(self.mapper, webhook_secret or "", host=host or "0.0.0.0", port=int(port),
                                        on_rejected=trace_rejected)
        self.conflicts = ConflictFinder(self.state_dir / "mirror.git", self._fetch_url)
        self._repo_path = f"/repos/{quote(org)}/{quote(repo)}"

    @classmethod
    def from_secrets(cls, secrets_file: Path, state_dir: Path, url: str | None = None,
                     intake_listen: str | None = None, **kw) -> "GiteaForge":
        data = json.loads(Path(secrets_file).read_text())
        g = data.get("gitea")
        if not g:
            raise ForgeError(f"{secrets_file} has no gitea section: run python -m agensh_ray.bootstrap --forge gitea")
        listen = intake_listen or g.get("intake_listen")
        if not listen and g.get("intake_url"):
            parts = urlsplit(g["intake_url"])
            listen = f"0.0.0.0:{parts.port or 80}"
        return cls(url or g["url"], g["org"], g["repo"], g["users"], state_dir, webhook_secret=g.get("webhook_secret"),
                   intake_listen=listen, **kw)

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> None:
        if self.intake is not None:
            self.intake.start()

    def close(self) -> None:
        if self.intake is not None:
            self.intake.close()
        self.events.close()
        self.client.close()

    # -------------------------------------------------------------------- users

    def _token(self, user: str) -> str:
        u = self.users.get(user)
        if u is None:
            known = ", ".join(sorted(self.users)[:20])
            raise ForgeError(f"unknown user {user!r} on Gitea (the bootstrap created: {known}); "
                             "rerun python -m agensh_ray.bootstrap with enough --workers")
        return u["token"]

    def _login(self, user: str) -> str:
        self._token(user)
        return self.users[user]["login"]

    def _worker(self, gitea_user: dict | None) -> str:
        login = (gitea_user or {}).get("login") or "unknown"
        return self.login_to_worker.get(login, login)

    def add_user(self, name: str) -> str:
        """Users are made by the bootstrap (the run holds no admin token): return the token it made."""
        return self._token(name)

    def clone_url(self, user: str) -> str:
        token = self._token(user)
        parts = urlsplit(self.url)
        netloc = f"{quote(self._login(user), safe='')}:{token}@{parts.netloc}"
        return urlunsplit((parts.scheme, netloc, f"{parts.path}/{self.org}/{self.repo}.git", "", ""))

    def _fetch_url(self) -> str:
        """A clone URL the conflict mirror fetches with (the run's account)."""
        return self.clone_url("admin" if "admin" in self.users else next(iter(self.users)))

    def init_repo(self, starter_dir: Path | None = None, title: str = "", body: str = "") -> None:
        """The bootstrap seeded the repository; check that it did."""
        admin = self._token("admin") if "admin" in self.users else next(iter(self.users.values()))["token"]
        try:
            repo = self.client.call("GET", self._repo_path, admin)
        except GiteaAPIError as exc:
            raise ForgeError(f"repository {self.org}/{self.repo} not found on {self.url} ({exc.status}): "
                             "run python -m agensh_ray.bootstrap --forge gitea first") from None
        if repo.get("empty"):
            raise ForgeError(f"{self.org}/{self.repo} is empty: rerun python -m agensh_ray.bootstrap")
        self.issue_view(1)

    # ------------------------------------------------------------------- reads

    @property
    def _reader(self) -> str:
        return self._token("admin") if "admin" in self.users else next(iter(self.users.values()))["token"]

    def issue_view(self, number: int) -> Issue:
        try:
            j = self.client.call("GET", f"{self._repo_path}/issues/{int(number)}", self._reader)
        except GiteaAPIError as exc:
            if exc.status == 404:
                raise ForgeError(f"issue #{number} not found") from None
            raise
        if j.get("pull_request"):
            raise rules.a_pr_not_an_issue(number)
        return Issue(number=j["number"], title=j["title"], body=j.get("body") or "", author=self._worker(j.get("user")),
                     state="closed" if j.get("state") == "closed" else "open")

    def _pr_json(self, number: int, token: str | None = None) -> dict:
        try:
            return self.client.call("GET", f"{self._repo_path}/pulls/{int(number)}", token or self._reader)
        except GiteaAPIError as exc:
            if exc.status != 404:
                raise
        try:
            self.client.call("GET", f"{self._repo_path}/issues/{int(number)}", self._reader)
        except GiteaAPIError:
            raise rules.pr_not_found(number, (p.number for p in self.pr_list("open"))) from None
        raise rules.an_issue_not_a_pr(number)

    def _to_pr(self, j: dict, reviews: list | None = None, comments: list | None = None,
               files: list[str] | None = None, diff: str | None = None) -> PullRequest:
        state = "merged" if j.get("merged") else ("closed" if j.get("state") == "closed" else "open")
        return PullRequest(
            number=j["number"], title=j.get("title") or "", body=j.get("body") or "",
            author=self._worker(j.get("user")), head=(j.get("head") or {}).get("ref") or "",
            base=(j.get("base") or {}).get("ref") or "main", state=state,
            created_ts=gitea_ts(j.get("created_at")) or 0, merged_ts=gitea_ts(j.get("merged_at")),
            merged_by=self._worker(j["merged_by"]) if j.get("merged_by") else None,
            closed_by=None, merge_commit=j.get("merge_commit_sha") if j.get("merged") else None,
            reviews=reviews or [], comments=comments or [], files=files or [], diff=diff,
        )

    def pr_list(self, state: str = "open") -> list[PullRequest]:
        rules.check_pr_state(state)
        api_state = {"open": "open", "merged": "closed", "closed": "closed", "all": "all"}[state]
        items = self.client.paged(f"{self._repo_path}/pulls", self._reader, {"state": api_state})
        prs = [self._to_pr(j) for j in items]
        if state == "merged":
            prs = [p for p in prs if p.state == "merged"]
        elif state == "closed":
            prs = [p for p in prs if p.state == "closed"]
        return sorted(prs, key=lambda p: p.number)

    def pr_view(self, number: int, with_diff: bool = True) -> PullRequest:
        j = self._pr_json(number)
        base = f"{self._repo_path}/pulls/{int(number)}"
        reviews = [
            Review(reviewer=self._worker(r.get("user")), verdict=_EVENT_VERDICT.get(r.get("state"), "comment"),
                   body=r.get("body") or "", ts=gitea_ts(r.get("submitted_at")) or 0)
            for r in self.client.paged(f"{base}/reviews", self._reader)
            if r.get("state") in _EVENT_VERDICT
        ]
        comments = [
            Comment(author=self._worker(c.get("user")), body=c.get("body") or "", ts=gitea_ts(c.get("created_at")) or 0)
            for c in self.client.call("GET", f"{self._repo_path}/issues/{int(number)}/comments", self._reader) or []
        ]
        files = sorted({f["filename"] for f in self.client.paged(f"{base}/files", self._reader)})
        diff = None
        if with_diff:
            diff = rules.truncate_diff(
                self.client.call("GET", f"{self._repo_path}/pulls/{int(number)}.diff", self._reader, text=True))
        return self._to_pr(j, reviews, comments, files, diff)

    def pr_author(self, number: int) -> str | None:
        """The author as the webhooks told it (no REST call), for the trace."""
        st = self.events.pr_state(number)
        return st["author"] if st else None

    def main_head(self) -> str:
        j = self.client.call("GET", f"{self._repo_path}/branches/main", self._reader)
        return j["commit"]["id"]

    def events_since(self, cursor: int, limit: int = 1000) -> list[ForgeEvent]:
        rules.check_cursor(cursor)
        return self.events.since(cursor, limit)

    # ------------------------------------------------------------------ writes

    def pr_create(self, author: str, head: str, title: str, body: str = "", base: str = "main") -> PullRequest:
        token = self._token(author)
        rules.check_title(title)
        rules.check_text("body", body)
        head = rules.branch_name(head, "head", strip_origin=True)
        base = rules.branch_name(base, "base", strip_origin=True)
        rules.check_head_is_not_base(head, base)
        if author not in rules.ADMINS:
            rules.check_own_head(author, head)
        try:
            j = self.client.call("POST", f"{self._repo_path}/pulls", token,
                                 {"head": head, "base": base, "title": title.strip(), "body": body or ""})
        except GiteaAPIError as exc:
            if exc.status == 409:
                existing = next((p for p in self.pr_list("open") if p.head == head and p.base == base), None)
                which = f"PR #{existing.number}" if existing else "a PR"
                raise rules.already_open(which, head, base) from None
            if exc.status == 404:
                raise rules.branch_not_pushed(head, missing=f"{head} (or {base})") from None
            if exc.status == 422 and "no changes" in exc.message.lower():
                raise rules.no_new_commits(head, base) from None
            raise ForgeError(f"opening the PR failed: Gitea said {exc.status} {exc.message}") from None
        return self._to_pr(j, files=[f["filename"] for f in
                                     self.client.paged(f"{self._repo_path}/pulls/{j['number']}/files", token)])

    def pr_review(self, number: int, reviewer: str, verdict: ReviewVerdict, body: str = "") -> PullRequest:
        rules.check_verdict(verdict)
        rules.check_text("review", body)
        token = self._token(reviewer)
        pr = self._pr_json(number)
        state = "merged" if pr.get("merged") else pr.get("state")
        rules.check_reviewable(number, state)
        rules.check_not_own_review(number, reviewer, self._worker(pr.get("user")), verdict)
        text = body or ("" if verdict == "approve" else f"{verdict.replace('_', ' ')} by {reviewer}")
        try:
            self.client.call("POST", f"{self._repo_path}/pulls/{int(number)}/reviews", token,
                             {"event": _VERDICT_EVENT[verdict], "body": text})
        except GiteaAPIError as exc:
            raise ForgeError(f"reviewing PR #{number} failed: Gitea said {exc.status} {exc.message}") from None
        return self.pr_view(number, with_diff=False)

    def pr_comment(self, number: int, author: str, body: str) -> PullRequest:
        token = self._token(author)
        rules.check_comment(body)
        self._pr_json(number)
        self.client.call("POST", f"{self._repo_path}/issues/{int(number)}/comments", token, {"body": body})
        return self.pr_view(number, with_diff=False)

    def pr_close(self, number: int, by: str) -> PullRequest:
        token = self._token(by)
        pr = self._pr_json(number)
        if pr.get("merged") or pr.get("state") != "open":
            state = "merged" if pr.get("merged") else "closed"
            raise ForgeError(f"PR #{number} is already {state}: nothing to close")
        j = self.client.call("PATCH", f"{self._repo_path}/pulls/{int(number)}", token, {"state": "closed"})
        out = self._to_pr(j)
        out.closed_by = by
        return out

    def pr_merge(self, number: int, merger: str) -> PullRequest:
        token = self._token(merger)
        pr = self._pr_json(number)
        if pr.get("merged"):
            raise ForgeError(f"PR #{number} is merged (by {self._worker(pr.get('merged_by'))}): "
                             "only open PRs can be merged")
        if pr.get("state") != "open":
            raise ForgeError(f"PR #{number} is closed: only open PRs can be merged")
        deadline = time.monotonic() + self.merge_wait_s
        delay = 0.1
        while True:
            try:
                self.client.call("POST", f"{self._repo_path}/pulls/{int(number)}/merge", token, {"do": "merge"})
                return self.pr_view(number, with_diff=False)
            except GiteaAPIError as exc:
                if exc.status == 409:
                    self._conflict(number, merger, pr, exc.message)
                if exc.status == 404:
                    raise ForgeError(f"PR #{number} is not open any more (closed or deleted)") from None
                if exc.status != 405:
                    self._failed(number, merger, pr, f"merging PR #{number} failed: Gitea said {exc.status} "
                                                     f"{exc.message}")
                message = exc.message
            # 405: mergeability unknown yet, or the PR conflicts, or a real refusal.
            pr = self._pr_json(number)
            if pr.get("merged"):
                return self._to_pr(pr)
            if "try again later" not in message.lower():
                self._failed(number, merger, pr, f"Gitea refused to merge PR #{number}: {message}")
            files = self.conflicts.files(pr)
            if files:
                self._conflict(number, merger, pr, message, files)
            if time.monotonic() >= deadline:
                raise ForgeError(f"Gitea is still checking whether PR #{number} can merge after "
                                 f"{self.merge_wait_s:.0f}s: call pr_merge again in a minute")
            time.sleep(delay)
            delay = min(delay * 2, 2.0)

    def _failed(self, number: int, merger: str, pr: dict, reason: str) -> None:
        """A merge that failed for another reason than a conflict: reported on the PR (`merge_failed`, to its
        author, as the embedded forge does), then raised."""
        author = self._worker(pr.get("user"))
        head = (pr.get("head") or {}).get("ref")
        self.events.append("merge_failed", merger, pr=number, ref=head, detail=reason,
                           notify=rules.notify_list(merger, rules.concerned("merge_failed", merger, author, ())),
                           pr_author=author, head=head)
        raise ForgeError(f"{reason}. Nothing was merged; fix the branch {head} or ask why on the PR, then call "
                         "pr_merge again")

    def _conflict(self, number: int, merger: str, pr: dict, message: str, files: list[str] | None = None) -> None:
        if files is None:
            files = self.conflicts.files(pr)
        author = self._worker(pr.get("user"))
        head = (pr.get("head") or {}).get("ref")
        mentioned = (m for m in rules.mentions(pr.get("body")) if m in self.users)
        notify = rules.notify_list(merger, rules.concerned("merge_conflict", merger, author, ()), mentioned)
        self.events.append("merge_conflict", merger, pr=number, ref=head, detail=rules.conflict_detail(files),
                           notify=notify, pr_author=author, head=head)
        if files:
            raise MergeConflict(number, files)
        raise ForgeError(
            f"PR #{number} conflicts with main (Gitea: {message or 'merge conflict'}). Merge main into your "
            "branch, resolve the conflicts, push, then merge again."
        )
