"""Provisioning of Gitea (and Mattermost) for a run: what `python -m
agensh_ray.bootstrap` does, as plain functions over a settings model, so the
CLI and the test fakes (`FakeStack`) run the same code.

Gitea: one user per worker plus `agensh-driver` (the run's own account, used
to read and to score; the run never holds the admin token), each with a
scoped access token; the org and the repository seeded from the task's
starter files with a real `git push`; issue #1 = the task text; branch
protection on main (nobody pushes, 0 approvals, no status checks: PRs are
the only way in), one rule per worker's namespace `<worker>/**` (only that
worker pushes there), one rule `**` for every other branch (nobody pushes
there), every tag protected (services/README.md says what
Gitea enforces of the embedded forge's rules and what it does not); a
webhook with a secret to the router intake.
Mattermost: the same users, a team, the task channel, a token per user.

Tokens and passwords go to the secrets file only (mode 0600, written
atomically) and never to the progress messages (`say`). Idempotent:
everything is looked up before it is created; a token already in the
secrets file that still works is kept; a Gitea token that was lost is
replaced (same name), not added. The secrets file is written after Gitea
and again after Mattermost, so a failure in the second keeps the first.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from agensh_ray.config import worker_ids
from agensh_ray.errors import ProvisionError
from agensh_ray.services.chat.mattermost import MattermostClient
from agensh_ray.services.forge.gitea import GiteaClient
from agensh_ray.task import Task

log = logging.getLogger(__name__)

TOKEN_NAME = "agensh"
TOKEN_SCOPES = ["write:repository", "write:issue", "read:user", "read:organization"]
DRIVER = ("admin", "agensh-driver")
"""(name in the run, login): the run's own account."""
CATCH_ALL = "**"
"""The branch protection rule of every branch no other rule names: nobody pushes there."""
HOOK_EVENTS = ["push", "pull_request", "pull_request_sync", "pull_request_review", "pull_request_comment"]

Say = Callable[[str], None]
"""Where progress messages go (the CLI prints them); never given a token or a password."""


class GiteaSettings(BaseModel):
    """The Gitea to prepare."""

    model_config = ConfigDict(extra="forbid")

    url: str
    """Gitea base URL, e.g. http://localhost:3000."""
    admin_token: SecretStr
    """A Gitea site admin's token: used here only, never written to the secrets file."""
    admin_token_from: str = "the admin token"
    """How a refusal names where the admin token came from (the CLI: `the token in FILE`)."""
    org: str = "agensh"
    """Gitea organization owning the run's repository."""
    repo: str = "run"
    """Repository name."""
    intake_url: str | None = None
    """URL Gitea delivers webhooks to (the run's intake); None: no webhook."""


class MattermostSettings(BaseModel):
    """The Mattermost to prepare."""

    model_config = ConfigDict(extra="forbid")

    url: str
    """Mattermost base URL, e.g. http://localhost:8065."""
    admin_token: SecretStr
    """A Mattermost admin's token: used here only, never written to the secrets file."""
    team: str = "agensh"
    """Team name."""
    channel: str = "task"
    """The task channel's name."""


class ProvisionSettings(BaseModel):
    """Everything `provision` needs besides the task (what the CLI's flags say)."""

    model_config = ConfigDict(extra="forbid")

    workers: int = Field(ge=1, le=1024)
    """Number of workers: users w001.. (see `agensh_ray.config.worker_ids`)."""
    gitea: GiteaSettings
    mattermost: MattermostSettings | None = None
    """None: Gitea only."""
    secrets_out: Path
    """The secrets file (mode 0600): read first (what is there and still works is kept), then rewritten."""


def read_secret_file(path: Path) -> str:
    """A token kept in a file, stripped; ProvisionError when the file is empty."""
    text = Path(path).read_text().strip()
    if not text:
        raise ProvisionError(f"{path} is empty")
    return text


def write_secrets(path: Path, data: dict) -> None:
    """Atomically, mode 0600 from the first byte."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2)
    os.replace(tmp, path)
    os.chmod(path, 0o600)


def provision(settings: ProvisionSettings, task: Task, say: Say = log.info) -> dict:
    """Prepare Gitea (and Mattermost) for `settings.workers` workers on `task`; returns what the secrets
    file now holds. Raises ForgeError / ChatError (an API refusal) or ProvisionError."""
    path = settings.secrets_out
    old: dict = json.loads(path.read_text()) if path.exists() else {}
    workers = worker_ids(settings.workers)
    out = dict(old)
    say(f"bootstrapping Gitea at {settings.gitea.url} for {len(workers)} workers, task {task.name}")
    out["gitea"] = provision_gitea(settings.gitea, workers, task, old.get("gitea") or {}, say)
    write_secrets(path, out)
    if settings.mattermost is not None:
        say(f"bootstrapping Mattermost at {settings.mattermost.url}")
        out["mattermost"] = provision_mattermost(settings.mattermost, workers, old.get("mattermost") or {}, say)
        write_secrets(path, out)
    say(f"done; tokens are in {path} (mode 0600)")
    return out


# ====================================================================== Gitea


class GiteaBootstrap:
    """One Gitea, step by step; each step looks before it creates."""

    def __init__(self, url: str, admin_token: str, org: str, repo: str, old: dict | None, say: Say = log.info):
        self.client = GiteaClient(url)
        self.url = self.client.url
        self.admin = admin_token
        self.org, self.repo = org, repo
        self.old = old or {}
        self.say = say
        self.repo_path = f"/repos/{quote(org)}/{quote(repo)}"

    def _get(self, path: str, token: str | None = None) -> Any:
        return self.client.call("GET", path, token or self.admin, ok=(404,))

    def user(self, name: str, login: str) -> dict:
        old = (self.old.get("users") or {}).get(name) or {}
        u = self._get(f"/users/{quote(login)}")
        password = old.get("password") if old.get("login") == login else None
        if u is None:
            password = secrets.token_urlsafe(18)
            self.client.call("POST", "/admin/users", self.admin, {
                "username": login, "email": f"{login}@agensh.invalid", "password": password,
                "must_change_password": False, "full_name": f"agensh {name}", "send_notify": False,
                "visibility": "public",
            })
            created = True
        else:
            created = False
            if not password:  # we lost it: set a new one (needed for Basic auth on the token API)
                password = secrets.token_urlsafe(18)
                self.client.call("PATCH", f"/admin/users/{quote(login)}", self.admin, {
                    "login_name": login, "source_id": 0, "password": password, "must_change_password": False,
                })
        token = old.get("token") if not created else None
        if token:
            me = self.client.call("GET", "/user", token, ok=(401, 403))
            if not me or me.get("login", "").lower() != login.lower():
                token = None
        if not token:
            basic = (login, password)
            for t in self.client.call("GET", f"/users/{quote(login)}/tokens", basic=basic) or []:
                if t.get("name") == TOKEN_NAME:
                    self.client.call("DELETE", f"/users/{quote(login)}/tokens/{t['id']}", basic=basic)
            t = self.client.call("POST", f"/users/{quote(login)}/tokens", basic=basic,
                                 json_body={"name": TOKEN_NAME, "scopes": TOKEN_SCOPES})
            token = t["sha1"]
        return {"login": login, "password": password, "token": token}

    def org_and_repo(self) -> dict:
        if self._get(f"/orgs/{quote(self.org)}") is None:
            self.client.call("POST", "/orgs", self.admin, {
                "username": self.org, "full_name": "agensh runs", "visibility": "public",
            })
            self.say(f"  created org {self.org}")
        repo = self._get(self.repo_path)
        if repo is None:
            repo = self.client.call("POST", f"/orgs/{quote(self.org)}/repos", self.admin, {
                "name": self.repo, "default_branch": "main", "auto_init": False, "private": False,
                "description": "agensh-ray run repository",
            })
            self.say(f"  created repository {self.org}/{self.repo}")
        return repo

    def seed(self, starter: Path, admin_login: str) -> bool:
        """Push the starter as main's first commit; False if main already exists."""
        if self._get(f"{self.repo_path}/branches/main") is not None:
            return False
        parts = urlsplit(self.url)
        netloc = f"{quote(admin_login, safe='')}:{self.admin}@{parts.netloc}"
        url = urlunsplit((parts.scheme, netloc, f"{parts.path}/{self.org}/{self.repo}.git", "", ""))
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        env.update(GIT_TERMINAL_PROMPT="0", GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull,
                   GIT_AUTHOR_NAME="agensh-bootstrap", GIT_AUTHOR_EMAIL="bootstrap@agensh.invalid",
                   GIT_COMMITTER_NAME="agensh-bootstrap", GIT_COMMITTER_EMAIL="bootstrap@agensh.invalid")

        def git(*args: str) -> None:
            res = subprocess.run(["git", *args], cwd=starter, env=env, capture_output=True, text=True, check=False)
            if res.returncode != 0:
                # never echo the URL: it carries the admin token
                err = res.stderr.replace(self.admin, "***")
                raise ProvisionError(f"git {args[0]} failed: {err.strip()}")

        git("init", "--quiet", "--initial-branch", "main")
        git("add", "-A", ".")
        git("commit", "--quiet", "-m", "Initial commit")
        git("push", "--quiet", url, "HEAD:refs/heads/main")
        return True

    def issue(self, title: str, body: str) -> None:
        issue = self._get(f"{self.repo_path}/issues/1")
        if issue is None:
            created = self.client.call("POST", f"{self.repo_path}/issues", self.admin, {"title": title, "body": body})
            if created["number"] != 1:
                raise ProvisionError(f"the task issue got number {created['number']}, not 1: "
                                     "the repository already had issues; use a fresh --repo")
            self.say("  opened issue #1 (the task)")
        elif issue.get("pull_request"):
            raise ProvisionError("#1 of the repository is a pull request; use a fresh --repo")

    def collaborators(self, logins: list[str]) -> None:
        for login in logins:
            self.client.call("PUT", f"{self.repo_path}/collaborators/{quote(login)}", self.admin,
                             {"permission": "write"})

    def protect_main(self) -> None:
        """main: nobody pushes or force-pushes (a plain-name rule: Gitea matches it ignoring case, so `Main`
        and `MAIN` are main too); PRs merge with 0 approvals, no status checks."""
        rule = {"enable_push": False, "enable_push_whitelist": False, "enable_force_push": False,
                "required_approvals": 0,
                "enable_status_check": False, "status_check_contexts": [], "enable_merge_whitelist": False,
                "block_on_rejected_reviews": False, "block_on_outdated_branch": False,
                "enable_approvals_whitelist": False, "dismiss_stale_approvals": False}
        if self._get(f"{self.repo_path}/branch_protections/main") is None:
            self.client.call("POST", f"{self.repo_path}/branch_protections", self.admin,
                             {"rule_name": "main", **rule})
            self.say("  protected main (no pushes; PRs with 0 approvals)")
        else:
            self.client.call("PATCH", f"{self.repo_path}/branch_protections/main", self.admin, rule)

    def protect_namespaces(self, logins: list[str]) -> None:
        """One rule per worker, `<login>/**`: only that worker pushes and force-pushes there (Gitea has no
        rule for "a user's own prefix", so each is spelled out), then the rule `**` that nobody pushes to:
        every other branch (`feature-x`, `W002/x`: glob rules match case-sensitively). Gitea applies the
        first glob rule that matches, in priority order, and a new rule comes last, so `**` must be the
        newest: when a namespace is added to a repository that has it, it is deleted and made again. Rules
        that exist are kept as they are (Gitea's API addresses a rule by a name that here contains '/')."""
        path = f"{self.repo_path}/branch_protections"
        have = {p.get("rule_name") for p in self.client.call("GET", path, self.admin) or []}
        missing = [login for login in logins if f"{login}/**" not in have]
        if missing and CATCH_ALL in have:
            self.client.call("DELETE", f"{path}/{quote(CATCH_ALL, safe='')}", self.admin)
            have.discard(CATCH_ALL)
        for login in missing:
            self.client.call("POST", path, self.admin, {
                "rule_name": f"{login}/**", "enable_push": True, "enable_push_whitelist": True,
                "push_whitelist_usernames": [login], "enable_force_push": True,
                "enable_force_push_allowlist": True, "force_push_allowlist_usernames": [login],
                "required_approvals": 0, "enable_merge_whitelist": False, "enable_status_check": False,
            })
        if missing:
            self.say(f"  {len(missing)} branch namespaces <worker>/** (only their worker pushes there)")
        if CATCH_ALL not in have:
            self.client.call("POST", path, self.admin, {
                "rule_name": CATCH_ALL, "enable_push": False, "enable_push_whitelist": False,
                "enable_force_push": False, "required_approvals": 0, "enable_merge_whitelist": False,
                "enable_status_check": False,
            })
            self.say("  every other branch (**): nobody pushes")

    def protect_tags(self) -> None:
        """Every tag protected with nobody allowed: workers cannot push tags."""
        tags = self.client.call("GET", f"{self.repo_path}/tag_protections", self.admin) or []
        if not any(t.get("name_pattern") == "*" for t in tags):
            self.client.call("POST", f"{self.repo_path}/tag_protections", self.admin,
                             {"name_pattern": "*", "whitelist_usernames": [], "whitelist_teams": []})
            self.say("  protected all tags (nobody pushes tags)")

    def webhook(self, intake_url: str, secret: str) -> None:
        hooks = self.client.call("GET", f"{self.repo_path}/hooks", self.admin) or []
        config = {"url": intake_url, "content_type": "json", "secret": secret}
        mine = [h for h in hooks if (h.get("config") or {}).get("url") == intake_url]
        if mine:
            self.client.call("PATCH", f"{self.repo_path}/hooks/{mine[0]['id']}", self.admin,
                             {"config": config, "events": HOOK_EVENTS, "active": True})
        else:
            self.client.call("POST", f"{self.repo_path}/hooks", self.admin, {
                "type": "gitea", "config": config, "events": HOOK_EVENTS, "active": True, "branch_filter": "*",
            })
            self.say(f"  webhook -> {intake_url}")


def provision_gitea(settings: GiteaSettings, workers: list[str], task: Task, old: dict, say: Say = log.info) -> dict:
    """Users, tokens, org, seeded repository, issue #1, protected main, webhook; the `gitea` section of the
    secrets file (`old`: the section as it was)."""
    admin_token = settings.admin_token.get_secret_value()
    gb = GiteaBootstrap(settings.url, admin_token, settings.org, settings.repo, old, say)
    me = gb.client.call("GET", "/user", admin_token)
    if not me.get("is_admin"):
        raise ProvisionError(f"{settings.admin_token_from} is not a Gitea site admin's")
    users = {name: gb.user(name, name) for name in workers}
    users[DRIVER[0]] = gb.user(*DRIVER)
    say(f"  {len(users)} Gitea users with scoped tokens")
    gb.org_and_repo()
    with tempfile.TemporaryDirectory(prefix="agensh-seed-") as tmp:
        starter = Path(tmp) / "starter"
        task.materialize_starter(starter)
        if gb.seed(starter, me["login"]):
            say("  pushed the starter to main")
    gb.issue(task.title, task.text())
    gb.collaborators([u["login"] for u in users.values()])
    gb.protect_main()
    gb.protect_namespaces([users[w]["login"] for w in workers])
    gb.protect_tags()
    secret = old.get("webhook_secret") if old.get("intake_url") == settings.intake_url else None
    secret = secret or secrets.token_hex(32)
    if settings.intake_url:
        gb.webhook(settings.intake_url, secret)
    gb.client.close()
    return {"url": gb.url, "org": settings.org, "repo": settings.repo, "users": users, "webhook_secret": secret,
            "intake_url": settings.intake_url}


# ================================================================= Mattermost


def provision_mattermost(settings: MattermostSettings, workers: list[str], old: dict, say: Say = log.info) -> dict:
    """Team, task channel, users with tokens; the `mattermost` section of the secrets file (`old`: the section
    as it was)."""
    admin = settings.admin_token.get_secret_value()
    mm = MattermostClient(settings.url)

    def get(path: str, token: str = admin) -> Any:
        return mm.call("GET", path, token, ok=(404,))

    team = get(f"/teams/name/{settings.team}")
    if team is None:
        team = mm.call("POST", "/teams", admin, {"name": settings.team, "display_name": "agensh", "type": "I"})
        say(f"  created team {settings.team}")
    channel = get(f"/teams/{team['id']}/channels/name/{settings.channel}")
    if channel is None:
        channel = mm.call("POST", "/channels", admin, {
            "team_id": team["id"], "name": settings.channel, "display_name": "task", "type": "O",
            "purpose": "the task channel: every worker reads it at its next turn",
        })
        say(f"  created channel ~{settings.channel}")
    users = {}
    olds = old.get("users") or {}
    for name, login in [*((w, w) for w in workers), DRIVER]:
        prev = olds.get(name) or {}
        u = get(f"/users/username/{login}")
        password = prev.get("password")
        if u is None:
            password = secrets.token_urlsafe(18) + "A1!"
            u = mm.call("POST", "/users", admin, {"username": login, "email": f"{login}@agensh.invalid",
                                                  "password": password, "nickname": f"agensh {name}"})
        mm.call("POST", f"/teams/{team['id']}/members", admin, {"team_id": team["id"], "user_id": u["id"]})
        mm.call("POST", f"/channels/{channel['id']}/members", admin, {"user_id": u["id"]})
        token = prev.get("token") if prev.get("id") == u["id"] else None
        if token:
            me = mm.call("GET", "/users/me", token, ok=(401, 403))
            if not me or me.get("id") != u["id"]:
                token = None
        if not token:
            token = mm.call("POST", f"/users/{u['id']}/tokens", admin, {"description": "agensh run"})["token"]
        users[name] = {"id": u["id"], "username": login, "password": password, "token": token}
    say(f"  {len(users)} Mattermost users with tokens, team {settings.team}, channel ~{settings.channel}")
    mm.close()
    return {"url": mm.url, "team": settings.team, "team_id": team["id"], "channel": settings.channel,
            "channel_id": channel["id"], "users": users}
