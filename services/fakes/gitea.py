"""A fake Gitea (API v1 as in Gitea 1.27) on loopback, for tests of the
Gitea adapter, the bootstrap and the webhook intake. No Gitea can run here.

What it stands in for, and how faithfully:

* **REST**: the endpoints the adapter and the bootstrap use (users, tokens,
  orgs, repos, collaborators, issues, comments, branch protections, hooks,
  branches, pull requests, reviews, merges, changed files, diffs), with
  Gitea's status codes and refusals (token creation needs Basic auth; an
  author cannot approve or reject their own PR; a COMMENT review needs a
  body; a merge while the mergeability check has not finished, or of a PR
  that conflicts, is `405 Please try again later`; a conflict found by the
  merge itself is 409). Every request and response body is checked against
  the official swagger file (`agensh_ray.services.fakes.contract`); the tests assert
  zero violations.
* **git**: real repositories served over smart HTTP (`git http-backend`, the
  embedded forge's server), Basic auth with a password or a token; pushes
  need write access; protected branches with `enable_push: false` reject
  pushes in a pre-receive hook, as Gitea does. Gitea keeps
  `refs/pull/N/head`; so does the fake.
* **mergeability**: as in Gitea, opening a PR or moving its head or base puts
  it in the `checking` state and a background checker decides
  mergeable/conflict (real `git merge-tree`). `hold_checks()` keeps PRs in
  `checking` (a busy Gitea queue); `before_merge` runs between the check and
  the merge (the window in which a real Gitea returns 409).
* **webhooks**: `gitea`-type hooks get the JSON payloads (push,
  pull_request opened/closed/synchronized, reviews, PR comments) with
  `X-Gitea-Event`, `X-Gitea-Event-Type`, `X-Gitea-Delivery` and
  `X-Gitea-Signature` (HMAC-SHA256 hex of the body), delivered in order by
  one thread. The payload parts that the spec defines (pull_request,
  repository, sender, issue, comment, commits) are contract-checked.

Not modelled: teams, labels, milestones, organizations' member lists,
rate limits, pagination headers beyond `page`/`limit`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import os
import queue
import secrets
import shlex
import subprocess
import sys
import threading
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable
from urllib.parse import parse_qs, unquote, urlsplit

import httpx

from agensh_ray.services.fakes.contract import ContractChecker
from agensh_ray.services.forge.githttp import GitHTTPServer, _GitHandler, git_exec_path

log = logging.getLogger(__name__)

API = "/api/v1"
VERSION = "1.27.1"

_HOOK = r'''
import json, os, sys
kind, repo_dir = sys.argv[1], sys.argv[2]
user = os.environ.get("REMOTE_USER") or "unknown"
updates = [l.split() for l in sys.stdin.read().splitlines() if len(l.split()) == 3]
if kind == "pre-receive":
    try:
        closed = json.load(open(os.path.join(repo_dir, "agensh-no-push.json")))
    except FileNotFoundError:
        closed = []
    for old, new, ref in updates:
        if ref.startswith("refs/heads/") and ref[len("refs/heads/"):] in closed:
            sys.stderr.write("Gitea: Not allowed to push to protected branch %s\n" % ref[len("refs/heads/"):])
            sys.exit(1)
else:
    with open(os.path.join(repo_dir, "agensh-pushes.jsonl"), "a") as f:
        for old, new, ref in updates:
            f.write(json.dumps({"user": user, "old": old, "new": new, "ref": ref}) + "\n")
'''

ZERO = "0" * 40


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class ApiError(Exception):
    def __init__(self, status: int, message: str = ""):
        self.status, self.message = status, message


class FakeGitea:
    """Start with `start()`; `url`, `admin_token`, `violations`, `deliveries` for the tests."""

    def __init__(self, root: Path, host: str = "127.0.0.1", port: int = 0, check_delay_s: float = 0.0,
                 contract: bool = True):
        self.root = Path(root).resolve()
        (self.root / "repos").mkdir(parents=True, exist_ok=True)
        self.contract = ContractChecker("gitea") if contract else None
        self.check_delay_s = check_delay_s
        self._lock = threading.RLock()
        self._git = git_exec_path()
        self._ids = iter(range(1, 10**9))
        self.users: dict[str, dict] = {}
        self.tokens: dict[str, dict] = {}
        self.orgs: dict[str, dict] = {}
        self.repos: dict[tuple[str, str], dict] = {}
        self._memo: dict[tuple, object] = {}
        self.deliveries: list[dict] = []
        """Every webhook delivery attempted: event, status (or error), url."""
        self.requests: list[tuple[str, str, int]] = []
        """(method, path, status) of every API call, in order."""
        self.before_merge: Callable[[dict, dict], None] | None = None
        self._checks_open = threading.Event()
        self._checks_open.set()
        self._check_q: queue.Queue = queue.Queue()
        self._hook_q: queue.Queue = queue.Queue()
        self._served = threading.Condition()
        admin = self._new_user("gitea_admin", "admin@fake.invalid", secrets.token_hex(12), is_admin=True)
        self.admin_login = admin["login"]
        self.admin_token = self._new_token(admin["login"], "bootstrap-admin", ["all"])["sha1"]
        self._http = _Server(self)
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> "FakeGitea":
        self._http.start()
        for name, fn in (("gitea-checker", self._checker), ("gitea-hooks", self._hook_sender)):
            t = threading.Thread(target=fn, name=name, daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def close(self) -> None:
        self._stop.set()
        self._checks_open.set()
        self._check_q.put(None)
        self._hook_q.put(None)
        self._http.close()
        for t in self._threads:
            t.join(timeout=5)

    @property
    def url(self) -> str:
        return self._http.url

    @property
    def violations(self) -> list:
        return list(self.contract.violations) if self.contract else []

    def hold_checks(self) -> None:
        """Keep new mergeability checks pending (PRs stay `checking`) until release_checks()."""
        self._checks_open.clear()

    def release_checks(self) -> None:
        self._checks_open.set()

    def wait_for_request(self, method: str, path_part: str, status: int, timeout: float = 10.0) -> bool:
        """Block until an API call matching (method, path containing path_part, status) was served."""
        def seen():
            return any(m == method and path_part in p and s == status for m, p, s in self.requests)
        with self._served:
            return self._served.wait_for(seen, timeout)

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Wait until queued checks and webhook deliveries are done."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._check_q.unfinished_tasks == 0 and self._hook_q.unfinished_tasks == 0:
                return True
            time.sleep(0.02)
        return False

    # ------------------------------------------------------------------ objects

    def _new_user(self, login: str, email: str, password: str, is_admin: bool = False, full_name: str = "") -> dict:
        user = {"id": next(self._ids), "login": login, "email": email, "password": password, "is_admin": is_admin,
                "full_name": full_name, "created": time.time(), "is_org": False}
        self.users[login.lower()] = user
        return user

    def _new_token(self, login: str, name: str, scopes: list[str]) -> dict:
        sha1 = secrets.token_hex(20)
        tok = {"id": next(self._ids), "name": name, "sha1": sha1, "login": login, "scopes": scopes,
               "created": time.time()}
        self.tokens[sha1] = tok
        return tok

    def _user_json(self, u: dict) -> dict:
        return {
            "id": u["id"], "login": u["login"], "login_name": "", "source_id": 0, "full_name": u["full_name"],
            "email": u["email"], "avatar_url": f"{self.url}/avatars/{u['id']}", "html_url": f"{self.url}/{u['login']}",
            "language": "", "is_admin": u["is_admin"], "last_login": _iso(u["created"]),
            "created": _iso(u["created"]), "restricted": False, "active": True, "prohibit_login": False,
            "location": "", "website": "", "description": "", "visibility": "public", "followers_count": 0,
            "following_count": 0, "starred_repos_count": 0,
        }

    def _repo_json(self, r: dict, me: str | None) -> dict:
        owner = self.orgs.get(r["owner"].lower()) or self.users[r["owner"].lower()]
        full = f"{r['owner']}/{r['name']}"
        perm = self._perm(r, me)
        return {
            "id": r["id"], "owner": self._user_json(owner), "name": r["name"], "full_name": full,
            "description": r["description"], "empty": self._empty(r),
            "private": r["private"], "fork": False, "template": False, "parent": None, "mirror": False, "size": 0,
            "language": "", "languages_url": f"{self.url}{API}/repos/{full}/languages",
            "html_url": f"{self.url}/{full}", "url": f"{self.url}{API}/repos/{full}", "link": "",
            "ssh_url": f"git@fake.invalid:{full}.git", "clone_url": f"{self.url}/{full}.git", "original_url": "",
            "website": "", "stars_count": 0, "forks_count": 0, "watchers_count": 0,
            "open_issues_count": sum(1 for i in r["issues"].values() if not i["is_pull"] and i["state"] == "open"),
            "open_pr_counter": sum(1 for i in r["issues"].values() if i["is_pull"] and i["state"] == "open"),
            "release_counter": 0, "default_branch": r["default_branch"], "archived": False,
            "created_at": _iso(r["created"]), "updated_at": _iso(r["created"]), "archived_at": _iso(0),
            "permissions": {"admin": perm == "admin", "push": perm in ("write", "admin"), "pull": perm is not None},
            "has_issues": True, "has_wiki": False, "has_pull_requests": True, "has_projects": False,
            "has_releases": False, "has_packages": False, "has_actions": False, "ignore_whitespace_conflicts": False,
            "allow_merge_commits": True, "allow_rebase": True, "allow_rebase_explicit": True,
            "allow_squash_merge": True, "allow_fast_forward_only_merge": True, "allow_rebase_update": True,
            "default_delete_branch_after_merge": False, "default_merge_style": "merge",
            "default_allow_maintainer_edit": False, "avatar_url": "", "internal": False, "mirror_interval": "",
            "object_format_name": "sha1", "mirror_updated": _iso(0), "repo_transfer": None, "topics": [],
            "licenses": [],
        }

    def _branch_info(self, r: dict, branch: str, sha: str | None, me: str | None) -> dict:
        return {"label": branch, "ref": branch, "sha": sha or "", "repo_id": r["id"], "repo": self._repo_json(r, me)}

    def _pr_json(self, r: dict, i: dict, me: str | None) -> dict:
        full = f"{r['owner']}/{r['name']}"
        head_sha = i["merged_head"] if i["merged"] else self._rev(r, f"refs/heads/{i['head']}")
        base_sha = self._rev(r, f"refs/heads/{i['base']}")
        files = self._changed(r, i)
        return {
            "id": i["id"], "url": f"{self.url}/{full}/pulls/{i['number']}", "number": i["number"],
            "user": self._user_json(self.users[i["user"].lower()]), "title": i["title"], "body": i["body"],
            "labels": [], "milestone": None, "assignee": None, "assignees": None, "requested_reviewers": None,
            "requested_reviewers_teams": None, "state": i["state"], "draft": False, "is_locked": False,
            "comments": len(i["comments"]), "review_comments": 0, "additions": 0, "deletions": 0,
            "changed_files": len(files), "html_url": f"{self.url}/{full}/pulls/{i['number']}",
            "diff_url": f"{self.url}/{full}/pulls/{i['number']}.diff",
            "patch_url": f"{self.url}/{full}/pulls/{i['number']}.patch",
            "mergeable": i["status"] == "mergeable" and i["state"] == "open", "merged": i["merged"],
            "merged_at": _iso(i["merged_at"]), "merge_commit_sha": i["merge_commit"],
            "merged_by": self._user_json(self.users[i["merged_by"].lower()]) if i["merged_by"] else None,
            "allow_maintainer_edit": False,
            "base": self._branch_info(r, i["base"], base_sha, me),
            "head": self._branch_info(r, i["head"], head_sha, me),
            "merge_base": self._merge_base(r, base_sha, head_sha) or "", "due_date": None,
            "created_at": _iso(i["created"]), "updated_at": _iso(i["updated"]), "closed_at": _iso(i["closed_at"]),
            "pin_order": 0,
        }

    def _issue_json(self, r: dict, i: dict) -> dict:
        full = f"{r['owner']}/{r['name']}"
        pr = None
        if i["is_pull"]:
            pr = {"merged": i["merged"], "merged_at": _iso(i["merged_at"]), "draft": False,
                  "html_url": f"{self.url}/{full}/pulls/{i['number']}"}
        return {
            "id": i["id"], "url": f"{self.url}{API}/repos/{full}/issues/{i['number']}",
            "html_url": f"{self.url}/{full}/issues/{i['number']}", "number": i["number"],
            "user": self._user_json(self.users[i["user"].lower()]), "original_author": "", "original_author_id": 0,
            "title": i["title"], "body": i["body"], "ref": "", "assets": [], "labels": [], "milestone": None,
            "assignee": None, "assignees": None, "state": i["state"], "is_locked": False,
            "comments": len(i["comments"]), "created_at": _iso(i["created"]), "updated_at": _iso(i["updated"]),
            "closed_at": _iso(i["closed_at"]), "due_date": None, "pull_request": pr,
            "repository": {"id": r["id"], "name": r["name"], "owner": r["owner"], "full_name": full},
            "pin_order": 0,
        }

    def _comment_json(self, r: dict, i: dict, c: dict) -> dict:
        full = f"{r['owner']}/{r['name']}"
        return {
            "id": c["id"], "html_url": f"{self.url}/{full}/issues/{i['number']}#issuecomment-{c['id']}",
            "pull_request_url": f"{self.url}/{full}/pulls/{i['number']}" if i["is_pull"] else "",
            "issue_url": f"{self.url}/{full}/issues/{i['number']}",
            "user": self._user_json(self.users[c["user"].lower()]), "original_author": "", "original_author_id": 0,
            "body": c["body"], "assets": [], "created_at": _iso(c["created"]), "updated_at": _iso(c["created"]),
        }

    def _review_json(self, r: dict, i: dict, rv: dict) -> dict:
        full = f"{r['owner']}/{r['name']}"
        return {
            "id": rv["id"], "user": self._user_json(self.users[rv["user"].lower()]), "team": None,
            "state": rv["state"], "body": rv["body"], "commit_id": rv["commit_id"], "stale": False,
            "official": rv["state"] in ("APPROVED", "REQUEST_CHANGES"), "dismissed": False, "comments_count": 0,
            "submitted_at": _iso(rv["created"]), "updated_at": _iso(rv["created"]),
            "html_url": f"{self.url}/{full}/pulls/{i['number']}#issuecomment-{rv['id']}",
            "pull_request_url": f"{self.url}/{full}/pulls/{i['number']}",
        }

    _PROTECTION_FIELDS = {
        "enable_push": False, "enable_push_whitelist": False, "push_whitelist_usernames": [],
        "push_whitelist_teams": [], "push_whitelist_deploy_keys": False, "enable_force_push": False,
        "enable_force_push_allowlist": False, "force_push_allowlist_usernames": [], "force_push_allowlist_teams": [],
        "force_push_allowlist_deploy_keys": False, "enable_merge_whitelist": False, "merge_whitelist_usernames": [],
        "merge_whitelist_teams": [], "enable_status_check": False, "status_check_contexts": [],
        "required_approvals": 0, "enable_approvals_whitelist": False, "approvals_whitelist_username": [],
        "approvals_whitelist_teams": [], "block_on_rejected_reviews": False,
        "block_on_official_review_requests": False, "block_on_outdated_branch": False,
        "dismiss_stale_approvals": False, "ignore_stale_approvals": False, "require_signed_commits": False,
        "protected_file_patterns": "", "unprotected_file_patterns": "", "block_admin_merge_override": False,
        "enable_bypass_allowlist": False, "bypass_allowlist_usernames": [], "bypass_allowlist_teams": [],
        "priority": 0,
    }

    def _protection_json(self, p: dict) -> dict:
        return {"branch_name": p["rule_name"], "rule_name": p["rule_name"],
                **{k: p.get(k, v) for k, v in self._PROTECTION_FIELDS.items()},
                "created_at": _iso(p["created"]), "updated_at": _iso(p["updated"])}

    def _hook_json(self, h: dict) -> dict:
        return {"id": h["id"], "type": h["type"], "branch_filter": h["branch_filter"],
                "config": {"url": h["url"], "content_type": h["content_type"], "http_method": "post"},
                "events": h["events"], "authorization_header": "", "active": h["active"],
                "updated_at": _iso(h["updated"]), "created_at": _iso(h["created"])}

    # --------------------------------------------------------------------- git

    def _run(self, r: dict, *args: str, check: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        full_env.update({"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "LC_ALL": "C",
                         "GIT_COMMITTER_NAME": "Gitea", "GIT_COMMITTER_EMAIL": "gitea@fake.invalid"})
        full_env.update(env or {})
        res = subprocess.run([self._git, "--git-dir", str(r["path"]), *args], capture_output=True, text=True,
                             env=full_env)
        if check and res.returncode != 0:
            raise ApiError(500, f"git {args[0]} failed: {res.stderr.strip()}")
        return res

    def _rev(self, r: dict, ref: str) -> str | None:
        res = self._run(r, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False)
        return res.stdout.strip() if res.returncode == 0 else None

    def _empty(self, r: dict) -> bool:
        if not r.get("seeded"):
            r["seeded"] = self._rev(r, f"refs/heads/{r['default_branch']}") is not None
        return not r["seeded"]

    def _merge_base(self, r: dict, a: str | None, b: str | None) -> str | None:
        if not a or not b:
            return None
        key = ("merge-base", a, b)
        if key not in self._memo:  # commits never change: memoize by id
            self._memo[key] = self._run(r, "merge-base", a, b, check=False).stdout.strip() or None
        return self._memo[key]

    def _changed(self, r: dict, i: dict) -> list[tuple[str, str]]:
        """(status letter, path) of the PR's changes against its merge base."""
        if i["merged"]:
            spec = [f"{i['merge_commit']}^1", i["merged_head"]]
            base = self._merge_base(r, *spec)
            spec = [base or spec[0], i["merged_head"]]
        else:
            head = self._rev(r, f"refs/heads/{i['head']}")
            base = self._rev(r, f"refs/heads/{i['base']}")
            if not head or not base:
                return []
            spec = [f"{base}...{head}"]
        key = ("changed", *spec)
        if key not in self._memo:
            res = self._run(r, "diff", "--name-status", "--no-renames", *spec, check=False)
            self._memo[key] = [(st[:1], path) for st, _, path in (l.partition("\t") for l in res.stdout.splitlines())]
        return self._memo[key]

    def _write_push_policy(self, r: dict) -> None:
        closed = [name for name, p in r["protections"].items() if not p.get("enable_push")]
        (r["path"] / "agensh-no-push.json").write_text(json.dumps(closed))

    def _create_bare(self, r: dict) -> None:
        path: Path = r["path"]
        path.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([self._git, "init", "--bare", "--quiet", "--initial-branch", r["default_branch"], str(path)],
                       check=True, capture_output=True)
        self._run(r, "config", "http.receivepack", "true")
        hooks = path / "hooks"
        hooks.mkdir(exist_ok=True)
        prog = hooks / "fake_gitea_hook.py"
        prog.write_text(_HOOK)
        for kind in ("pre-receive", "post-receive"):
            cmd = " ".join(shlex.quote(x) for x in (sys.executable, "-I", "-S", str(prog), kind, str(path)))
            (hooks / kind).write_text(f"#!/bin/sh\nexec {cmd}\n")
            (hooks / kind).chmod(0o755)
        self._write_push_policy(r)

    def _on_push(self, user: str) -> None:
        """After every receive-pack: fold the pushes the hook recorded (webhooks, PR sync, re-checks)."""
        with self._lock:
            for r in self.repos.values():
                log_path = r["path"] / "agensh-pushes.jsonl"
                if not log_path.exists():
                    continue
                data = log_path.read_text()
                lines = data[r["push_offset"]:].splitlines(keepends=True)
                for line in lines:
                    if not line.endswith("\n"):
                        break
                    r["push_offset"] += len(line)
                    rec = json.loads(line)
                    self._after_ref_update(r, rec["user"], rec["ref"], rec["old"], rec["new"])

    def _after_ref_update(self, r: dict, user: str, ref: str, old: str, new: str) -> None:
        if not ref.startswith("refs/heads/"):
            return
        branch = ref[len("refs/heads/"):]
        self._push_webhook(r, user, ref, old, new)
        for i in r["issues"].values():
            if not i["is_pull"] or i["state"] != "open":
                continue
            if i["head"] == branch and new != ZERO:
                self._run(r, "update-ref", f"refs/pull/{i['number']}/head", new)
                self._queue_check(r, i)
                self._pr_webhook(r, i, "synchronized", user, event_type="pull_request_sync")
            elif i["base"] == branch:
                self._queue_check(r, i)

    # ------------------------------------------------------------- mergeability

    def _queue_check(self, r: dict, i: dict) -> None:
        i["status"] = "checking"
        self._check_q.put((r["owner"], r["name"], i["number"]))

    def _checker(self) -> None:
        while True:
            item = self._check_q.get()
            try:
                if item is None:
                    return
                self._checks_open.wait()
                if self.check_delay_s:
                    time.sleep(self.check_delay_s)
                with self._lock:
                    r = self.repos.get((item[0].lower(), item[1].lower()))
                    i = r["issues"].get(item[2]) if r else None
                    if i is None or i["state"] != "open" or i["status"] != "checking":
                        continue
                    base = self._rev(r, f"refs/heads/{i['base']}")
                    head = self._rev(r, f"refs/heads/{i['head']}")
                    if not base or not head:
                        i["status"] = "conflict"
                        continue
                    res = self._run(r, "merge-tree", "--write-tree", "--no-messages", base, head, check=False)
                    i["status"] = "mergeable" if res.returncode == 0 else "conflict"
            except Exception:
                log.exception("fake gitea: mergeability check failed")
            finally:
                self._check_q.task_done()

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

    # --------------------------------------------------------------------- auth

    def authenticate_git(self, user: str, secret: str) -> bool:
        u = self.users.get(user.lower())
        if u is None:
            return False
        if hmac.compare_digest(u["password"], secret):
            return True
        tok = self.tokens.get(secret)
        return tok is not None and tok["login"].lower() == user.lower()

    def _whoami(self, headers) -> tuple[str | None, str]:
        """(login, how) from Authorization: `token X`, `Bearer X` or Basic user:password|token."""
        auth = headers.get("Authorization", "")
        scheme, _, value = auth.partition(" ")
        scheme = scheme.lower()
        login, how = None, "none"
        if scheme in ("token", "bearer"):
            tok = self.tokens.get(value.strip())
            if tok is None:
                raise ApiError(401, "user does not exist [uid: 0, name: ]")
            login, how = tok["login"], "token"
        elif scheme == "basic":
            try:
                user, _, pw = base64.b64decode(value).decode().partition(":")
            except ValueError:
                raise ApiError(401, "invalid basic authentication") from None
            u = self.users.get(user.lower())
            if u is None or not self.authenticate_git(user, pw):
                raise ApiError(401, "user's password is invalid [uid: 0, name: ]")
            login, how = u["login"], ("basic" if hmac.compare_digest(u["password"], pw) else "token")
        sudo = headers.get("Sudo")
        if sudo and login and self.users[login.lower()]["is_admin"]:
            if sudo.lower() not in self.users:
                raise ApiError(404, f"user does not exist [name: {sudo}]")
            login = self.users[sudo.lower()]["login"]
        return login, how

    def _perm(self, r: dict, login: str | None) -> str | None:
        if login is None:
            return None if r["private"] else "read"
        u = self.users[login.lower()]
        if u["is_admin"] or r["owner"].lower() == login.lower() or login.lower() in r["org_owners"]:
            return "admin"
        return r["collaborators"].get(login.lower(), None if r["private"] else "read")

    def git_may_push(self, path: str, user: str) -> bool:
        parts = path.strip("/").split("/")
        if len(parts) < 2:
            return False
        r = self.repos.get((parts[0].lower(), parts[1].removesuffix(".git").lower()))
        return r is not None and self._perm(r, user) in ("write", "admin")

    # --------------------------------------------------------------------- API

    def handle_api(self, method: str, raw_path: str, headers, body: bytes) -> tuple[int, Any, str]:
        """One API call: (status, JSON-able body or text, content type)."""
        parts = urlsplit(raw_path)
        path = unquote(parts.path)
        query = parse_qs(parts.query, keep_blank_values=True)
        op = self.contract.check_request(method, path, query, body) if self.contract else None
        try:
            me, how = self._whoami(headers)
            data = json.loads(body) if body else None
            status, out = self._route(method, path[len(API):], {k: v[-1] for k, v in query.items()}, data, me, how)
        except ApiError as exc:
            status, out = exc.status, ({"message": exc.message, "url": f"{self.url}/api/swagger"} if exc.message else None)
        except (ValueError, KeyError, TypeError) as exc:
            status, out = 422, {"message": f"invalid request: {exc}", "url": f"{self.url}/api/swagger"}
        ctype = "text/plain; charset=utf-8" if isinstance(out, str) else "application/json;charset=utf-8"
        if self.contract and op is not None:
            self.contract.check_response(op, status, out, raw_text=isinstance(out, str))
        with self._served:
            self.requests.append((method, path, status))
            self._served.notify_all()
        return status, out, ctype

    def _route(self, method: str, path: str, q: dict, data: Any, me: str | None, how: str) -> tuple[int, Any]:
        seg = [s for s in path.split("/") if s]
        with self._lock:
            if seg == ["version"]:
                return 200, {"version": VERSION}
            if me is None:
                raise ApiError(401, "token is required")
            if seg == ["user"] and method == "GET":
                return 200, self._user_json(self.users[me.lower()])
            if seg[:2] == ["admin", "users"]:
                return self._admin_users(method, seg[2:], data, me)
            if seg[:1] == ["users"] and len(seg) >= 2:
                return self._users(method, seg[1], seg[2:], data, me, how)
            if seg[:1] == ["orgs"]:
                return self._orgs(method, seg[1:], data, me)
            if seg[:1] == ["repos"] and len(seg) >= 3:
                r = self.repos.get((seg[1].lower(), seg[2].lower()))
                if r is None or self._perm(r, me) is None:
                    raise ApiError(404, "")
                return self._repo(method, r, seg[3:], q, data, me)
        raise ApiError(404, "")

    def _require_admin(self, me: str) -> None:
        if not self.users[me.lower()]["is_admin"]:
            raise ApiError(403, "reqSiteAdmin")

    def _admin_users(self, method: str, rest: list[str], data: Any, me: str) -> tuple[int, Any]:
        self._require_admin(me)
        if method == "POST" and not rest:
            name = data["username"]
            if name.lower() in self.users or name.lower() in self.orgs:
                raise ApiError(422, f"user already exists [name: {name}]")
            u = self._new_user(name, data["email"], data.get("password") or secrets.token_hex(8),
                               full_name=data.get("full_name", ""))
            return 201, self._user_json(u)
        if method == "PATCH" and len(rest) == 1:
            u = self.users.get(rest[0].lower())
            if u is None:
                raise ApiError(422, f"user does not exist [name: {rest[0]}]")
            if data.get("password"):
                u["password"] = data["password"]
            return 200, self._user_json(u)
        raise ApiError(404, "")

    def _users(self, method: str, name: str, rest: list[str], data: Any, me: str, how: str) -> tuple[int, Any]:
        u = self.users.get(name.lower())
        if u is None:
            raise ApiError(404, "")
        if not rest and method == "GET":
            return 200, self._user_json(u)
        if rest[:1] == ["tokens"]:
            if how != "basic":
                raise ApiError(401, "auth required")
            if me.lower() != name.lower() and not self.users[me.lower()]["is_admin"]:
                raise ApiError(403, "you must be the user or an admin")
            mine = [t for t in self.tokens.values() if t["login"].lower() == name.lower()]
            if method == "GET" and len(rest) == 1:
                return 200, [{"id": t["id"], "name": t["name"], "sha1": "", "token_last_eight": t["sha1"][-8:],
                              "scopes": t["scopes"], "created_at": _iso(t["created"]), "last_used_at": _iso(t["created"])}
                             for t in mine]
            if method == "POST" and len(rest) == 1:
                if any(t["name"] == data["name"] for t in mine):
                    raise ApiError(400, "access token name has been used already")
                scopes = data.get("scopes") or []
                if not scopes:
                    raise ApiError(400, "access token must have a scope")
                t = self._new_token(u["login"], data["name"], scopes)
                return 201, {"id": t["id"], "name": t["name"], "sha1": t["sha1"], "token_last_eight": t["sha1"][-8:],
                             "scopes": scopes, "created_at": _iso(t["created"]), "last_used_at": _iso(t["created"])}
            if method == "DELETE" and len(rest) == 2:
                for t in mine:
                    if str(t["id"]) == rest[1] or t["name"] == rest[1]:
                        del self.tokens[t["sha1"]]
                        return 204, None
                raise ApiError(404, "")
        raise ApiError(404, "")

    def _orgs(self, method: str, rest: list[str], data: Any, me: str) -> tuple[int, Any]:
        if method == "POST" and not rest:
            name = data["username"]
            if name.lower() in self.users or name.lower() in self.orgs:
                raise ApiError(422, f"user already exists [name: {name}]")
            org = {"id": next(self._ids), "login": name, "email": data.get("email", ""), "is_admin": False,
                   "full_name": data.get("full_name", ""), "created": time.time(), "owners": {me.lower()},
                   "is_org": True, "password": secrets.token_hex(8)}
            self.orgs[name.lower()] = org
            return 201, self._org_json(org)
        org = self.orgs.get(rest[0].lower()) if rest else None
        if org is None:
            raise ApiError(404, "")
        if method == "GET" and len(rest) == 1:
            return 200, self._org_json(org)
        if method == "POST" and rest[1:] == ["repos"]:
            if me.lower() not in org["owners"] and not self.users[me.lower()]["is_admin"]:
                raise ApiError(403, "Given user is not owner of organization.")
            name = data["name"]
            if (org["login"].lower(), name.lower()) in self.repos:
                raise ApiError(409, "The repository with the same name already exists.")
            r = {"id": next(self._ids), "owner": org["login"], "name": name, "description": data.get("description", ""),
                 "private": bool(data.get("private")), "default_branch": data.get("default_branch") or "main",
                 "created": time.time(), "path": self.root / "repos" / org["login"].lower() / f"{name.lower()}.git",
                 "issues": {}, "collaborators": {}, "protections": {}, "hooks": {}, "push_offset": 0,
                 "org_owners": set(org["owners"])}
            self._create_bare(r)
            self.repos[(org["login"].lower(), name.lower())] = r
            self._http.owners.update({org["login"], org["login"].lower()})
            return 201, self._repo_json(r, me)
        raise ApiError(404, "")

    def _org_json(self, org: dict) -> dict:
        return {"id": org["id"], "name": org["login"], "username": org["login"], "full_name": org["full_name"],
                "email": org["email"], "avatar_url": "", "description": "", "website": "", "location": "",
                "visibility": "public", "repo_admin_change_team_access": False}

    def _repo(self, method: str, r: dict, rest: list[str], q: dict, data: Any, me: str) -> tuple[int, Any]:
        perm = self._perm(r, me)
        write = perm in ("write", "admin")
        head = rest[0] if rest else ""
        if not rest and method == "GET":
            return 200, self._repo_json(r, me)
        if head == "collaborators" and len(rest) == 2:
            if method == "PUT":
                if perm != "admin":
                    raise ApiError(403, "")
                if rest[1].lower() not in self.users:
                    raise ApiError(422, f"user does not exist [name: {rest[1]}]")
                r["collaborators"][rest[1].lower()] = (data or {}).get("permission") or "write"
                return 204, None
            if method == "GET":
                return (204, None) if rest[1].lower() in r["collaborators"] else (404, None)
        if head == "branches" and len(rest) >= 2 and method == "GET":
            branch = "/".join(rest[1:])
            sha = self._rev(r, f"refs/heads/{branch}")
            if sha is None:
                raise ApiError(404, f"branch '{branch}' does not exist")
            p = r["protections"].get(branch)
            return 200, {"name": branch, "commit": self._payload_commit(r, sha), "protected": p is not None,
                         "required_approvals": p["required_approvals"] if p else 0,
                         "enable_status_check": bool(p and p.get("enable_status_check")),
                         "status_check_contexts": (p or {}).get("status_check_contexts", []),
                         "user_can_push": write and (p is None or bool(p.get("enable_push"))),
                         "user_can_merge": write, "effective_branch_protection_name": branch if p else ""}
        if head == "branch_protections":
            return self._protections(method, r, rest[1:], data, perm)
        if head == "hooks":
            return self._hooks(method, r, rest[1:], data, perm)
        if head == "issues":
            return self._issues(method, r, rest[1:], q, data, me, write)
        if head == "pulls":
            return self._pulls(method, r, rest[1:], q, data, me, write)
        raise ApiError(404, "")

    def _protections(self, method: str, r: dict, rest: list[str], data: Any, perm: str | None) -> tuple[int, Any]:
        if perm != "admin":
            raise ApiError(403, "")
        if method == "GET" and not rest:
            return 200, [self._protection_json(p) for p in r["protections"].values()]
        if method == "POST" and not rest:
            name = data.get("rule_name") or data.get("branch_name")
            if not name:
                raise ApiError(422, "rule_name is required")
            if name in r["protections"]:
                raise ApiError(403, "Branch protection already exist")
            p = {"rule_name": name, "created": time.time(), "updated": time.time(),
                 **{k: data.get(k, v) for k, v in self._PROTECTION_FIELDS.items()}}
            r["protections"][name] = p
            self._write_push_policy(r)
            return 201, self._protection_json(p)
        p = r["protections"].get("/".join(rest)) if rest else None
        if p is None:
            raise ApiError(404, "")
        if method == "GET":
            return 200, self._protection_json(p)
        if method == "PATCH":
            for k in self._PROTECTION_FIELDS:
                if k in data:
                    p[k] = data[k]
            p["updated"] = time.time()
            self._write_push_policy(r)
            return 200, self._protection_json(p)
        raise ApiError(404, "")

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

    def _new_issue(self, r: dict, me: str, title: str, body: str, is_pull: bool) -> dict:
        number = max([0, *r["issues"]]) + 1
        now = time.time()
        i = {"id": next(self._ids), "number": number, "user": me, "title": title, "body": body or "",
             "state": "open", "is_pull": is_pull, "created": now, "updated": now, "closed_at": None,
             "comments": [], "reviews": [], "merged": False, "merged_at": None, "merged_by": None,
             "merge_commit": None, "merged_head": None, "head": None, "base": None, "status": "checking"}
        r["issues"][number] = i
        return i

    def _issues(self, method: str, r: dict, rest: list[str], q: dict, data: Any, me: str, write: bool):
        if not rest:
            if method == "POST":
                if not data.get("title", "").strip():
                    raise ApiError(422, "title is required")
                i = self._new_issue(r, me, data["title"], data.get("body", ""), False)
                return 201, self._issue_json(r, i)
            if method == "GET":
                state = q.get("state", "open")
                want_pulls = {"issues": False, "pulls": True}.get(q.get("type", ""), None)
                items = [i for _, i in sorted(r["issues"].items(), reverse=True)
                         if (state == "all" or i["state"] == state) and (want_pulls is None or i["is_pull"] == want_pulls)]
                return 200, [self._issue_json(r, i) for i in self._page(items, q)]
        i = r["issues"].get(int(rest[0])) if rest else None
        if i is None:
            raise ApiError(404, "")
        if len(rest) == 1 and method == "GET":
            return 200, self._issue_json(r, i)
        if rest[1:] == ["comments"]:
            if method == "GET":
                return 200, [self._comment_json(r, i, c) for c in i["comments"]]
            if method == "POST":
                if not data.get("body", "").strip():
                    raise ApiError(422, "body is required")
                c = {"id": next(self._ids), "user": me, "body": data["body"], "created": time.time()}
                i["comments"].append(c)
                i["updated"] = time.time()
                self._comment_webhook(r, i, c, me)
                return 201, self._comment_json(r, i, c)
        raise ApiError(404, "")

    @staticmethod
    def _page(items: list, q: dict) -> list:
        limit = max(1, min(int(q.get("limit", 30)), 50))
        page = max(1, int(q.get("page", 1)))
        return items[(page - 1) * limit: page * limit]

    def _pulls(self, method: str, r: dict, rest: list[str], q: dict, data: Any, me: str, write: bool):
        if not rest:
            if method == "POST":
                return self._pr_create(r, data, me, write)
            if method == "GET":
                state = q.get("state", "open")
                items = [i for _, i in sorted(r["issues"].items(), reverse=True)
                         if i["is_pull"] and (state == "all" or i["state"] == state)]
                return 200, [self._pr_json(r, i, me) for i in self._page(items, q)]
        key = rest[0]
        if key.endswith(".diff") or key.endswith(".patch"):
            i = r["issues"].get(int(key.rsplit(".", 1)[0]))
            if i is None or not i["is_pull"]:
                raise ApiError(404, "")
            return 200, self._pr_diff(r, i)
        i = r["issues"].get(int(key))
        if i is None or not i["is_pull"]:
            raise ApiError(404, "")
        if len(rest) == 1 and method == "GET":
            return 200, self._pr_json(r, i, me)
        if len(rest) == 1 and method == "PATCH":
            if i["user"].lower() != me.lower() and not write:
                raise ApiError(403, "")
            if data.get("state") == "closed" and i["state"] == "open":
                i["state"], i["closed_at"], i["updated"] = "closed", time.time(), time.time()
                self._pr_webhook(r, i, "closed", me)
            if data.get("title"):
                i["title"] = data["title"]
            if data.get("body") is not None:
                i["body"] = data["body"]
            return 201, self._pr_json(r, i, me)
        if rest[1:] == ["files"] and method == "GET":
            files = [{"filename": p, "previous_filename": "", "status": {"A": "added", "D": "deleted"}.get(s, "changed"),
                      "additions": 0, "deletions": 0, "changes": 0, "html_url": "", "contents_url": "", "raw_url": ""}
                     for s, p in self._changed(r, i)]
            return 200, self._page(files, q)
        if rest[1:] == ["reviews"]:
            if method == "GET":
                return 200, [self._review_json(r, i, rv) for rv in i["reviews"]]
            if method == "POST":
                return self._review(r, i, data, me)
        if rest[1:] == ["merge"] and method == "POST":
            return self._merge(r, i, data, me, write)
        raise ApiError(404, "")

    def _pr_create(self, r: dict, data: dict, me: str, write: bool) -> tuple[int, Any]:
        head, base = data.get("head") or "", data.get("base") or r["default_branch"]
        if not data.get("title", "").strip():
            raise ApiError(422, "title is required")
        base_sha = self._rev(r, f"refs/heads/{base}")
        head_sha = self._rev(r, f"refs/heads/{head}")
        if base_sha is None or head_sha is None:
            raise ApiError(404, "")
        if head == base:
            raise ApiError(422, "Invalid PullRequest: There are no changes between the head and the base")
        for i in r["issues"].values():
            if i["is_pull"] and i["state"] == "open" and i["head"] == head and i["base"] == base:
                raise ApiError(409, f"pull request already exists for these targets [id: {i['id']}, issue_id: "
                                    f"{i['id']}, head_repo_id: {r['id']}, base_repo_id: {r['id']}, "
                                    f"head_branch: {head}, base_branch: {base}]")
        if self._run(r, "merge-base", "--is-ancestor", head_sha, base_sha, check=False).returncode == 0:
            raise ApiError(422, "There are no changes between the head and the base")
        i = self._new_issue(r, me, data["title"], data.get("body", ""), True)
        i["head"], i["base"] = head, base
        self._run(r, "update-ref", f"refs/pull/{i['number']}/head", head_sha)
        self._queue_check(r, i)
        self._pr_webhook(r, i, "opened", me)
        return 201, self._pr_json(r, i, me)

    def _pr_diff(self, r: dict, i: dict) -> str:
        if i["merged"]:
            spec = [f"{i['merge_commit']}^1", i["merge_commit"]]
        else:
            base, head = self._rev(r, f"refs/heads/{i['base']}"), self._rev(r, f"refs/heads/{i['head']}")
            if not base or not head:
                return ""
            spec = [f"{base}...{head}"]
        return self._run(r, "diff", "--no-color", *spec, check=False).stdout

    def _review(self, r: dict, i: dict, data: dict, me: str) -> tuple[int, Any]:
        event = (data.get("event") or "").upper()
        body = data.get("body") or ""
        own = i["user"].lower() == me.lower()
        if event == "APPROVED" and own:
            raise ApiError(422, "approve your own pull is not allowed")
        if event == "REQUEST_CHANGES" and own:
            raise ApiError(422, "reject your own pull is not allowed")
        if event in ("REQUEST_CHANGES", "COMMENT") and not body.strip():
            raise ApiError(422, f"review event {event} requires a body")
        if event not in ("APPROVED", "REQUEST_CHANGES", "COMMENT"):
            raise ApiError(422, f"unsupported review event {event!r}")
        if i["state"] != "open":
            raise ApiError(422, "Pull request is closed")
        rv = {"id": next(self._ids), "user": me, "state": event, "body": body, "created": time.time(),
              "commit_id": self._rev(r, f"refs/heads/{i['head']}") or ""}
        i["reviews"].append(rv)
        kind = {"APPROVED": "approved", "REQUEST_CHANGES": "rejected", "COMMENT": "comment"}[event]
        self._pr_webhook(r, i, "reviewed", me, event_type=f"pull_request_review_{kind}",
                         review={"type": f"pull_request_review_{kind}", "content": body})
        return 200, self._review_json(r, i, rv)

    def _merge(self, r: dict, i: dict, data: dict, me: str, write: bool) -> tuple[int, Any]:
        if (data.get("Do") or data.get("do")) != "merge":
            raise ApiError(405, "Invalid merge style: only 'merge' is enabled on this fake")
        if i["merged"]:
            raise ApiError(405, "PR already merged")
        if i["state"] != "open":
            raise ApiError(404, "")
        if not write:
            raise ApiError(405, "User not allowed to merge PR")
        if i["status"] != "mergeable":
            raise ApiError(405, "Please try again later")
        if self.before_merge is not None:
            hook, self.before_merge = self.before_merge, None
            hook(r, i)
        base_ref = f"refs/heads/{i['base']}"
        base, head = self._rev(r, base_ref), self._rev(r, f"refs/heads/{i['head']}")
        res = self._run(r, "merge-tree", "--write-tree", "--no-messages", base, head, check=False)
        if res.returncode != 0:
            i["status"] = "conflict"
            raise ApiError(409, "merge conflicts")
        tree = res.stdout.split()[0]
        u = self.users[me.lower()]
        msg = f"Merge pull request '{i['title']}' (#{i['number']}) from {i['head']} into {i['base']}\n"
        env = {"GIT_AUTHOR_NAME": u["login"], "GIT_AUTHOR_EMAIL": u["email"]}
        commit = self._run(r, "commit-tree", tree, "-p", base, "-p", head, "-m", msg, env=env).stdout.strip()
        if self._run(r, "update-ref", base_ref, commit, base, check=False).returncode != 0:
            raise ApiError(409, "merge push out of date")
        now = time.time()
        i.update(state="closed", merged=True, merged_at=now, merged_by=me, merge_commit=commit, merged_head=head,
                 closed_at=now, updated=now, status="mergeable")
        self._after_ref_update(r, me, base_ref, base, commit)
        self._pr_webhook(r, i, "closed", me)
        return 200, None


class _Owners(set):
    """The owners whose repositories git may serve (GitHTTPServer checks `first segment in repos`)."""

    def __getitem__(self, index: int) -> str:
        return "<owner>/<repo>.git"


class _Server(GitHTTPServer):
    """One port for both: /api/v1/... is the REST API, /<owner>/<repo>.git/... is git."""

    def __init__(self, fake: FakeGitea):
        self.owners = _Owners()
        super().__init__(fake.root / "repos", fake.authenticate_git, repos=self.owners, on_receive_pack=fake._on_push)
        self.fake = fake

    def _handler_class(self):
        outer = self

        class Handler(_FakeGiteaHandler):
            server_ref = outer

        return Handler


class _FakeGiteaHandler(_GitHandler):
    server_ref: _Server

    def _dispatch(self) -> None:
        srv = self.server_ref
        path = urlsplit(self.path).path
        if path.startswith(API + "/") or path == API:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            status, out, ctype = srv.fake.handle_api(self.command, self.path, self.headers, body)
            data = b"" if out is None else (out.encode() if isinstance(out, str) else json.dumps(out).encode())
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        is_push = path.endswith("/git-receive-pack") or "service=git-receive-pack" in self.path
        if is_push:
            user = self._user()
            if user is not None and not srv.fake.git_may_push(path, user):
                self._simple(403, f"User permission denied for writing: {user} cannot push to {path.split('/info')[0]}")
                return
        self._handle()

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _dispatch
