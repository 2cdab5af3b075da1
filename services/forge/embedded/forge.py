"""EmbeddedForge: the Forge protocol's calls (setup, users, the issue, PRs,
events; one module, a little over 400 lines, because every call takes the same
lock and applies the same rules) and the rules only this forge applies itself, because no server does
it for it: which merges are allowed, what a push to a PR's branch means, the
one lock every call takes. git runs in `git.py`, state lives in `store.py`,
hooks are `hooks.py` + `receive_hook.py`; the rules both forges share (texts,
notify) are `services/forge/rules.py`. The package docstring has the design."""

from __future__ import annotations

import threading
from pathlib import Path

from agensh_ray.errors import ForgeError, MergeConflict
from agensh_ray.models import Comment, ForgeEvent, Issue, PullRequest, Review, ReviewVerdict, now_us
from agensh_ray.services.forge import rules
from agensh_ray.services.forge.embedded import tokens
from agensh_ray.services.forge.embedded.git import ForgeGit, MergeFailed
from agensh_ray.services.forge.embedded.hooks import HookLog, PushLimits, install_hooks
from agensh_ray.services.forge.embedded.store import ForgeStore
from agensh_ray.services.forge.githttp import GitHTTPServer
from agensh_ray.services.forge.rules import ADMINS, PROTECTED_BRANCH

REPO_NAME = "repo.git"
PROTECTION_MESSAGE = "main is protected: push a branch, open a PR (pr_create) and merge it (pr_merge)"

PORT_FILE = "http.port"  # the git HTTP server's port: a restarted forge listens there again (clones' URLs)


class EmbeddedForge:
    """The Forge protocol on one machine: a bare repo, git smart HTTP, PRs, events."""

    def __init__(self, root: Path, host: str = "127.0.0.1", port: int = 0, token_key: bytes | str | None = None,
                 limits: PushLimits | None = None):
        """`token_key`: what the users' tokens are made from (tokens.py; None: a random key, so tokens do
        not outlive this process); `limits`: per push and per file (PushLimits' defaults). `port` 0: the
        port of PORT_FILE if any, else a free one."""
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        if port == 0 and (self.root / PORT_FILE).is_file():
            port = int((self.root / PORT_FILE).read_text() or 0)
        self.repo = self.root / REPO_NAME
        self.host = host
        self._lock = threading.RLock()
        self.limits = limits or PushLimits()
        self.git = ForgeGit(self.root, self.repo)
        self.store = ForgeStore(self.root)
        self.credentials = tokens.Credentials(self.store, token_key)
        self.hooks = HookLog(self.root / "hook-events.jsonl", self.store.hook_end)
        if self.git.initialized():
            self._install_hooks()
        self._http = GitHTTPServer(
            self.root,
            self._authenticate,
            host=host,
            port=port,
            repos=(REPO_NAME,),
            on_receive_pack=self._on_push,
            max_push_bytes=self.limits.max_push_bytes,
            on_push_refused=self._on_push_refused,
        )

    # ================================================================ lifecycle

    def start(self) -> None:
        """Start the git HTTP server in a daemon thread (idempotent); remember its port (PORT_FILE)."""
        self._http.start()
        (self.root / PORT_FILE).write_text(f"{self._http.port}\n")

    def close(self) -> None:
        """Stop the HTTP server and close the logs (idempotent). State is already on disk."""
        self._http.close()
        self.store.close()

    def __enter__(self) -> "EmbeddedForge":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def url(self) -> str:
        if not self._http.running:
            raise ForgeError("the forge's HTTP server is not running: call start() first")
        return self._http.url

    @property
    def port(self) -> int:
        return self._http.port

    # ==================================================================== setup

    def init_repo(self, starter_dir: Path, title: str, body: str, author: str = "admin") -> None:
        """Create repo.git seeded with starter_dir's files and issue #1; reload if it exists."""
        with self._lock:
            if self.git.initialized():
                self._install_hooks()
                if not self.store.issues:
                    self._create_issue(title, body, author)
                return
            starter = Path(starter_dir)
            if not starter.is_dir():
                raise ForgeError(f"starter directory {starter} does not exist or is not a directory")
            self.git.create(starter, author)
            self._install_hooks()
            self._create_issue(title, body, author)

    def _install_hooks(self) -> None:
        install_hooks(self.repo, self.hooks.path, PROTECTED_BRANCH, PROTECTION_MESSAGE, list(ADMINS), self.limits,
                      self.git.in_repo)
        self.git.retire_worktree(self.root / "work")

    def _create_issue(self, title: str, body: str, author: str) -> Issue:
        issue = Issue(number=self.store.next_number(), title=title, body=body, author=author)
        self.store.put_issue(issue)
        return issue

    def add_user(self, name: str) -> str:
        """Create a user (idempotent) and return its access token (tokens.Credentials.issue)."""
        with self._lock:
            return self.credentials.issue(name)

    def clone_url(self, user: str) -> str:
        with self._lock:
            known = user in self.store.users
            token = self.credentials.token(user)
        if not known:
            raise ForgeError(f"unknown user {user!r}: create it with add_user({user!r}) first")
        if token is None:
            raise ForgeError(
                f"the forge keeps only a hash of {user}'s token and was restarted without the key that made it: "
                f"call add_user({user!r}) to issue a new token"
            )
        return f"{self.url.replace('http://', f'http://{user}:{token}@', 1)}/{REPO_NAME}"

    def _authenticate(self, user: str, token: str) -> bool:
        return self.credentials.verify(user, token)

    # =================================================================== issues

    def issue_view(self, number: int) -> Issue:
        with self._lock:
            self._ingest_hooks()
            issue = self.store.issues.get(number)
            if issue is None:
                if number in self.store.prs:
                    raise rules.a_pr_not_an_issue(number)
                known = ", ".join(f"#{n}" for n in sorted(self.store.issues)) or "none"
                raise ForgeError(f"issue #{number} not found (issues: {known})")
            return issue.model_copy(deep=True)

    # ====================================================================== PRs

    def pr_create(self, author: str, head: str, title: str, body: str = "", base: str = "main") -> PullRequest:
        with self._lock:
            self._ingest_hooks()
            self._require_initialized()
            if not author:
                raise ForgeError("pr_create needs an author (your worker id)")
            rules.check_title(title)
            rules.check_text("body", body)
            head = rules.branch_name(head, "head", well_formed=self.git.well_formed_branch)
            base = rules.branch_name(base, "base", well_formed=self.git.well_formed_branch)
            base_sha = self.git.rev(f"refs/heads/{base}")
            if base_sha is None:
                raise ForgeError(f"base branch {base} not found on the forge: PRs target {PROTECTED_BRANCH}")
            head_sha = self.git.rev(f"refs/heads/{head}")
            if head_sha is None and head.startswith("origin/"):
                stripped = head[len("origin/"):]
                if self.git.rev(f"refs/heads/{stripped}") is not None:
                    head, head_sha = stripped, self.git.rev(f"refs/heads/{stripped}")
            if head_sha is None:
                raise rules.branch_not_pushed(head)
            rules.check_head_is_not_base(head, base)
            if author not in ADMINS:
                rules.check_own_head(author, head)
            for pr in self.store.prs.values():
                if pr.state == "open" and pr.head == head and pr.base == base:
                    raise rules.already_open(f"PR #{pr.number}", head, base)
            if self.git.is_ancestor(head_sha, base_sha):
                raise rules.no_new_commits(head, base)
            pr = PullRequest(
                number=self.store.next_number(),
                title=title.strip(),
                body=body or "",
                author=author,
                head=head,
                base=base,
                created_ts=now_us(),
                files=self.git.changed_files(base_sha, head_sha),
            )
            self.store.put_pr(pr)
            self._emit(pr, "pr_opened", author, pr.title, body)
            return pr.model_copy(deep=True)

    def pr_list(self, state: str = "open") -> list[PullRequest]:
        rules.check_pr_state(state)
        with self._lock:
            self._ingest_hooks()
            prs = [p for _, p in sorted(self.store.prs.items()) if state == "all" or p.state == state]
            return [p.model_copy(deep=True) for p in prs]

    def pr_view(self, number: int, with_diff: bool = True) -> PullRequest:
        with self._lock:
            self._ingest_hooks()
            pr = self._get_pr(number).model_copy(deep=True)
        # Reading the repository needs no lock: refs are read atomically by git.
        if pr.state == "merged" and pr.merge_commit:
            if with_diff:
                pr.diff = self.git.diff(f"{pr.merge_commit}^1", pr.merge_commit)
            return pr
        head_sha = self.git.rev(f"refs/heads/{pr.head}")
        base_sha = self.git.rev(f"refs/heads/{pr.base}")
        if head_sha is None or base_sha is None:
            if with_diff:
                pr.diff = ""
            return pr
        pr.files = self.git.changed_files(base_sha, head_sha)
        if with_diff:
            pr.diff = self.git.diff(f"{base_sha}...{head_sha}")
        return pr

    def pr_review(self, number: int, reviewer: str, verdict: ReviewVerdict, body: str = "") -> PullRequest:
        rules.check_verdict(verdict)
        rules.check_text("review", body)
        if not reviewer:
            raise ForgeError("pr_review needs a reviewer (your worker id)")
        with self._lock:
            self._ingest_hooks()
            pr = self._get_pr(number)
            rules.check_reviewable(number, pr.state)
            rules.check_not_own_review(number, reviewer, pr.author, verdict)
            pr.reviews.append(Review(reviewer=reviewer, verdict=verdict, body=body or "", ts=now_us()))
            self.store.put_pr(pr)
            self._emit(pr, "pr_reviewed", reviewer, rules.review_detail(verdict, body), body)
            return pr.model_copy(deep=True)

    def pr_comment(self, number: int, author: str, body: str) -> PullRequest:
        if not author:
            raise ForgeError("pr_comment needs an author (your worker id)")
        rules.check_comment(body)
        with self._lock:
            self._ingest_hooks()
            pr = self._get_pr(number)
            pr.comments.append(Comment(author=author, body=body, ts=now_us()))
            self.store.put_pr(pr)
            self._emit(pr, "pr_commented", author, body, body)
            return pr.model_copy(deep=True)

    def pr_close(self, number: int, by: str) -> PullRequest:
        if not by:
            raise ForgeError("pr_close needs `by` (your worker id)")
        with self._lock:
            self._ingest_hooks()
            pr = self._get_pr(number)
            if pr.state != "open":
                raise ForgeError(f"PR #{number} is already {pr.state}{self._by(pr)}: nothing to close")
            pr.state = "closed"
            pr.closed_by = by
            self.store.put_pr(pr)
            self._emit(pr, "pr_closed", by, pr.title)
            return pr.model_copy(deep=True)

    def pr_merge(self, number: int, merger: str) -> PullRequest:
        """Merge the PR's head into its base: a merge commit (like `git merge --no-ff`) made in the object
        store, then the base moved by compare-and-swap. A merge that fails leaves nothing behind, is
        reported on the PR (`merge_failed`, to its author) and in the ForgeError."""
        if not merger:
            raise ForgeError("pr_merge needs a merger (your worker id)")
        with self._lock:
            self._ingest_hooks()
            pr = self._get_pr(number)
            if pr.state != "open":
                raise ForgeError(f"PR #{number} is {pr.state}{self._by(pr)}: only open PRs can be merged")
            head_sha = self.git.rev(f"refs/heads/{pr.head}")
            if head_sha is None:
                raise ForgeError(
                    f"branch {pr.head} of PR #{number} no longer exists on the forge: "
                    f"push it again (git push origin HEAD:refs/heads/{pr.head}), then merge"
                )
            base_ref = f"refs/heads/{pr.base}"
            base_sha = self.git.rev(base_ref)
            if base_sha is None:
                raise ForgeError(f"base branch {pr.base} of PR #{number} no longer exists on the forge")
            if self.git.is_ancestor(head_sha, base_sha):
                raise ForgeError(
                    f"nothing to merge: every commit of {pr.head} is already on {pr.base}. "
                    f"If you have more work, commit and push it to {pr.head}; otherwise close PR #{number} (pr_close)"
                )
            files = self.git.changed_files(base_sha, head_sha)
            try:
                new_sha = self._merge_commit(pr, merger, base_sha, head_sha)
                moved = self.git.move_ref(base_ref, new_sha, base_sha, f"forge: merge PR #{number} by {merger}")
            except MergeFailed as exc:
                reason = f"merging PR #{number} failed: {exc}"
                self._emit(pr, "merge_failed", merger, reason)
                raise ForgeError(
                    f"{reason}. Nothing was merged and the forge is fine: other PRs still merge. "
                    f"Fix the branch {pr.head} (push to it), then call pr_merge again"
                ) from None
            if not moved:
                raise ForgeError(f"{pr.base} moved while PR #{number} was merging: call pr_merge again")
            pr.state = "merged"
            pr.merged_by = merger
            pr.merged_ts = now_us()
            pr.merge_commit = new_sha
            pr.files = files
            self.store.put_pr(pr)
            self._emit(pr, "pr_merged", merger, rules.merged_detail(pr.head, pr.base, new_sha))
            return pr.model_copy(deep=True)

    def _merge_commit(self, pr: PullRequest, merger: str, base_sha: str, head_sha: str) -> str:
        """The merge commit of head into base, made without a worktree (MergeConflict if git stops on a
        conflict, MergeFailed if git cannot merge or the result has a path the forge refuses)."""
        tree, conflicted = self.git.merge_tree(base_sha, head_sha)
        if tree is None:
            self._emit(pr, "merge_conflict", merger, rules.conflict_detail(conflicted))
            raise MergeConflict(pr.number, conflicted)
        problems = self.git.tree_problems(base_sha, tree, self.limits.max_file_bytes)
        if problems:
            raise MergeFailed(f"the merged tree has content the forge refuses: {problems[0]}")
        message = f"Merge pull request #{pr.number} from {pr.head}\n\n{pr.title}\n"
        return self.git.commit_tree(tree, [base_sha, head_sha], message, merger)

    # =================================================================== events

    def events_since(self, cursor: int, limit: int = 1000) -> list[ForgeEvent]:
        rules.check_cursor(cursor)
        if limit <= 0:
            return []
        with self._lock:
            self._ingest_hooks()
            return self.store.since(cursor, limit)

    def main_head(self) -> str:
        sha = self.git.rev(f"refs/heads/{PROTECTED_BRANCH}")
        if sha is None:
            raise ForgeError("the forge has no repository yet: call init_repo first")
        return sha

    # ================================================================= internals

    def _get_pr(self, number: int) -> PullRequest:
        pr = self.store.prs.get(number)
        if pr is None:
            if number in self.store.issues:
                raise rules.an_issue_not_a_pr(number)
            raise rules.pr_not_found(number, (n for n, p in sorted(self.store.prs.items()) if p.state == "open"))
        return pr

    @staticmethod
    def _by(pr: PullRequest) -> str:
        who = pr.merged_by if pr.state == "merged" else pr.closed_by
        return f" (by {who})" if who else ""

    def _emit(self, pr: PullRequest, kind: str, actor: str, detail: str, body: str | None = "",
              ref: str | None = None, **kw) -> ForgeEvent:
        """An event about `pr`, notifying whom it concerns plus the known users @mentioned in `body`."""
        concerned = rules.concerned(kind, actor, pr.author, [r.reviewer for r in pr.reviews])
        notify = rules.notify_list(actor, concerned, (m for m in rules.mentions(body) if m in self.store.users))
        return self.store.emit(kind, actor, pr=pr.number, ref=ref or pr.head, detail=detail, notify=notify, **kw)

    def _require_initialized(self) -> None:
        if not self.git.initialized():
            raise ForgeError("the forge has no repository yet: call init_repo first")

    # ------------------------------------------------------------ hook events

    def _on_push(self, user: str) -> None:
        with self._lock:
            self._ingest_hooks()

    def _on_push_refused(self, user: str, updates: list[tuple[str, str, str]], reason: str) -> None:
        """A push the HTTP server or git refused before the hooks ran (size, fsck): push_rejected events."""
        with self._lock:
            self._ingest_hooks()
            for _old, _new, ref in updates:
                self.store.emit("push_rejected", user, ref=ref, detail=reason)

    def _ingest_hooks(self) -> None:
        """Fold new lines of hook-events.jsonl into the event log (caller holds the lock)."""
        self.hooks.fold(self._hook_event)

    def _hook_event(self, rec: dict, end: int) -> None:
        kind, actor, ref = rec.get("kind"), rec.get("actor") or "unknown", rec.get("ref") or ""
        old, new = rec.get("old") or "", rec.get("new") or ""
        if kind == "push_rejected":
            self.store.emit("push_rejected", actor, ref=ref, detail=rec.get("reason") or PROTECTION_MESSAGE,
                            ts=rec.get("ts"), hook_end=end)
            return
        if kind != "push":
            return
        detail = rules.push_detail(ref, old, new)
        branch = rules.branch_of(ref)
        for pr in self.store.prs.values():
            if branch is not None and pr.state == "open" and pr.head == branch:
                base_sha = self.git.rev(f"refs/heads/{pr.base}")
                if base_sha and not set(new) <= {"0"}:
                    files = self.git.changed_files(base_sha, new)
                    if files != pr.files:
                        pr.files = files
                        self.store.put_pr(pr)
                self._emit(pr, "push", actor, detail, ref=ref, ts=rec.get("ts"), hook_end=end)
                return
        self.store.emit("push", actor, ref=ref, detail=detail, ts=rec.get("ts"), hook_end=end)
