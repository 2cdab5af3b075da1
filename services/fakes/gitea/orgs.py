"""Organizations of the fake Gitea and the repositories created in them (the
only way the bootstrap makes a repository): `POST /orgs`, `GET /orgs/{org}`,
`POST /orgs/{org}/repos`. Member lists and teams are not modelled: the
creator owns the organization.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

from agensh_ray.services.fakes.gitea.server import ApiError


class OrgsApi:
    """`/orgs` and `/orgs/{org}/repos`; a new repository is a new bare git repository (`git.py`)."""

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
                 "issues": {}, "collaborators": {}, "protections": {}, "tag_protections": [], "hooks": {},
                 "push_offset": 0, "org_owners": set(org["owners"])}
            self._create_bare(r)
            self.repos[(org["login"].lower(), name.lower())] = r
            self._http.owners.update({org["login"], org["login"].lower()})
            return 201, self._repo_json(r, me)
        raise ApiError(404, "")

    def _org_json(self, org: dict) -> dict:
        return {"id": org["id"], "name": org["login"], "username": org["login"], "full_name": org["full_name"],
                "email": org["email"], "avatar_url": "", "description": "", "website": "", "location": "",
                "visibility": "public", "repo_admin_change_team_access": False}
