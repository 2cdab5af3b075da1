"""Pull requests in the fake Gitea: create, list, view, close, their diff and
changed files, reviews, merges, and the mergeability checker.

As in Gitea: opening a PR or moving its head or base puts it in the
`checking` state and a background thread (`_checker`) decides
mergeable/conflict with a real `git merge-tree`; `hold_checks()` keeps PRs
in `checking` (a busy Gitea queue). A merge while the check has not
finished, or of a PR found to conflict, is `405 Please try again later`; a
conflict found by the merge itself (main moved after the check;
`before_merge` runs in that window) is 409. An author may not approve or
reject their own PR; a COMMENT or REQUEST_CHANGES review needs a body.
Only the `merge` style is enabled. `refs/pull/N/head` follows the head, as
Gitea keeps it.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from agensh_ray.services.fakes.gitea.server import ApiError, iso, page

log = logging.getLogger(__name__)


class PullsApi:
    """`/repos/{owner}/{repo}/pulls/...`: the PR records (issues with `is_pull`), reviews, merges, checks."""

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
            "merged_at": iso(i["merged_at"]), "merge_commit_sha": i["merge_commit"],
            "merged_by": self._user_json(self.users[i["merged_by"].lower()]) if i["merged_by"] else None,
            "allow_maintainer_edit": False,
            "base": self._branch_info(r, i["base"], base_sha, me),
            "head": self._branch_info(r, i["head"], head_sha, me),
            "merge_base": self._merge_base(r, base_sha, head_sha) or "", "due_date": None,
            "created_at": iso(i["created"]), "updated_at": iso(i["updated"]), "closed_at": iso(i["closed_at"]),
            "pin_order": 0,
        }

    def _review_json(self, r: dict, i: dict, rv: dict) -> dict:
        full = f"{r['owner']}/{r['name']}"
        return {
            "id": rv["id"], "user": self._user_json(self.users[rv["user"].lower()]), "team": None,
            "state": rv["state"], "body": rv["body"], "commit_id": rv["commit_id"], "stale": False,
            "official": rv["state"] in ("APPROVED", "REQUEST_CHANGES"), "dismissed": False, "comments_count": 0,
            "submitted_at": iso(rv["created"]), "updated_at": iso(rv["created"]),
            "html_url": f"{self.url}/{full}/pulls/{i['number']}#issuecomment-{rv['id']}",
            "pull_request_url": f"{self.url}/{full}/pulls/{i['number']}",
        }

    def _pulls(self, method: str, r: dict, rest: list[str], q: dict, data: Any, me: str, write: bool):
        if not rest:
            if method == "POST":
                return self._pr_create(r, data, me, write)
            if method == "GET":
                state = q.get("state", "open")
                items = [i for _, i in sorted(r["issues"].items(), reverse=True)
                         if i["is_pull"] and (state == "all" or i["state"] == state)]
                return 200, [self._pr_json(r, i, me) for i in page(items, q)]
        key = rest[0]
        if key.endswith((".diff", ".patch")):
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
            return 200, page(files, q)
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

    # ------------------------------------------------------------ changed files

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
