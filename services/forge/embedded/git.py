"""The embedded forge's git: every command it runs on its bare repository, in
an environment that ignores the machine's git setup (no system or global
config, no prompts, C locale, the forge as committer).

Merges need no worktree: `git merge-tree --write-tree` merges in the object
store, `commit-tree` makes the merge commit, `update-ref` moves the base with
a compare-and-swap. Nothing is checked out, so a crafted path cannot reach
the disk and a failed merge leaves no index, lock or half-merged file behind
(see the package docstring)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from agensh_ray.errors import ForgeError
from agensh_ray.services.forge.embedded.receive_hook import Objects, content_problems
from agensh_ray.services.forge.githttp import git_exec_path
from agensh_ray.services.forge.rules import PROTECTED_BRANCH, truncate_diff

FORGE_NAME = "agensh-forge"
FORGE_EMAIL = "forge@agensh.invalid"
STALE_LOCK_S = 30.0
"""A ref lock older than this is left by a process that died: git holds one for milliseconds."""


def identity(user: str) -> dict[str, str]:
    """Author = the worker; committer stays agensh-forge."""
    return {"GIT_AUTHOR_NAME": user, "GIT_AUTHOR_EMAIL": f"{user}@agensh.invalid"}


def split_z(out: str) -> list[str]:
    """The sorted distinct paths of a `-z` listing."""
    return sorted({p for p in out.split("\0") if p})


def _make_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        {
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_COMMITTER_NAME": FORGE_NAME,
            "GIT_COMMITTER_EMAIL": FORGE_EMAIL,
            "GIT_AUTHOR_NAME": FORGE_NAME,
            "GIT_AUTHOR_EMAIL": FORGE_EMAIL,
            "LC_ALL": "C",
        }
    )
    return env


class MergeFailed(Exception):
    """git could not merge (not a conflict): the reason, in git's words."""


class ForgeGit:
    """git on `repo` (bare); commands run in `root` unless told otherwise."""

    def __init__(self, root: Path, repo: Path):
        self.root, self.repo = root, repo
        self._git = git_exec_path()
        self._env = _make_env()

    def run(
        self, *args: str, cwd: Path | None = None, check: bool = True, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess:
        res = subprocess.run(
            [self._git, *args],
            cwd=cwd or self.root,
            env={**self._env, **(env or {})},
            check=False,
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="replace",
        )
        if check and res.returncode != 0:
            raise ForgeError(f"forge internal error: git {' '.join(args[:3])} failed: {res.stderr.strip()}")
        return res

    def in_repo(self, *args: str, **kw: Any) -> subprocess.CompletedProcess:
        """A command on the bare repository."""
        return self.run("--git-dir", str(self.repo), *args, **kw)

    # ------------------------------------------------------------------ reads

    def rev(self, ref: str) -> str | None:
        """The commit `ref` names, None if it names none."""
        res = self.in_repo("rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}", check=False)
        return res.stdout.strip() if res.returncode == 0 else None

    def is_ancestor(self, a: str, b: str) -> bool:
        return self.in_repo("merge-base", "--is-ancestor", a, b, check=False).returncode == 0

    def changed_files(self, base_sha: str, head_sha: str) -> list[str]:
        """The paths a PR from base to head changes (three-dot: since their merge base)."""
        res = self.in_repo("diff", "--name-only", "-z", "--no-renames", f"{base_sha}...{head_sha}", check=False)
        return split_z(res.stdout) if res.returncode == 0 else []

    def diff(self, *revs: str) -> str:
        """The diff of `revs`, cut at MAX_DIFF_CHARS; empty if git cannot make it."""
        res = self.in_repo("diff", "--no-color", "--no-ext-diff", "--no-textconv", "-M", *revs, check=False)
        return truncate_diff(res.stdout) if res.returncode == 0 else ""

    def well_formed_branch(self, name: str) -> bool:
        return self.run("check-ref-format", f"refs/heads/{name}", check=False).returncode == 0

    def initialized(self) -> bool:
        return (self.repo / "HEAD").exists() and self.rev(f"refs/heads/{PROTECTED_BRANCH}") is not None

    # ------------------------------------------------------------------ setup

    def create(self, starter: Path, author: str) -> None:
        """A new bare repo.git whose main is one commit of `starter`'s files, by `author`."""
        if self.repo.exists():  # a half-made repository from an interrupted init
            shutil.rmtree(self.repo)
        self.run("init", "--bare", "--quiet", "--initial-branch", PROTECTED_BRANCH, str(self.repo))
        for key, value in (
            ("http.receivepack", "true"),
            ("http.uploadpack", "true"),
            ("core.logAllRefUpdates", "true"),
            ("uploadpack.allowFilter", "true"),
            ("receive.advertisePushOptions", "false"),
        ):
            self.in_repo("config", key, value)
        # The seed commit: real git, with the starter directory as the work
        # tree and a throw-away index (the bare repo has no worktree yet).
        index = self.root / ".seed-index"
        index.unlink(missing_ok=True)
        seed = {"GIT_INDEX_FILE": str(index), **identity(author)}
        try:
            self.in_repo("--work-tree", str(starter.resolve()), "add", "-A", ".", env=seed, cwd=starter)
            tree = self.in_repo("write-tree", env=seed).stdout.strip()
            commit = self.in_repo("commit-tree", tree, "-m", "Initial commit", env=seed).stdout.strip()
        finally:
            index.unlink(missing_ok=True)
        self.in_repo("update-ref", "-m", "forge: initial commit", f"refs/heads/{PROTECTED_BRANCH}", commit, "")

    def objects(self) -> Objects:
        """The repository as the receive hook's checks read it."""

        def run(args: list[str], stdin: bytes) -> bytes:
            res = subprocess.run([self._git, "--git-dir", str(self.repo), *args], input=stdin, capture_output=True,
                                 env=self._env, cwd=self.root, check=False)
            if res.returncode != 0:
                raise MergeFailed(f"git {args[0]}: {res.stderr.decode('utf-8', 'replace').strip()}")
            return res.stdout

        return Objects(run)

    # ------------------------------------------------------------------ merge

    def merge_tree(self, base: str, head: str) -> tuple[str | None, list[str]]:
        """Merge `head` into `base` in the object store: (tree, []) when clean, (None, conflicted paths) on a
        conflict; MergeFailed when git cannot merge at all."""
        # Every object the head brings must be there: git 2.39's merge-tree reads a tree it cannot find as
        # empty (it says "error: Could not read" and exits 0 with a tree that drops every file).
        whole = self.in_repo("rev-list", "--objects", "--quiet", head, "--not", base, check=False)
        if whole.returncode != 0:
            raise MergeFailed(f"the branch's objects are incomplete: {whole.stderr.strip()}")
        res = self.in_repo("merge-tree", "--write-tree", "--no-messages", "--name-only", "-z", base, head, check=False)
        said = [line for line in res.stderr.splitlines() if line.startswith(("error:", "fatal:"))]
        if said and res.returncode in (0, 1):
            raise MergeFailed(f"git merge-tree: {'; '.join(said)}")
        if res.returncode == 0:
            return res.stdout.split("\0", 1)[0].strip(), []
        if res.returncode == 1:
            return None, split_z(res.stdout.split("\0", 1)[1] if "\0" in res.stdout else "") or ["(unknown)"]
        raise MergeFailed((res.stderr or res.stdout).strip() or f"git merge-tree exited with {res.returncode}")

    def tree_problems(self, base: str, tree: str, max_file_bytes: int) -> list[str]:
        """What the receive hook would refuse in the paths `tree` adds or changes over `base`'s tree."""
        objects = self.objects()
        return content_problems(objects, objects.changes([f"{base}^{{tree}}", tree]), max_file_bytes)

    def commit_tree(self, tree: str, parents: list[str], message: str, author: str) -> str:
        args = ["commit-tree", tree]
        for p in parents:
            args += ["-p", p]
        res = self.in_repo(*args, "-m", message, env=identity(author), check=False)
        if res.returncode != 0:
            raise MergeFailed(f"git commit-tree: {res.stderr.strip()}")
        return res.stdout.strip()

    def move_ref(self, ref: str, new: str, old: str, reason: str) -> bool:
        """Compare-and-swap `ref` from `old` to `new`: False if it no longer is `old`. A lock left by a
        process that died (older than STALE_LOCK_S) is removed and the swap tried again."""
        for attempt in range(2):
            res = self.in_repo("-c", "core.filesRefLockTimeout=2000", "update-ref", "-m", reason, ref, new, old,
                               check=False)
            if res.returncode == 0:
                return True
            if self.rev(ref) != old:
                return False
            lock = self.repo / f"{ref}.lock"
            if attempt == 0 and lock.exists() and time.time() - lock.stat().st_mtime > STALE_LOCK_S:
                lock.unlink(missing_ok=True)
                continue
            raise MergeFailed(f"git update-ref: {res.stderr.strip()}")
        return False

    def retire_worktree(self, work: Path) -> None:
        """Remove the internal worktree earlier versions merged in (and any lock left in it)."""
        if work.exists() or (self.repo / "worktrees").exists():
            shutil.rmtree(work, ignore_errors=True)
            self.in_repo("worktree", "prune", check=False)
