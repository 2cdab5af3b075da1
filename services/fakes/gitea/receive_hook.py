"""The fake Gitea's git hook, installed as both `pre-receive` and
`post-receive` of every repository it creates (`git.py`), run as
`python -I -S receive_hook.py <pre-receive|post-receive> <repo dir>` with
the ref updates (`old new ref` lines) on stdin. Standard library only: it
runs in git's process tree, isolated from the project's environment.

* pre-receive: refuse a push to a branch listed in `agensh-no-push.json`
  (the protected branches with `enable_push: false`), with Gitea's message.
* post-receive: append each ref update, with the pusher (`REMOTE_USER`,
  set by the git HTTP server), to `agensh-pushes.jsonl`; the fake folds
  them after the push (webhooks, PR synchronisation, mergeability checks).
"""

import json
import os
import sys


def main() -> None:
    kind, repo_dir = sys.argv[1], sys.argv[2]
    user = os.environ.get("REMOTE_USER") or "unknown"
    updates = [line.split() for line in sys.stdin.read().splitlines() if len(line.split()) == 3]
    if kind == "pre-receive":
        try:
            with open(os.path.join(repo_dir, "agensh-no-push.json")) as f:
                closed = json.load(f)
        except FileNotFoundError:
            closed = []
        for _old, _new, ref in updates:
            if ref.startswith("refs/heads/") and ref[len("refs/heads/"):] in closed:
                sys.stderr.write(f"Gitea: Not allowed to push to protected branch {ref[len('refs/heads/'):]}\n")
                sys.exit(1)
    else:
        with open(os.path.join(repo_dir, "agensh-pushes.jsonl"), "a") as f:
            for old, new, ref in updates:
                f.write(json.dumps({"user": user, "old": old, "new": new, "ref": ref}) + "\n")


if __name__ == "__main__":
    main()
