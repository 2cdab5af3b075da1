"""The embedded forge: one bare git repository served over smart HTTP, with
pull requests, an issue and an event log, all on this machine.

Layout under `root`:

    repo.git/            the bare repository (default branch main), served at /repo.git
    repo.git/hooks/      pre-receive (protects main) and post-receive (records pushes)
    work/                the forge's internal worktree (a `git worktree` of repo.git)
    state.jsonl          users, the issue and PR snapshots (last line per key wins)
    events.jsonl         the ForgeEvent log (one event per line, seq from 1)
    hook-events.jsonl    what the hooks saw (pushes, rejected pushes), folded into
                         events.jsonl by the forge

Design choices:

* **How the forge's own merges get past the protection of main.** The
  pre-receive hook rejects every update of `refs/heads/main` that arrives
  through `git receive-pack`, i.e. every push. The forge never pushes: its
  internal worktree is a `git worktree` of the bare repository itself, so the
  merge commit it makes is already in the bare repository's object store and
  the forge moves main with `git update-ref refs/heads/main NEW OLD` (a
  compare-and-swap; update-ref runs no receive hooks). No fetch, no push, no
  secret bypass a worker could use. (The hook also lets through pushes whose
  *server-side* environment has AGENSH_FORGE_INTERNAL=1, for an operator
  pushing by path on this machine; the HTTP server never sets it.)
* **Push events.** The post-receive hook appends one JSON line per updated ref
  (user = REMOTE_USER, which the HTTP server sets from the Basic-auth
  login) to hook-events.jsonl; the pre-receive hook does the same for a
  rejected push to main. The forge folds new lines into its event log at the
  end of every push (callback from the HTTP server) and at the start of every
  API call, so a push is always in the log before anything that follows it.
  The byte offset reached in hook-events.jsonl is stored with each folded
  event, so a restart neither loses nor repeats one.
* **Nothing to merge.** Merging a PR whose head has no commits beyond its base
  raises ForgeError (it says to push the work or close the PR) instead of
  recording an empty merge that would look like landed work.
* **Durability.** state.jsonl and events.jsonl are appended and flushed
  (written to the OS) before a call returns, which survives a crash or restart
  of the forge's process; they are not fsync'ed (power loss may lose the
  last lines). A torn last line is cut off when loading.
* **Notify.** pr_opened: nobody in particular (plus @mentions). Review,
  comment, merge, close, merge_conflict by someone other than the author: the
  author. A comment by the author (a reply): the PR's reviewers. A push to the
  head branch of an open PR: its reviewers. Always plus the known users
  @mentioned in the body, never the actor.
* **Reviews.** Like Gitea, an author cannot approve or request changes on
  their own PR (pr_comment is for that); reviews need an open PR, comments
  do not.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import re
import secrets
import shlex
import shutil
import subprocess
import sys
import threading
from bisect import bisect_right
from pathlib import Path
from typing import Any, Iterable, get_args

from agensh_ray.applog import AppendLog, read_new_lines
from agensh_ray.models import (
    Comment,
    ForgeError,
    ForgeEvent,
    Issue,
    MergeConflict,
    PullRequest,
    Review,
    ReviewVerdict,
    now_us,
)
from agensh_ray.services.forge.githttp import GitHTTPServer, git_exec_path

log = logging.getLogger(__name__)

REPO_NAME = "repo.git"
PROTECTED_BRANCH = "main"
PROTECTION_MESSAGE = "main is protected: push a branch, open a PR (pr_create) and merge it (pr_merge)"
FORGE_NAME = "agensh-forge"
FORGE_EMAIL = "forge@agensh.invalid"
MAX_DIFF_CHARS = 2_000_000
_USER_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_MENTION_RE = re.compile(r"(?<![\w@/])@([A-Za-z0-9][A-Za-z0-9_.-]*)")
_VERDICTS = set(get_args(ReviewVerdict))
_PR_STATES = ("open", "merged", "closed", "all")

# The hook program (run by git receive-pack as pre-receive / post-receive).
# argv: kind, path of hook-events.jsonl. stdin: "<old> <new> <ref>" lines.
_HOOK_PROGRAM = r'''
import json, os, sys, time

kind, log_path = sys.argv[1], sys.argv[2]
PROTECTED = ("refs/heads/main",)
MESSAGE = %(message)r
user = os.environ.get("REMOTE_USER") or "local"
updates = [line.split() for line in sys.stdin.read().splitlines() if len(line.split()) == 3]


def record(kind, refs):
    ts = time.time_ns() // 1000
    data = "".join(
        json.dumps({"kind": kind, "actor": user, "old": old, "new": new, "ref": ref, "ts": ts}) + "\n"
        for old, new, ref in refs
    ).encode()
    if not data:
        return
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)  # one O_APPEND write: concurrent pushes do not interleave
    finally:
        os.close(fd)


if kind == "pre-receive":
    if os.environ.get("AGENSH_FORGE_INTERNAL") == "1":
        sys.exit(0)
    bad = [u for u in updates if u[2] in PROTECTED]
    if bad:
        sys.stderr.write(MESSAGE + "\n")
        sys.stderr.write(
            "Nothing from this push was accepted. Push only your branch, e.g. "
            "`git push origin HEAD:refs/heads/<your-branch>`.\n"
        )
        record("push_rejected", bad)
        sys.exit(1)
elif kind == "post-receive":
    record("push", updates)
'''


def _mentions(text: str | None) -> list[str]:
    if not text:
        return []
    out = []
    for m in _MENTION_RE.finditer(text):
        name = m.group(1).rstrip(".-")
        if name and name not in out:
            out.append(name)
    return out


def _seq(e: ForgeEvent) -> int:
    return e.seq


def _short(sha: str | None) -> str:
    return (sha or "")[:12]


class EmbeddedForge:
    """The Forge protocol on one machine: a bare repo, git smart HTTP, PRs, events."""

    def __init__(self, root: Path, host: str = "127.0.0.1", port: int = 0):
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.repo = self.root / REPO_NAME
        self.work = self.root / "work"
        self._state_path = self.root / "state.jsonl"
        self._events_path = self.root / "events.jsonl"
        self._hook_log = self.root / "hook-events.jsonl"
        self.host = host
        self._lock = threading.RLock()
        self._users: dict[str, str] = {}
        self._issues: dict[int, Issue] = {}
        self._prs: dict[int, PullRequest] = {}
        self._events: list[ForgeEvent] = []
        self._hook_offset = 0
        self._worktree_ok = False
        self._git = git_exec_path()
        self._env = self._make_env()
        self._load()
        if self._initialized():
            self._install_hooks()
        self._http = GitHTTPServer(
            self.root,
            self._authenticate,
            host=host,
            port=port,
            repos=(REPO_NAME,),
            on_receive_pack=self._on_push,
        )

    # ================================================================ lifecycle

    def start(self) -> None:
        """Start the git HTTP server in a daemon thread (idempotent)."""
        self._http.start()

    def close(self) -> None:
        """Stop the HTTP server and close the logs (idempotent). State is already on disk."""
        self._http.close()
        self._state.close()
        self._event_log.close()

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
            if self._initialized():
                self._install_hooks()
                if not self._issues:
                    self._create_issue(title, body, author)
                return
            starter = Path(starter_dir)
            if not starter.is_dir():
                raise ForgeError(f"starter directory {starter} does not exist or is not a directory")
            if self.repo.exists():  # a half-made repository from an interrupted init
                shutil.rmtree(self.repo)
            shutil.rmtree(self.work, ignore_errors=True)
            self._run("init", "--bare", "--quiet", "--initial-branch", PROTECTED_BRANCH, str(self.repo))
            for key, value in (
                ("http.receivepack", "true"),
                ("http.uploadpack", "true"),
                ("core.logAllRefUpdates", "true"),
                ("uploadpack.allowFilter", "true"),
                ("receive.advertisePushOptions", "false"),
            ):
                self._git_repo("config", key, value)
            # The seed commit: real git, with the starter directory as the work
            # tree and a throw-away index (the bare repo has no worktree yet).
            index = self.root / ".seed-index"
            index.unlink(missing_ok=True)
            seed = {"GIT_INDEX_FILE": str(index), **self._identity(author)}
            try:
                self._git_repo("--work-tree", str(starter.resolve()), "add", "-A", ".", env=seed, cwd=starter)
                tree = self._git_repo("write-tree", env=seed).stdout.strip()
                commit = self._git_repo("commit-tree", tree, "-m", "Initial commit", env=seed).stdout.strip()
            finally:
                index.unlink(missing_ok=True)
            self._git_repo("update-ref", "-m", "forge: initial commit", f"refs/heads/{PROTECTED_BRANCH}", commit, "")
            self._install_hooks()
            self._ensure_worktree()
            self._create_issue(title, body, author)

    def _create_issue(self, title: str, body: str, author: str) -> Issue:
        issue = Issue(number=self._next_number(), title=title, body=body, author=author)
        self._issues[issue.number] = issue
        self._persist("issue", issue.model_dump())
        return issue

    def add_user(self, name: str) -> str:
        """Create a user (idempotent) and return its access token."""
        if not isinstance(name, str) or not _USER_RE.match(name):
            raise ForgeError(
                f"bad user name {name!r}: use 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit"
            )
        with self._lock:
            token = self._users.get(name)
            if token is None:
                token = secrets.token_hex(20)
                self._users[name] = token
                self._persist("user", {"name": name, "token": token})
            return token

    def clone_url(self, user: str) -> str:
        with self._lock:
            token = self._users.get(user)
        if token is None:
            raise ForgeError(f"unknown user {user!r}: create it with add_user({user!r}) first")
        return f"{self.url.replace('http://', f'http://{user}:{token}@', 1)}/{REPO_NAME}"

    def _authenticate(self, user: str, token: str) -> bool:
        expected = self._users.get(user)
        return expected is not None and hmac.compare_digest(expected.encode(), token.encode())

    # =================================================================== issues

    def issue_view(self, number: int) -> Issue:
        with self._lock:
            self._ingest_hooks()
            issue = self._issues.get(number)
            if issue is None:
                if number in self._prs:
                    raise ForgeError(f"#{number} is a pull request, not an issue: use pr_view({number})")
                known = ", ".join(f"#{n}" for n in sorted(self._issues)) or "none"
                raise ForgeError(f"issue #{number} not found (issues: {known})")
            return issue.model_copy(deep=True)

    # ====================================================================== PRs

    def pr_create(self, author: str, head: str, title: str, body: str = "", base: str = "main") -> PullRequest:
        with self._lock:
            self._ingest_hooks()
            self._require_initialized()
            if not author:
                raise ForgeError("pr_create needs an author (your worker id)")
            if not title or not title.strip():
                raise ForgeError("give the PR a title that says what it changes")
            head = self._branch_name(head, "head")
            base = self._branch_name(base, "base")
            base_sha = self._rev(f"refs/heads/{base}")
            if base_sha is None:
                raise ForgeError(f"base branch {base} not found on the forge: PRs target {PROTECTED_BRANCH}")
            head_sha = self._rev(f"refs/heads/{head}")
            if head_sha is None and head.startswith("origin/"):
                stripped = head[len("origin/"):]
                if self._rev(f"refs/heads/{stripped}") is not None:
                    head, head_sha = stripped, self._rev(f"refs/heads/{stripped}")
            if head_sha is None:
                raise ForgeError(
                    f"branch {head} not found on the forge: push it first "
                    f"(git push origin HEAD:refs/heads/{head}), then open the PR"
                )
            if head == base:
                raise ForgeError(
                    f"head and base are both {base}: commit on a branch of your own, push it "
                    "(git push origin HEAD:refs/heads/<branch>) and open the PR from that branch"
                )
            for pr in self._prs.values():
                if pr.state == "open" and pr.head == head and pr.base == base:
                    raise ForgeError(
                        f"PR #{pr.number} is already open for {head} -> {base}: push more commits to "
                        f"{head} (the PR picks them up) instead of opening another PR"
                    )
            if self._is_ancestor(head_sha, base_sha):
                raise ForgeError(
                    f"branch {head} has no commits that are not already on {base}: "
                    "commit your work, push it to the branch, then open the PR"
                )
            pr = PullRequest(
                number=self._next_number(),
                title=title.strip(),
                body=body or "",
                author=author,
                head=head,
                base=base,
                created_ts=now_us(),
                files=self._changed_files(base_sha, head_sha),
            )
            self._prs[pr.number] = pr
            self._persist("pr", self._pr_record(pr))
            self._emit("pr_opened", author, pr=pr.number, ref=head, detail=pr.title, notify=self._notify(pr, author, body, []))
            return pr.model_copy(deep=True)

    def pr_list(self, state: str = "open") -> list[PullRequest]:
        if state not in _PR_STATES:
            raise ForgeError(f"bad state {state!r}: use one of {', '.join(_PR_STATES)}")
        with self._lock:
            self._ingest_hooks()
            prs = [p for _, p in sorted(self._prs.items()) if state == "all" or p.state == state]
            return [p.model_copy(deep=True) for p in prs]

    def pr_view(self, number: int, with_diff: bool = True) -> PullRequest:
        with self._lock:
            self._ingest_hooks()
            pr = self._get_pr(number).model_copy(deep=True)
        # Reading the repository needs no lock: refs are read atomically by git.
        if pr.state == "merged" and pr.merge_commit:
            if with_diff:
                pr.diff = self._diff(f"{pr.merge_commit}^1", pr.merge_commit)
            return pr
        head_sha = self._rev(f"refs/heads/{pr.head}")
        base_sha = self._rev(f"refs/heads/{pr.base}")
        if head_sha is None or base_sha is None:
            if with_diff:
                pr.diff = ""
            return pr
        pr.files = self._changed_files(base_sha, head_sha)
        if with_diff:
            pr.diff = self._diff(f"{base_sha}...{head_sha}")
        return pr

    def pr_review(self, number: int, reviewer: str, verdict: ReviewVerdict, body: str = "") -> PullRequest:
        if verdict not in _VERDICTS:
            raise ForgeError(f"bad verdict {verdict!r}: use one of {', '.join(sorted(_VERDICTS))}")
        if not reviewer:
            raise ForgeError("pr_review needs a reviewer (your worker id)")
        with self._lock:
            self._ingest_hooks()
            pr = self._get_pr(number)
            if pr.state != "open":
                raise ForgeError(
                    f"PR #{number} is {pr.state}: only open PRs can be reviewed (use pr_comment to remark on it)"
                )
            if reviewer == pr.author and verdict != "comment":
                raise ForgeError(
                    f"you opened PR #{number}: you cannot {verdict.replace('_', ' ')} your own PR; "
                    "ask a peer to review it, or use pr_comment"
                )
            pr.reviews.append(Review(reviewer=reviewer, verdict=verdict, body=body or "", ts=now_us()))
            self._persist("pr", self._pr_record(pr))
            detail = verdict + (f": {body}" if body else "")
            self._emit("pr_reviewed", reviewer, pr=number, ref=pr.head, detail=detail, notify=self._notify(pr, reviewer, body, [pr.author]))
            return pr.model_copy(deep=True)

    def pr_comment(self, number: int, author: str, body: str) -> PullRequest:
        if not author:
            raise ForgeError("pr_comment needs an author (your worker id)")
        if not body or not body.strip():
            raise ForgeError("empty comment: write something in the body")
        with self._lock:
            self._ingest_hooks()
            pr = self._get_pr(number)
            pr.comments.append(Comment(author=author, body=body, ts=now_us()))
            self._persist("pr", self._pr_record(pr))
            # The author replying: tell the reviewers; anyone else: tell the author.
            concerned = [r.reviewer for r in pr.reviews] if author == pr.author else [pr.author]
            self._emit("pr_commented", author, pr=number, ref=pr.head, detail=body, notify=self._notify(pr, author, body, concerned))
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
            self._persist("pr", self._pr_record(pr))
            self._emit("pr_closed", by, pr=number, ref=pr.head, detail=pr.title, notify=self._notify(pr, by, "", [pr.author]))
            return pr.model_copy(deep=True)

    def pr_merge(self, number: int, merger: str) -> PullRequest:
        """Merge the PR's head into its base with `git merge --no-ff` in the internal worktree."""
        if not merger:
            raise ForgeError("pr_merge needs a merger (your worker id)")
        with self._lock:
            self._ingest_hooks()
            pr = self._get_pr(number)
            if pr.state != "open":
                raise ForgeError(f"PR #{number} is {pr.state}{self._by(pr)}: only open PRs can be merged")
            head_sha = self._rev(f"refs/heads/{pr.head}")
            if head_sha is None:
                raise ForgeError(
                    f"branch {pr.head} of PR #{number} no longer exists on the forge: "
                    f"push it again (git push origin HEAD:refs/heads/{pr.head}), then merge"
                )
            base_ref = f"refs/heads/{pr.base}"
            base_sha = self._rev(base_ref)
            if base_sha is None:
                raise ForgeError(f"base branch {pr.base} of PR #{number} no longer exists on the forge")
            if self._is_ancestor(head_sha, base_sha):
                raise ForgeError(
                    f"nothing to merge: every commit of {pr.head} is already on {pr.base}. "
                    f"If you have more work, commit and push it to {pr.head}; otherwise close PR #{number} (pr_close)"
                )
            files = self._changed_files(base_sha, head_sha)
            self._ensure_worktree()
            self._run("reset", "--quiet", "--hard", base_sha, cwd=self.work)
            message = f"Merge pull request #{number} from {pr.head}\n\n{pr.title}\n"
            res = self._run(
                "merge", "--no-ff", "--no-edit", "--no-verify", "--no-rerere-autoupdate", "-m", message, head_sha,
                cwd=self.work, check=False, env=self._identity(merger),
            )
            if res.returncode != 0:
                conflicted = self._split_z(
                    self._run("diff", "--name-only", "-z", "--diff-filter=U", cwd=self.work, check=False).stdout
                )
                self._clean_worktree()
                if conflicted:
                    self._emit(
                        "merge_conflict", merger, pr=number, ref=pr.head,
                        detail="conflicting files: " + ", ".join(conflicted),
                        notify=self._notify(pr, merger, "", [pr.author]),
                    )
                    raise MergeConflict(number, conflicted)
                raise ForgeError(f"merging PR #{number} failed: {(res.stderr or res.stdout).strip()}")
            new_sha = self._run("rev-parse", "HEAD", cwd=self.work).stdout.strip()
            upd = self._git_repo(
                "update-ref", "-m", f"forge: merge PR #{number} by {merger}", base_ref, new_sha, base_sha, check=False
            )
            if upd.returncode != 0:
                raise ForgeError(f"{pr.base} moved while PR #{number} was merging: call pr_merge again")
            pr.state = "merged"
            pr.merged_by = merger
            pr.merged_ts = now_us()
            pr.merge_commit = new_sha
            pr.files = files
            self._persist("pr", self._pr_record(pr))
            self._emit(
                "pr_merged", merger, pr=number, ref=pr.head,
                detail=f"merged {pr.head} into {pr.base} as {_short(new_sha)}",
                notify=self._notify(pr, merger, "", [pr.author]),
            )
            return pr.model_copy(deep=True)

    # =================================================================== events

    def events_since(self, cursor: int, limit: int = 1000) -> list[ForgeEvent]:
        if cursor < 0:
            raise ForgeError(f"bad cursor {cursor}: use 0 for the beginning, else the last seq you saw")
        if limit <= 0:
            return []
        with self._lock:
            self._ingest_hooks()
            # seq n is at index n-1 (seqs are dense, from 1).
            i = bisect_right(self._events, cursor, key=_seq)
            return [e.model_copy(deep=True) for e in self._events[i : i + limit]]

    def main_head(self) -> str:
        sha = self._rev(f"refs/heads/{PROTECTED_BRANCH}")
        if sha is None:
            raise ForgeError("the forge has no repository yet: call init_repo first")
        return sha

    # ================================================================= internals

    def _make_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        env.update(
            {
                "GIT_CONFIG_NOSYSTEM": "1",
                "GIT_CONFIG_GLOBAL": os.devnull,
                "GIT_TERMINAL_PROMPT": "0",
                "GIT_COMMITTER_NAME": FORGE_NAME,
                "GIT_COMMITTER_EMAIL": FORGE_EMAIL,
                "GIT_AUTHOR_NAME": FORGE_NAME,
                "GIT_AUTHOR_EMAIL": FORGE_EMAIL,
                "LC_ALL": "C",
            }
        )
        return env

    @staticmethod
    def _identity(user: str) -> dict[str, str]:
        """Author = the worker; committer stays agensh-forge."""
        return {"GIT_AUTHOR_NAME": user, "GIT_AUTHOR_EMAIL": f"{user}@agensh.invalid"}

    def _run(
        self, *args: str, cwd: Path | None = None, check: bool = True, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess:
        res = subprocess.run(
            [self._git, *args],
            cwd=cwd or self.root,
            env={**self._env, **(env or {})},
            check=False,
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="replace",
        )
        if check and res.returncode != 0:
            raise ForgeError(f"forge internal error: git {' '.join(args[:3])} failed: {res.stderr.strip()}")
        return res

    def _git_repo(self, *args: str, **kw: Any) -> subprocess.CompletedProcess:
        return self._run("--git-dir", str(self.repo), *args, **kw)

    def _rev(self, ref: str) -> str | None:
        res = self._git_repo("rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}", check=False)
        return res.stdout.strip() if res.returncode == 0 else None

    def _is_ancestor(self, a: str, b: str) -> bool:
        return self._git_repo("merge-base", "--is-ancestor", a, b, check=False).returncode == 0

    @staticmethod
    def _split_z(out: str) -> list[str]:
        return sorted({p for p in out.split("\0") if p})

    def _changed_files(self, base_sha: str, head_sha: str) -> list[str]:
        res = self._git_repo("diff", "--name-only", "-z", "--no-renames", f"{base_sha}...{head_sha}", check=False)
        return self._split_z(res.stdout) if res.returncode == 0 else []

    def _diff(self, *revs: str) -> str:
        res = self._git_repo("diff", "--no-color", "--no-ext-diff", "--no-textconv", "-M", *revs, check=False)
        if res.returncode != 0:
            return ""
        out = res.stdout
        if len(out) > MAX_DIFF_CHARS:
            out = out[:MAX_DIFF_CHARS] + f"\n... diff truncated at {MAX_DIFF_CHARS} characters ...\n"
        return out

    def _branch_name(self, name: str, what: str) -> str:
        if not isinstance(name, str) or not name.strip():
            raise ForgeError(f"pr_create needs a {what} branch name")
        name = name.strip()
        if name.startswith("refs/heads/"):
            name = name[len("refs/heads/"):]
        ok = self._run("check-ref-format", f"refs/heads/{name}", check=False).returncode == 0
        if not ok or name.startswith("-"):
            raise ForgeError(f"{name!r} is not a valid branch name")
        return name

    def _get_pr(self, number: int) -> PullRequest:
        pr = self._prs.get(number)
        if pr is None:
            if number in self._issues:
                raise ForgeError(f"#{number} is an issue, not a pull request: use issue_view({number})")
            open_ = ", ".join(f"#{n}" for n, p in sorted(self._prs.items()) if p.state == "open") or "none"
            raise ForgeError(f"PR #{number} not found (open PRs: {open_}); pr_list shows them all")
        return pr

    @staticmethod
    def _by(pr: PullRequest) -> str:
        who = pr.merged_by if pr.state == "merged" else pr.closed_by
        return f" (by {who})" if who else ""

    def _notify(self, pr: PullRequest, actor: str, body: str | None, concerned: Iterable[str]) -> list[str]:
        out: list[str] = []
        for name in [*concerned, *(m for m in _mentions(body) if m in self._users)]:
            if name and name != actor and name not in out:
                out.append(name)
        return out

    def _next_number(self) -> int:
        """Issues and PRs share one number space (like Gitea)."""
        return max([0, *self._issues, *self._prs]) + 1

    def _initialized(self) -> bool:
        return (self.repo / "HEAD").exists() and self._rev(f"refs/heads/{PROTECTED_BRANCH}") is not None

    def _require_initialized(self) -> None:
        if not self._initialized():
            raise ForgeError("the forge has no repository yet: call init_repo first")

    # ------------------------------------------------------------ the worktree

    def _install_hooks(self) -> None:
        """(Re)write the hooks; done at every load so they use this process's Python."""
        hooks = self.repo / "hooks"
        hooks.mkdir(exist_ok=True)
        program = hooks / "agensh_hook.py"
        program.write_text(_HOOK_PROGRAM % {"message": PROTECTION_MESSAGE})
        for kind in ("pre-receive", "post-receive"):
            path = hooks / kind
            cmd = " ".join(
                shlex.quote(x) for x in (sys.executable, "-I", "-S", str(program), kind, str(self._hook_log))
            )
            path.write_text(f"#!/bin/sh\nexec {cmd}\n")
            path.chmod(0o755)

    def _ensure_worktree(self) -> None:
        """The internal worktree: a detached `git worktree` of repo.git, reused for every merge."""
        if self._worktree_ok:
            return
        healthy = (self.work / ".git").exists() and self._run(
            "rev-parse", "--git-dir", cwd=self.work, check=False
        ).returncode == 0
        if not healthy:
            shutil.rmtree(self.work, ignore_errors=True)
            self._git_repo("worktree", "prune")
            self._git_repo("worktree", "add", "--quiet", "--detach", "--force", str(self.work), PROTECTED_BRANCH)
        self._worktree_ok = True

    def _clean_worktree(self) -> None:
        self._run("merge", "--abort", cwd=self.work, check=False)
        self._run("reset", "--quiet", "--hard", cwd=self.work, check=False)
        self._run("clean", "-fdxq", cwd=self.work, check=False)

    # ------------------------------------------------------------- persistence

    @staticmethod
    def _pr_record(pr: PullRequest) -> dict[str, Any]:
        return pr.model_dump(exclude={"diff"})

    def _persist(self, kind: str, data: dict[str, Any]) -> None:
        self._state.append({"t": kind, **data})

    def _emit(
        self,
        kind: str,
        actor: str,
        pr: int | None = None,
        ref: str | None = None,
        detail: str = "",
        notify: list[str] | None = None,
        ts: int | None = None,
        hook_end: int | None = None,
    ) -> ForgeEvent:
        event = ForgeEvent(
            seq=(self._events[-1].seq if self._events else 0) + 1,
            ts=ts or now_us(),
            kind=kind,
            actor=actor,
            pr=pr,
            ref=ref,
            detail=detail,
            notify=notify or [],
        )
        record = event.model_dump()
        if hook_end is not None:
            record["hook_end"] = hook_end  # not a ForgeEvent field: ignored when loading the model
        self._event_log.append(record)
        self._events.append(event)
        return event

    def _load(self) -> None:
        self._state = AppendLog(self._state_path)
        lines = 0
        for n, rec in enumerate(self._state.records(), 1):
            lines = n
            try:
                kind = rec.pop("t")
                if kind == "user":
                    self._users[rec["name"]] = rec["token"]
                elif kind == "issue":
                    issue = Issue.model_validate(rec)
                    self._issues[issue.number] = issue
                elif kind == "pr":
                    pr = PullRequest.model_validate(rec)
                    self._prs[pr.number] = pr
            except (KeyError, ValueError) as exc:
                self._state.skipped(n, exc)
        self._event_log = AppendLog(self._events_path)
        for n, rec in enumerate(self._event_log.records(), 1):
            try:
                if self._events and rec.get("seq", 0) <= self._events[-1].seq:
                    raise ValueError(f"seq {rec.get('seq')} is not above {self._events[-1].seq}")
                self._events.append(ForgeEvent.model_validate(rec))
            except ValueError as exc:
                self._event_log.skipped(n, exc)
                continue
            self._hook_offset = max(self._hook_offset, rec.get("hook_end") or 0)
        # Compact the state log once it is mostly superseded snapshots.
        live = len(self._users) + len(self._issues) + len(self._prs)
        if self._state.size > 1_000_000 and lines > 4 * live:
            self._state.close()
            tmp = self._state_path.with_suffix(".tmp")
            tmp.unlink(missing_ok=True)
            with AppendLog(tmp) as compact:
                compact.append_many(
                    [{"t": "user", "name": name, "token": token} for name, token in self._users.items()]
                    + [{"t": "issue", **issue.model_dump()} for issue in self._issues.values()]
                    + [{"t": "pr", **self._pr_record(pr)} for pr in self._prs.values()]
                )
            os.replace(tmp, self._state_path)
            self._state = AppendLog(self._state_path)

    # ------------------------------------------------------------ hook events

    def _on_push(self, user: str) -> None:
        with self._lock:
            self._ingest_hooks()

    def _ingest_hooks(self) -> None:
        """Fold new lines of hook-events.jsonl into the event log (caller holds the lock)."""
        lines, _ = read_new_lines(self._hook_log, self._hook_offset)
        pos = self._hook_offset
        for raw in lines:  # complete lines only: a hook still writing one is read next time
            pos += len(raw)
            try:
                rec = json.loads(raw)
            except ValueError:
                log.warning("skipping a bad line in %s: %r", self._hook_log, raw[:200])
                self._hook_offset = pos
                continue
            self._hook_event(rec, pos)
            self._hook_offset = pos

    def _hook_event(self, rec: dict[str, Any], end: int) -> None:
        kind, actor, ref = rec.get("kind"), rec.get("actor") or "unknown", rec.get("ref") or ""
        old, new = rec.get("old") or "", rec.get("new") or ""
        branch = ref[len("refs/heads/"):] if ref.startswith("refs/heads/") else None
        if kind == "push_rejected":
            self._emit(
                "push_rejected", actor, ref=ref, detail=PROTECTION_MESSAGE, ts=rec.get("ts"), hook_end=end
            )
            return
        if kind != "push":
            return
        zero = set("0")
        if set(new) <= zero:
            detail = f"deleted {ref} (was {_short(old)})"
        elif set(old) <= zero:
            detail = f"created {ref} at {_short(new)}"
        else:
            detail = f"updated {ref}: {_short(old)} -> {_short(new)}"
        pr_number = None
        notify: list[str] = []
        if branch is not None:
            for pr in self._prs.values():
                if pr.state == "open" and pr.head == branch:
                    pr_number = pr.number
                    notify = self._notify(pr, actor, "", [r.reviewer for r in pr.reviews])
                    base_sha = self._rev(f"refs/heads/{pr.base}")
                    if base_sha and not set(new) <= zero:
                        files = self._changed_files(base_sha, new)
                        if files != pr.files:
                            pr.files = files
                            self._persist("pr", self._pr_record(pr))
                    break
        self._emit("push", actor, pr=pr_number, ref=ref, detail=detail, notify=notify, ts=rec.get("ts"), hook_end=end)
