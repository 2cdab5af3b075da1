"""The embedded forge's pre-receive and post-receive hook: the program git
runs (as `python -I -S receive_hook.py KIND POLICY`) when someone pushes to
repo.git. The forge enforces here, not in the prompt.

Why a program of its own: git receive-pack runs hooks as separate processes,
after the pushed objects arrived (in quarantine) and before (pre-receive) or
after (post-receive) the refs move. `-I -S` keeps it fast and hermetic (no
site packages, no user paths), so it uses the standard library only and
imports nothing of agensh_ray: the forge writes what it must know to POLICY
(hooks/agensh-policy.json: the event log, the protected branch and its
message, the admin accounts, the size limit per file). The forge imports the
checks below for its own merges (one rule, two callers).

pre-receive refuses the whole push (git updates no ref) when any ref update
breaks a rule, and records one `push_rejected` line per ref with the reason:

* **refs**: only branches (`refs/heads/...`): tags and other refs are
  refused; main is protected under any spelling that folds to it (`Main`,
  `MAIN`, full-width letters...); a worker (REMOTE_USER, set by the HTTP
  server from the login) may create, update, force-update and delete only
  branches named `<worker>/...`. Admin accounts may push any branch but main.
* **content** of every commit the push brings: every path it adds or
  changes (`git diff-tree` against each parent, so a subtree moved to
  another depth is seen at its new place) must be a plain relative path
  inside the tree: no empty, `.` or `..` component, no backslash or control
  character, no `.git` component in any case or form a filesystem could
  fold to it (`.GIT`, `.git.`, `.git `, `git~1`, with ignorable Unicode); a
  symlink must point inside the tree: relative, leading `..` only and no more
  of them than the link's depth, no `.git` in it; a file may not exceed the
  size limit. (git's own `receive.fsckObjects` checks the objects before
  this runs: malformed trees and `..`/`.git` entries are refused there
  already, and the HTTP server records those refusals.)

The server-side environment variable AGENSH_FORGE_INTERNAL=1 (an operator
pushing by path on this machine; the HTTP server never sets it) skips the
ref rules, not the content checks.

post-receive records one `push` line per updated ref. A line is {"kind",
"actor", "old", "new", "ref", "ts", "reason"?}, ts in microseconds, appended
to the event log (hook-events.jsonl) with one O_APPEND write, so concurrent
pushes never interleave; the forge folds these lines into its event log.
stdin: git's "<old> <new> <ref>" lines."""

import json
import os
import subprocess
import sys
import time
import unicodedata

ZERO = "0" * 40
HEADS = "refs/heads/"
_IGNORABLE = {chr(c) for c in [*range(0x200C, 0x2010), *range(0x202A, 0x202F), *range(0x206A, 0x2070), 0xFEFF]}
"""Code points HFS+ ignores in names (so `.g\\u200cit` is `.git` there)."""

# ============================================================================ refs


def fold(name: str) -> str:
    """A name as a case-insensitive, normalising filesystem (or a person) would read it."""
    return unicodedata.normalize("NFKC", "".join(c for c in name if c not in _IGNORABLE)).casefold()


def names_protected(branch: str, protected: str) -> bool:
    """Does `branch` fold to the protected branch (`Main`, `MAIN`, `ｍａｉｎ` all name main)?"""
    return fold(branch) == fold(protected)


def ref_problem(user: str, ref: str, admins: list, protected: str, message: str):
    """Why `user` may not create, update or delete `ref`, or None."""
    if not ref.startswith(HEADS):
        what = "tags are" if ref.startswith("refs/tags/") else "only branches may be pushed, not"
        return (f"{ref}: {what} refused on this forge; push your work to a branch of your own "
                f"(git push origin HEAD:refs/heads/{user}/<topic>)")
    branch = ref[len(HEADS):]
    if names_protected(branch, protected):
        spelled = ("" if branch == protected
                   else f" ({branch!r} names {protected}: branch names are compared ignoring case)")
        return f"{ref}: {message}{spelled}"
    if user in admins or branch.startswith(user + "/"):
        return None
    return (f"{ref}: {branch} is not yours: you ({user}) may create, update, force-push and delete only "
            f"branches named {user}/<topic>; push yours with git push origin HEAD:refs/heads/{user}/<topic>")


# ============================================================================ paths


def component_problem(name: str):
    """Why one path component may not be checked out, or None."""
    if name in ("", ".", ".."):
        return f"a {name or 'empty'!r} path component (paths must stay inside the repository)"
    if "\\" in name:
        return "a backslash (a path separator on Windows)"
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        return "a control character"
    folded = fold(name)
    if folded in (".", ".."):
        return f"a component that reads as {folded!r}"
    base = folded.split(":", 1)[0].rstrip(" .")
    if base in (".git", "git~1"):
        return f"a '.git' component ({name!r}: .git in any case or spelling is git's own folder)"
    return None


def path_problem(path: str):
    """Why a path in a tree is refused, or None."""
    if path.startswith("/"):
        return "an absolute path"
    for part in path.split("/"):
        problem = component_problem(part)
        if problem:
            return problem
    return None


def symlink_problem(path: str, target: str):
    """Why the symlink at `path` pointing to `target` is refused, or None."""
    if not target:
        return "a symlink with an empty target"
    if target.startswith(("/", "~")) or "\\" in target or (len(target) > 1 and target[1] == ":"):
        return f"a symlink to {target!r}: its target is absolute (links must point inside the repository)"
    ups, named = 0, False
    for part in target.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if named:
                return f"a symlink to {target!r}: '..' after a name (write the target without it)"
            ups += 1
            continue
        named = True
        problem = component_problem(part)
        if problem:
            return f"a symlink to {target!r}: {problem}"
    if ups > path.count("/"):
        return f"a symlink to {target!r}: it points outside the repository"
    return None


def mib(n: int) -> str:
    return f"{n / 1048576:.1f} MiB" if n % 1048576 else f"{n // 1048576} MiB"


# ============================================================================ reading objects


class Objects:
    """What the checks read from a repository, through `run(args, input) -> stdout bytes` (git)."""

    def __init__(self, run):
        self.run = run

    def new_commits(self, tips: list) -> list:
        """The commits reachable from `tips` and from no ref yet (what a push brings)."""
        if not tips:
            return []
        return self.run(["rev-list", *tips, "--not", "--all"], b"").decode().split()

    def changes(self, diff_args: list, stdin: bytes = b"") -> list:
        """[(where, path, mode, sha)] of every path added or changed: `diff_args` for `git diff-tree`."""
        out = self.run(["diff-tree", "-r", "-z", "--raw", "--no-renames", *diff_args], stdin).decode("utf-8", "replace")
        items, where, tokens = [], "", out.split("\0")
        i = 0
        while i < len(tokens):
            tok = tokens[i]
            if tok.startswith(":") and i + 1 < len(tokens):
                meta = tok[1:].split()
                if len(meta) >= 5 and meta[4][:1] in "AMT" and meta[1] != "160000":
                    items.append((where, tokens[i + 1], meta[1], meta[3]))
                i += 2
                continue
            if tok:
                where = tok
            i += 1
        return items

    def commit_changes(self, commits: list) -> list:
        """Changes of each commit against each of its parents (a root commit: its whole tree)."""
        if not commits:
            return []
        return self.changes(["--stdin", "--root", "-m"], "".join(c + "\n" for c in commits).encode())

    def sizes(self, shas: list) -> dict:
        out = self.run(["cat-file", "--batch-check"], "".join(s + "\n" for s in shas).encode()).decode()
        sizes = {}
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[2].isdigit():
                sizes[parts[0]] = int(parts[2])
        return sizes

    def contents(self, shas: list) -> dict:
        out = self.run(["cat-file", "--batch"], "".join(s + "\n" for s in shas).encode())
        found, pos = {}, 0
        while pos < len(out):
            nl = out.index(b"\n", pos)
            head = out[pos:nl].decode().split()
            pos = nl + 1
            if len(head) != 3:  # "<sha> missing"
                continue
            size = int(head[2])
            found[head[0]] = out[pos:pos + size].decode("utf-8", "replace")
            pos += size + 1
        return found


def content_problems(objects: Objects, changes: list, max_file_bytes: int) -> list:
    """What is wrong with the paths, links and file sizes of `changes` (as `Objects.changes` lists them)."""
    problems, seen = [], set()
    links, blobs = [], []
    for where, path, mode, sha in changes:
        if (path, mode, sha) in seen:
            continue
        seen.add((path, mode, sha))
        label = f"{where[:12]}: " if where else ""
        problem = path_problem(path)
        if problem:
            problems.append(f"{label}{path!r}: {problem}")
            continue
        (links if mode == "120000" else blobs).append((label, path, sha))
    sizes = objects.sizes(sorted({sha for _, _, sha in blobs})) if blobs else {}
    for label, path, sha in blobs:
        size = sizes.get(sha)
        if size is None:
            problems.append(f"{label}{path!r}: its content (object {sha[:12]}) is missing from the repository")
        elif max_file_bytes and size > max_file_bytes:
            problems.append(f"{label}{path!r} is {size} bytes ({mib(size)}): files are limited to "
                            f"{mib(max_file_bytes)} ({max_file_bytes} bytes) each on this forge")
    targets = objects.contents(sorted({sha for _, _, sha in links})) if links else {}
    for label, path, sha in links:
        problem = symlink_problem(path, targets.get(sha, ""))
        if problem:
            problems.append(f"{label}{path!r}: {problem}")
    return problems


# ============================================================================ the hook


def record(log_path: str, kind: str, user: str, refs: list, reasons: dict = None) -> None:
    ts = time.time_ns() // 1000
    lines = []
    for old, new, ref in refs:
        rec = {"kind": kind, "actor": user, "old": old, "new": new, "ref": ref, "ts": ts}
        if reasons and reasons.get(ref):
            rec["reason"] = reasons[ref]
        lines.append(json.dumps(rec) + "\n")
    data = "".join(lines).encode()
    if not data:
        return
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)  # one O_APPEND write: concurrent pushes do not interleave
    finally:
        os.close(fd)


def _git(args: list, stdin: bytes) -> bytes:
    res = subprocess.run(["git", *args], input=stdin, capture_output=True, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"git {args[0]} failed: {res.stderr.decode('utf-8', 'replace').strip()}")
    return res.stdout


def refusals(user: str, updates: list, policy: dict, internal: bool) -> tuple:
    """({ref: why it is refused}, the lines to show the pusher); both empty: accept the push."""
    if not internal:
        bad = {}
        for _old, _new, ref in updates:
            problem = ref_problem(user, ref, policy.get("admins", []), policy["protected"], policy["message"])
            if problem:
                bad[ref] = problem
        if bad:
            return bad, list(bad.values())
    objects = Objects(_git)
    commits = objects.new_commits([new for _old, new, _ref in updates if new != ZERO])
    problems = content_problems(objects, objects.commit_changes(commits), policy.get("max_file_bytes", 0))
    if not problems:
        return {}, []
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return {ref: f"{problems[0]}{more}" for _old, _new, ref in updates}, problems


def main(argv: list) -> int:
    kind, policy_path = argv[:2]
    with open(policy_path) as f:
        policy = json.load(f)
    user = os.environ.get("REMOTE_USER") or "local"
    updates = [line.split() for line in sys.stdin.read().splitlines() if len(line.split()) == 3]
    if kind == "post-receive":
        record(policy["log"], "push", user, updates)
        return 0
    if kind != "pre-receive":
        return 0
    try:
        bad, lines = refusals(user, updates, policy, os.environ.get("AGENSH_FORGE_INTERNAL") == "1")
    except Exception as exc:  # a check that cannot run refuses: never accept what was not checked
        bad = {ref: f"the forge could not check this push ({exc}); try again" for _o, _n, ref in updates}
        lines = list(bad.values())
    if not bad:
        return 0
    for line in lines:
        sys.stderr.write(f"refused: {line}\n")
    sys.stderr.write("Nothing from this push was accepted. Push only your own branch, e.g. "
                     f"`git push origin HEAD:refs/heads/{user}/<topic>`.\n")
    record(policy["log"], "push_rejected", user, [u for u in updates if u[2] in bad], bad)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
