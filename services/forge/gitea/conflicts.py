"""Which files of a Gitea PR conflict with its base. Gitea's API does not say,
so a bare mirror of the repository (`<state_dir>/mirror.git`) fetches the
base branch and `refs/pull/N/head`, and real git answers:
`git merge-tree --write-tree --name-only` lists the conflicted paths without
a worktree. An empty answer means no conflict or unknown; the adapter then
still tells the agent the PR conflicts and what to do."""

from __future__ import annotations

import logging
import os
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

from agensh_ray.errors import ForgeError

log = logging.getLogger(__name__)


class ConflictFinder:
    """`clone_url()`: a URL of the repository with credentials that may fetch it."""

    def __init__(self, mirror: Path, clone_url: Callable[[], str]):
        self.mirror = Path(mirror)
        self.clone_url = clone_url
        self._lock = threading.Lock()

    def _git(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        env.update({"GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
                    "LC_ALL": "C"})
        res = subprocess.run(["git", "--git-dir", str(self.mirror), *args], capture_output=True,
                             text=True, env=env, timeout=300)
        if check and res.returncode != 0:
            raise ForgeError(f"git {args[0]} failed: {res.stderr.strip()[-300:]}")
        return res

    def files(self, pr: dict) -> list[str]:
        """Paths that conflict between the PR head and its base, by real git (empty: no conflict or unknown)."""
        number = pr["number"]
        base = (pr.get("base") or {}).get("ref") or "main"
        with self._lock:
            try:
                if not (self.mirror / "HEAD").exists():
                    subprocess.run(["git", "init", "--bare", "--quiet", str(self.mirror)], check=True,
                                   capture_output=True)
                self._git("fetch", "--quiet", "--no-tags", self.clone_url(), f"+refs/heads/{base}:refs/agensh/base",
                          f"+refs/pull/{number}/head:refs/agensh/pr")
                res = self._git("merge-tree", "--write-tree", "--name-only", "--no-messages",
                                "refs/agensh/base", "refs/agensh/pr", check=False)
            except (ForgeError, subprocess.SubprocessError, OSError) as exc:
                log.warning("cannot list the conflicts of PR #%s: %s", number, exc)
                return []
        if res.returncode != 1:
            return []  # 0: merges cleanly; >1: git could not tell
        return sorted({line for line in res.stdout.splitlines()[1:] if line.strip()})
