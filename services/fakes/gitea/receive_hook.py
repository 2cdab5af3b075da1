"""The fake Gitea's git hook, installed as both `pre-receive` and
`post-receive` of every repository it creates (`git.py`), run as
`python -I -S receive_hook.py <pre-receive|post-receive> <repo dir>` with
the ref updates (`old new ref` lines) on stdin. Standard library only: it
runs in git's process tree, isolated from the project's environment.

* pre-receive: enforce the branch and tag protections as Gitea 1.27 does
  (`agensh-push-policy.json`, written by `git.py`), with Gitea's messages:
  the first rule matching a branch applies (plain names first, compared
  ignoring case; then glob rules, `*` not crossing `/`, `**` crossing it);
  under a rule, deleting the branch is refused, pushing needs `enable_push`
  and, with a whitelist, being on it, and a non-fast-forward push needs
  `enable_force_push` (and its allowlist). A tag matching a protected
  pattern needs its whitelist.
* post-receive: append each ref update, with the pusher (`REMOTE_USER`,
  set by the git HTTP server), to `agensh-pushes.jsonl`; the fake folds
  them after the push (webhooks, PR synchronisation, mergeability checks).
"""

import json
import os
import re
import subprocess
import sys

ZERO = "0" * 40


def glob_regex(pattern: str, separator: str = "/") -> "re.Pattern":
    """gobwas/glob (Gitea's) as a regex: `**` any run, `*` and `?` not crossing the separator."""
    not_sep = f"[^{re.escape(separator)}]" if separator else "."
    out, i = "", 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**", i):
            out, i = out + ".*", i + 2
            continue
        if c == "*":
            out += not_sep + "*"
        elif c == "?":
            out += not_sep
        elif c == "{":
            end = pattern.index("}", i)
            out += "(?:" + "|".join(re.escape(x) for x in pattern[i + 1:end].split(",")) + ")"
            i = end
        elif c == "[":
            end = pattern.index("]", i)
            body = pattern[i + 1:end]
            out += "[^" + body[1:] + "]" if body.startswith("!") else "[" + body + "]"
            i = end
        else:
            out += re.escape(c)
        i += 1
    return re.compile(out + r"\Z", re.S)


def rule_for(branch: str, rules: list):
    for rule in rules:
        name = rule["rule"]
        if any(c in name for c in "*?[{"):
            if glob_regex(name).match(branch):
                return rule
        elif name.casefold() == branch.casefold():
            return rule
    return None


def allowed(user: str, users) -> bool:
    return users is None or user.casefold() in {u.casefold() for u in users}


def refusal(user: str, old: str, new: str, ref: str, policy: dict):
    """Gitea's message refusing this update, or None."""
    if ref.startswith("refs/tags/"):
        tag = ref[len("refs/tags/"):]
        for t in policy.get("tags", []):
            if glob_regex(t["pattern"], "").match(tag) and not allowed(user, t["users"]):
                return f"Tag {tag} is protected"
        return None
    if not ref.startswith("refs/heads/"):
        return None
    branch = ref[len("refs/heads/"):]
    rule = rule_for(branch, policy.get("branches", []))
    if rule is None:
        return None
    if new == ZERO:
        return f"branch {branch} is protected from deletion"
    if not rule["push"] or not allowed(user, rule["push_users"]):
        return f"Not allowed to push to protected branch {branch}"
    if old != ZERO and subprocess.run(["git", "merge-base", "--is-ancestor", old, new]).returncode != 0:
        if not rule["force"] or not allowed(user, rule["force_users"]):
            return f"branch {branch} is protected from force push"
    return None


def main() -> None:
    kind, repo_dir = sys.argv[1], sys.argv[2]
    user = os.environ.get("REMOTE_USER") or "unknown"
    updates = [line.split() for line in sys.stdin.read().splitlines() if len(line.split()) == 3]
    if kind == "pre-receive":
        try:
            with open(os.path.join(repo_dir, "agensh-push-policy.json")) as f:
                policy = json.load(f)
        except FileNotFoundError:
            policy = {}
        for old, new, ref in updates:
            why = refusal(user, old, new, ref, policy)
            if why:
                sys.stderr.write(f"Gitea: {why}\n")
                sys.exit(1)
    else:
        with open(os.path.join(repo_dir, "agensh-pushes.jsonl"), "a") as f:
            for old, new, ref in updates:
                f.write(json.dumps({"user": user, "old": old, "new": new, "ref": ref}) + "\n")


if __name__ == "__main__":
    main()
