"""Users of the fake Gitea: the site admin's user API (create, set a password),
a user's profile, and personal access tokens.

As in Gitea, tokens are only created, listed and deleted with Basic auth (a
password, not a token: `how == "basic"`), by the user themselves or an admin,
need at least one scope, and a token's secret is shown once, at creation.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

from agensh_ray.services.fakes.gitea.server import ApiError, iso


class UsersApi:
    """`/admin/users`, `/users/{name}` and `/users/{name}/tokens`; the user records and their JSON."""

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
            "language": "", "is_admin": u["is_admin"], "last_login": iso(u["created"]),
            "created": iso(u["created"]), "restricted": False, "active": True, "prohibit_login": False,
            "location": "", "website": "", "description": "", "visibility": "public", "followers_count": 0,
            "following_count": 0, "starred_repos_count": 0,
        }

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
                              "scopes": t["scopes"], "created_at": iso(t["created"]), "last_used_at": iso(t["created"])}
                             for t in mine]
            if method == "POST" and len(rest) == 1:
                if any(t["name"] == data["name"] for t in mine):
                    raise ApiError(400, "access token name has been used already")
                scopes = data.get("scopes") or []
                if not scopes:
                    raise ApiError(400, "access token must have a scope")
                t = self._new_token(u["login"], data["name"], scopes)
                return 201, {"id": t["id"], "name": t["name"], "sha1": t["sha1"], "token_last_eight": t["sha1"][-8:],
                             "scopes": scopes, "created_at": iso(t["created"]), "last_used_at": iso(t["created"])}
            if method == "DELETE" and len(rest) == 2:
                for t in mine:
                    if str(t["id"]) == rest[1] or t["name"] == rest[1]:
                        del self.tokens[t["sha1"]]
                        return 204, None
                raise ApiError(404, "")
        raise ApiError(404, "")
