"""The fake Mattermost's REST resources: users (created by an admin) and
their personal access tokens, teams and team membership, open channels and
direct channels (named `<id>__<id>`, ids sorted, one per pair), channel
membership, posts and `GET /channels/{id}/posts?since=`, and the channels of
a user in a team (DMs included). Posting needs channel membership, as in
Mattermost; a new post is broadcast on the websockets of the channel's
members (`websocket.py`).
"""

from __future__ import annotations

from typing import Any

from agensh_ray.services.fakes.mattermost.server import AppError, new_id, now_ms


class RestApi:
    """`/users`, `/teams`, `/channels`, `/posts`: the records and their JSON."""

    def _new_user(self, username: str, email: str, roles: str = "system_user", password: str = "",
                  nickname: str = "") -> dict:
        t = now_ms()
        u = {"id": new_id(), "create_at": t, "update_at": t, "delete_at": 0, "username": username,
             "first_name": "", "last_name": "", "nickname": nickname, "email": email, "email_verified": True,
             "auth_service": "", "roles": roles, "locale": "en", "props": {}, "last_password_update": t,
             "last_picture_update": 0, "failed_attempts": 0, "mfa_active": False,
             "notify_props": {"email": "true", "push": "mention", "desktop": "mention", "desktop_sound": "true",
                              "mention_keys": username, "channel": "true", "first_name": "false"},
             "_password": password}
        # No `timezone`: the server sends useAutomaticTimezone as the string "true" where the spec says
        # boolean; the field is optional, so the fake leaves it out rather than contradict the spec.
        self.users[u["id"]] = u
        return u

    def _new_token(self, user_id: str) -> str:
        token = new_id()
        self.tokens[token] = user_id
        return token

    @staticmethod
    def _user_json(u: dict) -> dict:
        return {k: v for k, v in u.items() if not k.startswith("_")}

    def _channel_json(self, c: dict) -> dict:
        return dict(c)

    def _member_json(self, cid: str, uid: str) -> dict:
        return {"channel_id": cid, "user_id": uid, "roles": "channel_user", "last_viewed_at": 0, "msg_count": 0,
                "mention_count": 0, "last_update_at": now_ms(),
                "notify_props": {"desktop": "default", "email": "default", "mark_unread": "all",
                                 "push": "default", "ignore_channel_mentions": "default"}}

    def _users(self, method: str, rest: list[str], data: Any, me: str) -> tuple[int, Any]:
        if not rest and method == "POST":
            if not self._is_admin(me):
                raise AppError(403, "api.context.permissions.app_error", "You do not have the appropriate permissions.")
            if any(u["username"] == data["username"] for u in self.users.values()):
                raise AppError(400, "app.user.save.username_exists.app_error",
                               "An account with that username already exists.")
            if not data.get("password"):
                raise AppError(400, "model.user.is_valid.pwd.app_error", "Your password must contain at least 5 characters.")
            u = self._new_user(data["username"], data["email"], password=data["password"],
                               nickname=data.get("nickname", ""))
            return 201, self._user_json(u)
        if rest[:1] == ["username"] and len(rest) == 2 and method == "GET":
            for u in self.users.values():
                if u["username"] == rest[1]:
                    return 200, self._user_json(u)
            raise AppError(404, "app.user.missing_account.const", "Unable to find the user.")
        if len(rest) == 1 and method == "GET":
            return 200, self._user_json(self._user_ref(rest[0], me))
        if len(rest) == 2 and rest[1] == "tokens" and method == "POST":
            u = self._user_ref(rest[0], me)
            if u["id"] != me and not self._is_admin(me):
                raise AppError(403, "api.context.permissions.app_error", "You do not have the appropriate permissions.")
            token = self._new_token(u["id"])
            return 201, {"id": new_id(), "token": token, "user_id": u["id"], "description": data["description"]}
        if len(rest) == 4 and rest[1] == "teams" and rest[3] == "channels" and method == "GET":
            u = self._user_ref(rest[0], me)
            if u["id"] != me and not self._is_admin(me):
                raise AppError(403, "api.context.permissions.app_error", "You do not have the appropriate permissions.")
            out = [self._channel_json(c) for cid, c in self.channels.items()
                   if u["id"] in self.channel_members[cid] and (c["team_id"] in (rest[2], ""))]
            return 200, out
        raise AppError(404, "api.context.404.app_error", "Sorry, we could not find the page.")

    def _teams(self, method: str, rest: list[str], data: Any, me: str) -> tuple[int, Any]:
        if not rest and method == "POST":
            if any(t["name"] == data["name"] for t in self.teams.values()):
                raise AppError(400, "app.team.save.existing.app_error", "A team with that name already exists")
            t = now_ms()
            team = {"id": new_id(), "create_at": t, "update_at": t, "delete_at": 0, "display_name": data["display_name"],
                    "name": data["name"], "description": "", "email": "", "type": data["type"], "allowed_domains": "",
                    "invite_id": new_id(), "allow_open_invite": data["type"] == "O"}
            self.teams[team["id"]] = team
            self.team_members[team["id"]] = {me}
            return 201, team
        if rest[:1] == ["name"] and len(rest) == 2 and method == "GET":
            for t in self.teams.values():
                if t["name"] == rest[1]:
                    return 200, t
            raise AppError(404, "app.team.get_by_name.missing.app_error", "Unable to find the existing team")
        team = self.teams.get(rest[0]) if rest else None
        if team is None:
            raise AppError(404, "app.team.get.find.app_error", "Unable to find the existing team")
        if rest[1:] == ["members"] and method == "POST":
            uid = data["user_id"]
            self._user_ref(uid, me)
            self.team_members[team["id"]].add(uid)
            return 201, {"team_id": team["id"], "user_id": uid, "roles": "team_user", "delete_at": 0,
                         "scheme_user": True, "scheme_admin": False, "explicit_roles": ""}
        if len(rest) == 4 and rest[1:3] == ["channels", "name"] and method == "GET":
            for c in self.channels.values():
                if c["team_id"] == team["id"] and c["name"] == rest[3]:
                    return 200, self._channel_json(c)
            raise AppError(404, "app.channel.get_by_name.missing.app_error", "Channel does not exist.")
        raise AppError(404, "api.context.404.app_error", "Sorry, we could not find the page.")

    def _new_channel(self, team_id: str, name: str, display: str, ctype: str, creator: str, purpose: str = "") -> dict:
        t = now_ms()
        c = {"id": new_id(), "create_at": t, "update_at": t, "delete_at": 0, "team_id": team_id, "type": ctype,
             "display_name": display, "name": name, "header": "", "purpose": purpose, "last_post_at": 0,
             "total_msg_count": 0, "extra_update_at": 0, "creator_id": creator}
        self.channels[c["id"]] = c
        self.channel_members[c["id"]] = set()
        return c

    def _channels(self, method: str, rest: list[str], q: dict, data: Any, me: str) -> tuple[int, Any]:
        if not rest and method == "POST":
            if data["team_id"] not in self.teams:
                raise AppError(400, "api.channel.create_channel.team.app_error", "Invalid team")
            if any(c["team_id"] == data["team_id"] and c["name"] == data["name"] for c in self.channels.values()):
                raise AppError(400, "store.sql_channel.save_channel.exists.app_error",
                               "A channel with that name already exists on the same team")
            c = self._new_channel(data["team_id"], data["name"], data["display_name"], data["type"], me,
                                  data.get("purpose", ""))
            self.channel_members[c["id"]].add(me)
            return 201, self._channel_json(c)
        if rest == ["direct"] and method == "POST":
            if len(data) != 2 or any(uid not in self.users for uid in data):
                raise AppError(400, "api.channel.create_direct_channel.invalid_user.app_error", "Invalid user ID")
            if me not in data and not self._is_admin(me):
                raise AppError(403, "api.context.permissions.app_error", "You do not have the appropriate permissions.")
            name = "__".join(sorted(data))
            for c in self.channels.values():
                if c["type"] == "D" and c["name"] == name:
                    return 201, self._channel_json(c)
            c = self._new_channel("", name, "", "D", me)
            self.channel_members[c["id"]].update(data)
            return 201, self._channel_json(c)
        c = self.channels.get(rest[0]) if rest else None
        if c is None:
            raise AppError(404, "app.channel.get.existing.app_error", "Unable to find the existing channel.")
        if rest[1:] == ["members"] and method == "POST":
            uid = data["user_id"]
            self._user_ref(uid, me)
            if c["team_id"] and uid not in self.team_members.get(c["team_id"], set()):
                raise AppError(403, "api.channel.add_members.user_denied", "User is not a member of the team.")
            self.channel_members[c["id"]].add(uid)
            return 201, self._member_json(c["id"], uid)
        if rest[1:] == ["posts"] and method == "GET":
            if me not in self.channel_members[c["id"]] and not self._is_admin(me):
                raise AppError(403, "api.context.permissions.app_error", "You do not have the appropriate permissions.")
            since = int(q.get("since", 0))
            posts = sorted((p for p in self.posts.values() if p["channel_id"] == c["id"] and
                            (p["create_at"] > since or p["update_at"] > since)), key=lambda p: p["create_at"],
                           reverse=True)
            return 200, {"order": [p["id"] for p in posts], "posts": {p["id"]: p for p in posts},
                         "next_post_id": "", "prev_post_id": "", "has_next": False}
        raise AppError(404, "api.context.404.app_error", "Sorry, we could not find the page.")

    def _create_post(self, data: dict, me: str) -> tuple[int, Any]:
        c = self.channels.get(data["channel_id"])
        if c is None or me not in self.channel_members[c["id"]]:
            raise AppError(403, "api.context.permissions.app_error", "You do not have the appropriate permissions.")
        if not data.get("message", "").strip():
            raise AppError(400, "model.post.is_valid.msg.app_error", "Invalid message")
        t = max(now_ms(), max((p["create_at"] + 1 for p in self.posts.values()), default=0))
        p = {"id": new_id(), "create_at": t, "update_at": t, "edit_at": 0, "delete_at": 0, "is_pinned": False,
             "user_id": me, "channel_id": c["id"], "root_id": data.get("root_id", ""), "original_id": "",
             "message": data["message"], "type": "", "props": {}, "hashtags": "", "pending_post_id": "",
             "reply_count": 0, "metadata": {}}
        self.posts[p["id"]] = p
        c["last_post_at"] = t
        c["total_msg_count"] += 1
        self._broadcast(c, p)
        return 201, p
