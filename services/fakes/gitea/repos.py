"""A repository of the fake Gitea and what hangs off it directly: its JSON,
collaborators, branches and branch protections; and the router of
`/repos/{owner}/{repo}/...` to the resources below it (hooks, issues, pulls).

Branch and tag protections are also written where the repository's
pre-receive hook reads them (`git.py`), so a push they forbid is refused by
git itself, as in Gitea.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

from agensh_ray.services.fakes.gitea.server import API, ApiError, iso


class ReposApi:
    """`/repos/{owner}/{repo}`, its collaborators, branches and branch protections."""

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
            "created_at": iso(r["created"]), "updated_at": iso(r["created"]), "archived_at": iso(0),
            "permissions": {"admin": perm == "admin", "push": perm in ("write", "admin"), "pull": perm is not None},
            "has_issues": True, "has_wiki": False, "has_pull_requests": True, "has_projects": False,
            "has_releases": False, "has_packages": False, "has_actions": False, "ignore_whitespace_conflicts": False,
            "allow_merge_commits": True, "allow_rebase": True, "allow_rebase_explicit": True,
            "allow_squash_merge": True, "allow_fast_forward_only_merge": True, "allow_rebase_update": True,
            "default_delete_branch_after_merge": False, "default_merge_style": "merge",
            "default_allow_maintainer_edit": False, "avatar_url": "", "internal": False, "mirror_interval": "",
            "object_format_name": "sha1", "mirror_updated": iso(0), "repo_transfer": None, "topics": [],
            "licenses": [],
        }

    _PROTECTION_FIELDS: ClassVar[dict[str, Any]] = {
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
                "created_at": iso(p["created"]), "updated_at": iso(p["updated"])}

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
        if head == "tag_protections":
            return self._tag_protections(method, r, rest[1:], data, perm)
        if head == "hooks":
            return self._hooks(method, r, rest[1:], data, perm)
        if head == "issues":
            return self._issues(method, r, rest[1:], q, data, me, write)
        if head == "pulls":
            return self._pulls(method, r, rest[1:], q, data, me, write)
        raise ApiError(404, "")

    def _tag_protections(self, method: str, r: dict, rest: list[str], data: Any,
                         perm: str | None) -> tuple[int, Any]:
        if perm != "admin":
            raise ApiError(403, "")
        if method == "GET" and not rest:
            return 200, [self._tag_protection_json(t) for t in r["tag_protections"]]
        if method == "POST" and not rest:
            pattern = (data.get("name_pattern") or "").strip()
            if not pattern:
                raise ApiError(422, "name_pattern is required")
            if any(t["name_pattern"] == pattern for t in r["tag_protections"]):
                raise ApiError(422, "Tag protection already exist")
            t = {"id": len(r["tag_protections"]) + 1, "name_pattern": pattern, "created": time.time(),
                 "whitelist_usernames": list(data.get("whitelist_usernames") or []),
                 "whitelist_teams": list(data.get("whitelist_teams") or [])}
            r["tag_protections"].append(t)
            self._write_push_policy(r)
            return 201, self._tag_protection_json(t)
        raise ApiError(404, "")

    @staticmethod
    def _tag_protection_json(t: dict) -> dict:
        return {"id": t["id"], "name_pattern": t["name_pattern"], "whitelist_usernames": t["whitelist_usernames"],
                "whitelist_teams": t["whitelist_teams"], "created_at": iso(t["created"]),
                "updated_at": iso(t["created"])}

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
            if not p["priority"]:  # Gitea: a new rule without one comes after every other
                p["priority"] = max((q["priority"] for q in r["protections"].values()), default=0) + 1
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
        if method == "DELETE":
            del r["protections"][p["rule_name"]]
            self._write_push_policy(r)
            return 204, None
        raise ApiError(404, "")
