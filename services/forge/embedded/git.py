"""The embedded forge's git: every command it runs on its bare repository and
its internal worktree, in an environment that ignores the machine's git setup
(no system or global config, no prompts, C locale, the forge as committer).

Reads go to the bare repository (`--git-dir`); merges happen in `work/`, a
`git worktree` of that same repository, so a merge commit is already in the
bare repository's object store (see the package docstring)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from agensh_ray.errors import ForgeError
from agensh_ray.services.forge.githttp import git_exec_path
from agensh_ray.services.forge.rules import PROTECTED_BRANCH, truncate_diff

FORGE_NAME = "agensh-forge"
FORGE_EMAIL = "forge@agensh.invalid"


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


class ForgeGit:
    """git on `repo` (bare) and `work` (its worktree); commands run in `root` unless told otherwise."""

    def __init__(self, root: Path, repo: Path, work: Path):
        self.root, self.repo, self.work = root, repo, work
        self._git = git_exec_path()
        self._env = _make_env()
        self._worktree_ok = False

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

    def in_work(self, *args: str, **kw: Any) -> subprocess.CompletedProcess:
        """A command in the internal worktree."""
        return self.run(*args, cwd=self.work, **kw)

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
        shutil.rmtree(self.work, ignore_errors=True)
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

    # --------------------------------------------------------------- worktree

    def ensure_worktree(self) -> None:
        """The internal worktree: a detached `git worktree` of repo.git, reused for every merge."""
        if self._worktree_ok:
            return
        healthy = (self.work / ".git").exists() and self.in_work("rev-parse", "--git-dir", check=False).returncode == 0
        if not healthy:
            shutil.rmtree(self.work, ignore_errors=True)
            self.in_repo("worktree", "prune")
            self.in_repo("worktree", "add", "--quiet", "--detach", "--force", str(self.work), PROTECTED_BRANCH)
        self._worktree_ok = True

    def clean_worktree(self) -> None:
        self.in_work("merge", "--abort", check=False)
        self.in_work("reset", "--quiet", "--hard", check=False)
        self.in_work("clean", "-fdxq", check=False)

    def conflicted_in_work(self) -> list[str]:
        """The unmerged paths of a merge that stopped in the worktree."""
        return split_z(self.in_work("diff", "--name-only", "-z", "--diff-filter=U", check=False).stdout)
