"""The embedded forge's pre-receive and post-receive hook: the program git
runs (as `python -I -S receive_hook.py KIND LOG PROTECTED_REF MESSAGE`) when
someone pushes to repo.git.

Why a program of its own: git receive-pack runs hooks as separate processes,
after the pushed objects arrived and before (pre-receive) or after
(post-receive) the refs move. `-I -S` keeps it fast and hermetic (no site
packages, no user paths), so it uses the standard library only and imports
nothing of agensh_ray: the forge passes what it must know in argv.

* pre-receive refuses an update of PROTECTED_REF (main) with MESSAGE, unless
  the server-side environment has AGENSH_FORGE_INTERNAL=1 (an operator pushing
  by path on this machine; the HTTP server never sets it), and records the
  refusal as a `push_rejected` line;
* post-receive records one `push` line per updated ref.

A line is {"kind", "actor", "old", "new", "ref", "ts"}, actor = REMOTE_USER
(set by the HTTP server from the Basic-auth login), ts in microseconds,
appended to LOG (hook-events.jsonl) with one O_APPEND write, so concurrent
pushes never interleave; the forge folds these lines into its event log.
stdin: git's "<old> <new> <ref>" lines.
"""

import json
import os
import sys
import time


def record(log_path: str, kind: str, user: str, refs: list) -> None:
    ts = time.time_ns() // 1000
    data = "".join(
        json.dumps({"kind": kind, "actor": user, "old": old, "new": new, "ref": ref, "ts": ts}) + "\n"
        for old, new, ref in refs
    ).encode()
    if not data:
        return
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)  # one O_APPEND write: concurrent pushes do not interleave
    finally:
        os.close(fd)


def main(argv: list) -> int:
    kind, log_path, protected, message = argv[:4]
    user = os.environ.get("REMOTE_USER") or "local"
    updates = [line.split() for line in sys.stdin.read().splitlines() if len(line.split()) == 3]
    if kind == "pre-receive":
        if os.environ.get("AGENSH_FORGE_INTERNAL") == "1":
            return 0
        bad = [u for u in updates if u[2] == protected]
        if bad:
            sys.stderr.write(message + "\n")
            sys.stderr.write(
                "Nothing from this push was accepted. Push only your branch, e.g. "
                "`git push origin HEAD:refs/heads/<your-branch>`.\n"
            )
            record(log_path, "push_rejected", user, bad)
            return 1
    elif kind == "post-receive":
        record(log_path, "push", user, updates)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
