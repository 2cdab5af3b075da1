"""A worker's place on disk: its own clone of the repository, with its own forge
credentials in `origin`, its sealed HOME, the environment its agent and its
git commands run with, and the sandbox that confines the agent to them.

One network fetch per host: the first worker's clone fills a seed mirror
(refreshed when older than SEED_MAX_AGE_S), and every worker of the host then
clones the seed locally (hardlinks) and points origin at the forge with its own
token. 64 workers of a node thus cost one transfer from the forge, not 64. The seed mirror keeps no token: its
fetches send the credential as a header given through the environment.

git on a worker's clone (its remote set, a dead host's merge aborted and changes stashed) runs in a one-shot
sandbox like its agent's, with the repository's configuration made inert (agensh_ray/agent/hostgit.py): the
clone's `.git` and the worker's HOME are its agent's to write, and whatever they name must never run on the host.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

from agensh_ray.agent import hostgit
from agensh_ray.agent.harness import Harness
from agensh_ray.agent.limits import mib
from agensh_ray.agent.sandbox import SandboxPolicy
from agensh_ray.config import RunConfig
from agensh_ray.confined import Confined
from agensh_ray.task.reference import REFERENCE_DIR, install_reference

log = logging.getLogger(__name__)

SEED_MAX_AGE_S = 30.0
GIT_IDENTITY = ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL")


def _git(args: list[str], env: dict[str, str], credentials: dict[str, str] | None = None) -> None:
    """git on a repository the host made (the seed mirror, a clone of it being made), inert (hostgit.py)."""
    res = subprocess.run(hostgit.host_argv(args), capture_output=True, text=True,
                         env={**hostgit.inert_env(env), **(credentials or {})}, timeout=300, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"git {' '.join(args[:2])} failed: {res.stderr.strip()[-500:]}")


def _on_clone(workdir: Path, args: list[str], env: dict[str, str], sandboxed: bool, run_dir: Path,
              timeout: float = 120) -> subprocess.CompletedProcess:
    """git on a worker's clone: in a one-shot sandbox like its agent's (when the run is sandboxed), inert."""
    return hostgit.run_on_clone(workdir, args, env, sandboxed=sandboxed, run_dir=run_dir,
                                read_only_inside=[workdir / REFERENCE_DIR], timeout=timeout)


def _set_origin(workdir: Path, url: str, env: dict[str, str], sandboxed: bool, run_dir: Path) -> None:
    """Point the clone's `origin` at `url`, adding it again if the worker removed it."""
    if _on_clone(workdir, ["remote", "set-url", "origin", url], env, sandboxed, run_dir).returncode != 0:
        res = _on_clone(workdir, ["remote", "add", "origin", url], env, sandboxed, run_dir)
        if res.returncode != 0:
            raise RuntimeError(f"git remote add failed: {res.stderr.strip()[-500:]}")


def _regular(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISREG(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _remove_locks(workdir: Path) -> int:
    """git's lock files (`.git/*.lock`, `.git/refs/**/*.lock`) removed: regular files only, found and unlinked
    beneath the clone without following a link (a worker's `.git/refs` may be a link to /run)."""
    removed = 0
    with Confined(workdir) as root:
        for top, deep in ((".git", False), (".git/refs", True)):
            try:
                for _, dirs, files, dfd in root.walk(top):
                    for name in files:
                        if name.endswith(".lock") and _regular(name, dfd):
                            try:
                                os.unlink(name, dir_fd=dfd)  # the last component is never followed
                            except FileNotFoundError:
                                continue
                            removed += 1
                    if not deep:
                        dirs.clear()
            except OSError:
                continue
    return removed


def git_env(worker_id: str, home: Path) -> dict[str, str]:
    """What git needs to act as this worker, and nothing of the user's configuration."""
    email = f"{worker_id}@agensh.invalid"
    return {
        "GIT_AUTHOR_NAME": worker_id,
        "GIT_AUTHOR_EMAIL": email,
        "GIT_COMMITTER_NAME": worker_id,
        "GIT_COMMITTER_EMAIL": email,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_CONFIG_NOSYSTEM": "1",
        # A transfer that stalls (the forge died mid-push, or its node was lost) fails after a minute
        # instead of holding the agent's turn forever: git aborts below 1 byte/s for 60 s.
        "GIT_HTTP_LOW_SPEED_LIMIT": "1",
        "GIT_HTTP_LOW_SPEED_TIME": "60",
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(home),
    }


def clone_env(worker_id: str, workdir: Path, home: Path) -> dict[str, str]:
    """`git_env` for git run on the clone at `workdir`: git never looks above it for a repository (a broken
    .git must fail, not find the checkout the run folder may sit in)."""
    return {**git_env(worker_id, home), "GIT_CEILING_DIRECTORIES": str(workdir.parent)}


def _free_name(base: Path) -> Path:
    """`base-1`, `base-2`, ...: the first that does not exist."""
    n = 1
    while base.with_name(f"{base.name}-{n}").exists():
        n += 1
    return base.with_name(f"{base.name}-{n}")


def agent_env(cfg: RunConfig, worker_id: str, home: Path, task_root: Path, shared: bool = False) -> dict[str, str]:
    """The variables a worker's agent gets on top of its harness's sealed environment: its git identity
    (none for a process shared by several workers: the agent sets each session's itself) and, for the sim
    harness, the sim's settings."""
    env = git_env(worker_id, home)
    env.pop("HOME")  # the harness seals HOME itself
    if shared:
        for k in GIT_IDENTITY:
            env.pop(k)
    if cfg.harness == "sim":
        env.update(
            AGENSH_SIM_CONFIG=cfg.sim.model_dump_json(),
            AGENSH_SIM_SEED=str(cfg.seed),
            AGENSH_SIM_TIME_SCALE=str(cfg.time_scale),
            AGENSH_SIM_TASK=str(task_root),
            PYTHONPATH=os.pathsep.join(p for p in sys.path if p),
        )
    return env


def sandbox_policy(cfg: RunConfig, harness: Harness, env: dict[str, str], *, writable: list[Path], chdir: Path,
                   endpoints: dict[str, str], run_dir: Path, task_root: Path, hostname: str) -> SandboxPolicy | None:
    """The sandbox of an agent started with `env` (None when the run is not sandboxed): `writable` (its workdir(s)
    and HOME(s)), the toolchain, the sim's task, the shared CLI cache and the run's extra read-only folders;
    `endpoints` (forge, MCP tools) and its model; the run folder covered wherever a read-only folder holds it; each
    clone's reference/ (the execute-only reference) read-only. A host's shared sim process starts before its
    workers' clones exist, so theirs is not pinned: the sim reads the task folder anyway (it stands in for a model)."""
    if not cfg.sandbox.enabled:
        return None
    model, unrelayable = harness.model_endpoints(env)
    read_only = list(cfg.sandbox.read_only)
    if harness.name == "sim":
        read_only.append(task_root)  # the sim stands in for a model: it reads the task's oracle
    if harness.shared_cache and env.get("XDG_CACHE_HOME"):
        # Made now: a folder that does not exist is not bound, and on a machine's first start the CLI, finding
        # no cache, would unpack into a read-only path and fail (the warm-up fills this folder before it starts).
        Path(env["XDG_CACHE_HOME"]).mkdir(parents=True, exist_ok=True)
        read_only.append(Path(env["XDG_CACHE_HOME"]))
    return SandboxPolicy.build(argv=harness.argv(), env=env, writable=writable, chdir=chdir,
                               endpoints={**endpoints, **model}, unrelayable=unrelayable, read_only=read_only,
                               hidden=[run_dir], execute_only=[Path(d) / REFERENCE_DIR for d in writable],
                               url_vars=harness.url_vars(env), hostname=hostname,
                               tmp_bytes=mib(limits.tmp_mib) if (limits := cfg.sandbox.limits) else 0)


class Workdirs:
    """The clones of one host's workers (thread-safe: clones run in threads)."""

    def __init__(self, run_dir: Path, host_id: str, sandboxed: bool = True):
        self.run_dir = Path(run_dir)
        self.sandboxed = sandboxed
        """git on a clone runs in a one-shot sandbox (the run's `sandbox.enabled`); inert either way."""
        self.seed = Path(run_dir) / "workers" / f"_{host_id}" / "seed.git"
        self.references = Path(run_dir) / REFERENCE_DIR
        self._lock = threading.Lock()
        self._seed_at = 0.0

    def prepare(self, worker_id: str, workdir: Path, home: Path, clone_url: str) -> None:
        """The worker's clone at `workdir` (kept if it is one, its remote set to `clone_url`: a forge started
        again may have issued a new token, or moved) and its HOME. Anything else in the folder (what a clone
        killed before it wrote a ref left, or files without a .git) is moved aside, never deleted, into
        `<worker>/left-behind-<n>/`, and the clone made again in the same folder (a shared sandbox may have it
        mounted)."""
        home.mkdir(parents=True, exist_ok=True)
        env = clone_env(worker_id, workdir, home)
        if self.kept(workdir):
            _set_origin(workdir, clone_url, env, self.sandboxed, self.run_dir)
            self.install_references(workdir)
            return
        if workdir.is_dir() and any(workdir.iterdir()):
            aside = _free_name(workdir.parent / "left-behind")
            aside.mkdir()
            for leftover in workdir.iterdir():
                leftover.rename(aside / leftover.name)
            log.warning("%s: %s held no clone to go on from; its files are in %s", worker_id, workdir, aside)
        seed = self.seed
        seed_url, credentials = hostgit.url_credentials(clone_url)
        with self._lock:
            if not seed.exists():
                # cloned beside it and renamed: a host killed mid-clone never leaves a partial seed under its name
                partial = seed.with_name(seed.name + ".partial")
                shutil.rmtree(partial, ignore_errors=True)
                seed.parent.mkdir(parents=True, exist_ok=True)
                _git(["clone", "-q", "--mirror", seed_url, str(partial)], env, credentials)
                partial.rename(seed)
                self._seed_at = time.monotonic()
            elif time.monotonic() - self._seed_at > SEED_MAX_AGE_S:
                _git(["-C", str(seed), "remote", "set-url", "origin", seed_url], env)
                _git(["-C", str(seed), "fetch", "-q", "--prune", "origin"], env, credentials)
                self._seed_at = time.monotonic()
        _git(["clone", "-q", str(seed), str(workdir)], env)
        _set_origin(workdir, clone_url, env, self.sandboxed, self.run_dir)
        self.install_references(workdir)

    def forget_credentials(self, worker_id: str, workdir: Path, home: Path, clone_url: str) -> None:
        """The clone's `origin` without the worker's token, once its agent is gone (the run folder outlives the
        run; a host that starts the worker again sets the full URL back in `prepare`). Best effort: a clone the
        worker broke keeps whatever it holds, and a warning says so."""
        if not self.kept(workdir):
            return
        bare, _ = hostgit.url_credentials(clone_url)
        res = _on_clone(workdir, ["remote", "set-url", "origin", bare], clone_env(worker_id, workdir, home),
                        self.sandboxed, self.run_dir, timeout=60)
        if res.returncode != 0:
            log.warning("%s: could not take the token out of %s/.git/config: %s", worker_id, workdir,
                        res.stderr.strip()[-200:])

    @staticmethod
    def kept(workdir: Path) -> bool:
        """Is there a clone at `workdir` to go on from: a .git holding a HEAD and at least one ref, read off the
        disk (never by git, whose failures, e.g. a bad config in the worker's HOME, must not pass for "no
        clone")? A clone killed before it wrote its refs has none, and nothing of the worker's. Read beneath the
        clone without following a link, bounded (agensh_ray/confined.py): a link to /dev/zero or a FIFO there
        neither hangs nor grows the host."""
        try:
            root = Confined(workdir)
        except OSError:
            return False
        with root:
            if not root.is_file(".git/HEAD"):
                return False
            try:  # a ref line, not its header or a peeled tag's "^"; garbage read, not raised; the first MiB will do
                packed = root.read_text(".git/packed-refs", 1 << 20, whole=False)
            except OSError:
                packed = ""
            if any(line and line[0] not in "#^" for line in packed.splitlines()):
                return True
            try:
                return any(_regular(f, dfd) for _, _, files, dfd in root.walk(".git/refs") for f in files)
            except OSError:
                return False

    def recover(self, worker_id: str, workdir: Path, home: Path) -> str:
        """A clone left by a host process that died mid-work, made usable again: git's lock files of
        a killed git removed, a merge or rebase in progress aborted, uncommitted changes stashed (not
        lost: `git stash list`). Returns what was done, for the worker's hand-off (empty: nothing)."""
        env = clone_env(worker_id, workdir, home)
        done = []
        git_dir = workdir / ".git"
        locks = _remove_locks(workdir)
        if locks:
            done.append(f"removed {locks} stale git lock file(s)")
        for op, marker in (("merge", "MERGE_HEAD"), ("rebase", "rebase-merge"), ("rebase", "rebase-apply"),
                           ("cherry-pick", "CHERRY_PICK_HEAD")):
            if (git_dir / marker).exists():
                res = _on_clone(workdir, [op, "--abort"], env, self.sandboxed, self.run_dir)
                done.append(f"aborted the {op} in progress" + ("" if res.returncode == 0 else " (failed)"))
        status = _on_clone(workdir, ["status", "--porcelain"], env, self.sandboxed, self.run_dir)
        if status.returncode == 0 and status.stdout.strip():
            res = _on_clone(workdir, ["stash", "push", "--include-untracked", "-m",
                                      "uncommitted when the worker's host died"], env, self.sandboxed, self.run_dir)
            done.append("stashed the uncommitted changes (git stash list; git stash pop to get them back)"
                        if res.returncode == 0 else f"could not stash the uncommitted changes: {res.stderr.strip()[-200:]}")
        return "; ".join(done)

    def install_references(self, workdir: Path) -> None:
        """The run's execute-only reference (the driver built it in <run>/reference/) into the clone's
        reference/, untracked (agensh_ray/task/reference.py)."""
        for built in sorted(self.references.glob("*")) if self.references.is_dir() else []:
            install_reference(built, workdir, f"{REFERENCE_DIR}/{built.name}")
