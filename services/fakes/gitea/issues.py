"""Issues and their comments in the fake Gitea. A pull request is an issue
too (`is_pull`), as in Gitea: PR numbers and issue numbers share one
sequence, and comments on a PR are issue comments (`pulls.py` builds on the
records made here).
"""

from __future__ import annotations

import time
from typing import Any

from agensh_ray.services.fakes.gitea.server import API, ApiError, iso, page


class IssuesApi:
    """`/repos/{owner}/{repo}/issues[/{n}[/comments]]`; the issue and comment records and their JSON."""

    def _issue_json(self, r: dict, i: dict) -> dict:
        full = f"{r['owner']}/{r['name']}"
        pr = None
        if i["is_pull"]:
            pr = {"merged": i["merged"], "merged_at": iso(i["merged_at"]), "draft": False,
                  "html_url": f"{self.url}/{full}/pulls/{i['number']}"}
        return {
            "id": i["id"], "url": f"{self.url}{API}/repos/{full}/issues/{i['number']}",
            "html_url": f"{self.url}/{full}/issues/{i['number']}", "number": i["number"],
            "user": self._user_json(self.users[i["user"].lower()]), "original_author": "", "original_author_id": 0,
            "title": i["title"], "body": i["body"], "ref": "", "assets": [], "labels": [], "milestone": None,
            "assignee": None, "assignees": None, "state": i["state"], "is_locked": False,
            "comments": len(i["comments"]), "created_at": iso(i["created"]), "updated_at": iso(i["updated"]),
            "closed_at": iso(i["closed_at"]), "due_date": None, "pull_request": pr,
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
            "body": c["body"], "assets": [], "created_at": iso(c["created"]), "updated_at": iso(c["created"]),
        }

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
                return 200, [self._issue_json(r, i) for i in page(items, q)]
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
