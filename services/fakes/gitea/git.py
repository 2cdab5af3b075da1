"""The fake Gitea's git side: one bare repository per Gitea repository, the
push policy its hooks enforce, and what follows a ref update.

Pushes arrive over smart HTTP (`git http-backend`, served by `server.py`).
The repository's hook (`receive_hook.py`, a real file copied into
`hooks/` and run with `python -I -S`) refuses pushes to protected branches
in pre-receive and records every accepted ref update in post-receive;
after the push `_on_push` folds those records: a push webhook, and for each
open PR whose head moved a `refs/pull/N/head` update, a `synchronized`
webhook and a new mergeability check (also when its base moved). A merge
made through the API takes the same path (`_after_ref_update`).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from agensh_ray.services.fakes.gitea.server import ApiError

ZERO = "0" * 40
"""The object id git gives a ref that does not exist (a created or deleted branch)."""
RECEIVE_HOOK = Path(__file__).with_name("receive_hook.py")


class GitRepos:
    """Bare repositories: running git in them, their hooks and push policy, and ref updates."""

    def _run(self, r: dict, *args: str, check: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        full_env.update({"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "LC_ALL": "C",
                         "GIT_COMMITTER_NAME": "Gitea", "GIT_COMMITTER_EMAIL": "gitea@fake.invalid"})
        full_env.update(env or {})
        res = subprocess.run([self._git, "--git-dir", str(r["path"]), *args], capture_output=True, text=True,
                             env=full_env, check=False)
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

    def _write_push_policy(self, r: dict) -> None:
        """The protections as the hook reads them: branch rules in Gitea's order (plain names first, then
        globs, each by priority: a rule created without one gets the next, so by creation) and the protected
        tag patterns."""
        rules = sorted(r["protections"].values(), key=lambda p: (any(c in p["rule_name"] for c in "*?[{"),
                                                                 p.get("priority") or 0, p["created"]))
        policy = {
            "branches": [{
                "rule": p["rule_name"], "push": bool(p.get("enable_push")),
                "push_users": p.get("push_whitelist_usernames") if p.get("enable_push_whitelist") else None,
                "force": bool(p.get("enable_force_push")),
                "force_users": p.get("force_push_allowlist_usernames") if p.get("enable_force_push_allowlist")
                else None,
            } for p in rules],
            "tags": [{"pattern": t["name_pattern"], "users": t["whitelist_usernames"]}
                     for t in r.get("tag_protections", [])],
        }
        (r["path"] / "agensh-push-policy.json").write_text(json.dumps(policy))

    def _create_bare(self, r: dict) -> None:
        path: Path = r["path"]
        path.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([self._git, "init", "--bare", "--quiet", "--initial-branch", r["default_branch"], str(path)],
                       check=True, capture_output=True)
        self._run(r, "config", "http.receivepack", "true")
        hooks = path / "hooks"
        hooks.mkdir(exist_ok=True)
        prog = hooks / "fake_gitea_hook.py"
        shutil.copyfile(RECEIVE_HOOK, prog)
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
