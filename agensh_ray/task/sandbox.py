"""The scoring sandbox: what ProgramBench's Docker container is, made of bubblewrap.

The package's `Evaluator` drives an environment with a small surface (`execute`, `copy_in`,
`copy_in_tar`, `commit`, `cleanup`; upstream later named it the pluggable backend,
`new_env` / `remove_image` + `copy_out`). `BwrapBackend` hands out `BwrapEnvironment`s with that
surface, so the Evaluator's own steps run unchanged without a container engine.

An environment is a scratch folder holding the directories a container would have written
(`workspace`, `opt`, `tmp`, `root`, `etc`); every `execute` is one `bwrap` process over it:

* no network, no other process visible, its own IPC/UTS/cgroup namespaces (`--unshare-all`),
  uid 0 in a user namespace of its own with every capability dropped and no nested user
  namespaces (`--disable-userns`), a new session (no TIOCSTI into our terminal);
* read-only: the system (`/usr` and its `/bin`, `/lib*`, `/sbin` links) and the Python that
  runs the scorer (its prefix and venv: the image's `python3` with pytest, as ProgramBench's
  images install it, reached through small wrappers in `/usr/local/bin`);
* `/etc` is a folder of links into a read-only copy of the host's `/etc` (secrets masked) with
  `resolv.conf` and `hosts` as real files, so the Evaluator's DNS blackhole writes work;
* writable: the scratch folder only. Nothing else of the host (the task, its hidden tests,
  the run folder, other runs) is visible.

`commit` snapshots the scratch folder (the post-compile "image"); `new_env` of a committed
image starts from a copy of it, so each test branch starts from the compiled workspace.
Timeouts are the Evaluator's own per step; on expiry the whole sandbox is killed.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from agensh_ray import bubblewrap
from agensh_ray.errors import SandboxError

CANCEL_POLL_S = 0.25
"""How often a running sandboxed command checks whether its evaluation was cancelled."""

WORKSPACE = "/workspace"
# Directories of the "container" that persist between steps and into a commit: each is a folder
# of the environment's scratch root, bound read-write at this path.
WRITABLE = ("workspace", "opt", "tmp", "root", "etc")
HOST_ETC = "/run/host/etc"
# Host /etc entries the sandbox never sees (password hashes, host keys, credentials).
ETC_SECRETS = ("shadow", "shadow-", "gshadow", "gshadow-", "ssh", "ssl/private", "sudoers", "sudoers.d",
               "security/opasswd", "subuid", "subgid")
# /etc entries that are real (writable) files in the environment rather than links.
ETC_COPIED = ("resolv.conf", "hosts", "hostname")
SYSTEM_LINKS = {"/bin": "usr/bin", "/sbin": "usr/sbin", "/lib": "usr/lib", "/lib64": "usr/lib64"}
# No package index is reachable from the sandbox: pip says so at once instead of retrying for ~8 s
# (the Evaluator's best-effort `pip3 install pytest-rerunfailures` step, and `pip install` lines in run.sh).
NO_INDEX = {"PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def bwrap_available() -> str | None:
    """Why bubblewrap cannot sandbox here, or None when it can (it runs a trivial sandbox)."""
    found = bubblewrap.find()
    exe = found.path
    if exe is None:
        return f"bubblewrap is not installed: {found.why}"
    try:
        proc = subprocess.run([exe, "--unshare-all", "--ro-bind", "/", "/", "true"], capture_output=True,
                              text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bubblewrap ({exe}) does not run: {e}"
    if proc.returncode != 0:
        return f"bubblewrap ({exe}) cannot create namespaces here: {proc.stderr.strip()[-300:]}"
    return None


def _toolchain_dir(root: Path) -> Path:
    """/usr/local/bin of the image: python3, pip3, pip and pytest of the interpreter running this
    scorer. Wrappers, not links: a venv is recognised by the path its python is started from."""
    out = root / "toolchain"
    out.mkdir(parents=True, exist_ok=True)
    py = Path(sys.executable)
    scripts = {
        "python3": f'exec {py} "$@"',
        "python": f'exec {py} "$@"',
        "pip3": f'exec {py} -m pip "$@"',
        "pip": f'exec {py} -m pip "$@"',
        "pytest": f'exec {py} -m pytest "$@"',
    }
    for name, body in scripts.items():
        path = out / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)
    return out


def _python_roots() -> list[str]:
    """The folders the scorer's Python lives in (its base prefix and, for a venv, the venv)."""
    roots = {os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix)}
    return sorted(r for r in roots if r not in ("/usr", "/"))


def _make_etc(etc: Path) -> None:
    """The environment's /etc: a link per host entry into the read-only host copy, secrets left out,
    and real copies of the files the Evaluator rewrites."""
    etc.mkdir(parents=True, exist_ok=True)
    secret_tops = {s.split("/")[0] for s in ETC_SECRETS if "/" not in s}
    for entry in os.listdir("/etc"):
        if entry in secret_tops:
            continue
        target = etc / entry
        if entry in ETC_COPIED and os.path.isfile(f"/etc/{entry}"):
            shutil.copyfile(f"/etc/{entry}", target)
        else:
            target.symlink_to(f"{HOST_ETC}/{entry}")


class BwrapEnvironment:
    """One sandboxed "container": a scratch root, every command a fresh bwrap over it."""

    executable = "bwrap"  # the Container surface's name; the command lines run bubblewrap.executable()

    def __init__(self, backend: "BwrapBackend", root: Path, *, cwd: str = WORKSPACE, timeout: int = 600,
                 env: dict[str, str] | None = None):
        self.backend = backend
        self.root = root
        self.cwd = cwd
        self.default_timeout = timeout
        self.env = dict(env or {})
        self.container_id = root.name

    # -- the sandbox ---------------------------------------------------------------------------
    def argv(self, command: list[str], cwd: str | None = None) -> list[str]:
        """The bwrap command line running `command` in this environment."""
        a = [bubblewrap.executable(), "--unshare-all", "--unshare-user", "--uid", "0", "--gid", "0",
             "--hostname", "sandbox",
             "--cap-drop", "ALL", "--disable-userns", "--die-with-parent", "--new-session",
             "--ro-bind", "/usr", "/usr"]
        for link, target in SYSTEM_LINKS.items():
            if os.path.lexists(link):
                a += (["--symlink", target, link] if os.path.islink(link) else ["--ro-bind", link, link])
        a += ["--proc", "/proc", "--dev", "/dev", "--ro-bind", "/etc", HOST_ETC]
        for secret in ETC_SECRETS:
            path = f"/etc/{secret}"
            if os.path.isdir(path) and not os.path.islink(path):
                a += ["--tmpfs", f"{HOST_ETC}/{secret}"]
            elif os.path.lexists(path):
                a += ["--ro-bind", "/dev/null", f"{HOST_ETC}/{secret}"]
        for d in WRITABLE:
            a += ["--bind", str(self.root / d), f"/{d}"]
        for r in _python_roots():
            a += ["--ro-bind", r, r]
        a += ["--ro-bind", str(self.backend.toolchain), "/usr/local/bin"]
        for path in self.backend.hide:
            a += ["--ro-bind", "/dev/null", path]
        env = {"PATH": DEFAULT_PATH, "HOME": "/root", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "USER": "root",
               "TERM": "dumb", **NO_INDEX, **self.env}
        a += ["--clearenv"]
        for k, v in env.items():
            a += ["--setenv", k, v]
        a += ["--chdir", cwd or self.cwd, "--", *command]
        return a

    def _run(self, command: list[str], *, timeout: float, stdin=None, cwd: str | None = None) -> tuple[int, str, str]:
        """(returncode, stdout, stderr) of one sandboxed command; returncode -1 on timeout, or at once once the
        backend is cancelled (the command is killed; none starts after)."""
        cancel = self.backend.cancel
        if cancel.is_set():
            return -1, "", ""
        proc = subprocess.Popen(self.argv(command, cwd), stdin=stdin if stdin is not None else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            try:
                out, err = proc.communicate(timeout=max(0.0, min(CANCEL_POLL_S, deadline - time.monotonic())))
                return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
            except subprocess.TimeoutExpired:
                if cancel.is_set() or time.monotonic() >= deadline:
                    break
        # bwrap is the pid namespace's init: killing its group ends everything inside.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.communicate()
        return -1, "", ""

    # -- the Evaluator's surface ---------------------------------------------------------------
    def execute(self, command: str, *, timeout: int | None = None) -> dict[str, Any]:
        """Run a shell command as `docker exec ... bash -lc` would (stdout then stderr)."""
        timeout = timeout or self.default_timeout
        rc, out, err = self._run(["bash", "-lc", command], timeout=timeout)
        if rc == -1 and not out and not err:
            return {"output": "", "returncode": -1, "exception_info": f"Command timed out after {timeout}s"}
        return {"output": out + err, "returncode": rc, "exception_info": ""}

    def copy_in_tar(self, tar_path: Path, container_path: str) -> None:
        """Unpack a tar(.gz) at `container_path` with tar running inside the sandbox (an archive's
        odd members can then only touch the sandbox)."""
        self._mkdir(container_path)
        flags = "-xzf" if str(tar_path).endswith((".tar.gz", ".tgz", ".gz")) else "-xf"
        with open(tar_path, "rb") as f:
            rc, _, err = self._run(["tar", "--no-same-owner", "-C", container_path, flags, "-"], timeout=300, stdin=f)
        if rc != 0:
            raise RuntimeError(f"unpacking {tar_path} into {container_path} failed: {err.strip()[-500:]}")

    def copy_in(self, local_path: Path, container_path: str) -> None:
        """Copy a local file or folder in (streamed as a tar through the sandbox's own tar)."""
        local_path = Path(local_path)
        with tempfile.NamedTemporaryFile(suffix=".tar") as tmp:
            if local_path.is_dir():
                subprocess.run(["tar", "-C", str(local_path), "-cf", tmp.name, "."], check=True, capture_output=True)
                self.copy_in_tar(Path(tmp.name), container_path)
            else:
                parent, name = container_path.rsplit("/", 1)
                subprocess.run(["tar", "-C", str(local_path.parent), "-cf", tmp.name,
                                "--transform", f"s|^{local_path.name}$|{name}|", local_path.name],
                               check=True, capture_output=True)
                self.copy_in_tar(Path(tmp.name), parent or "/")

    def copy_out(self, container_path: str, *, timeout: int = 60) -> tuple[str, str]:
        """(contents, the command that read them) of a file, read inside the sandbox: a symlink planted
        by the submission resolves to the sandbox's files, never the host's."""
        cmd = ["cat", "--", container_path]
        rc, out, err = self._run(cmd, timeout=timeout)
        if rc != 0:
            raise FileNotFoundError(err.strip() or f"cat {container_path} exited {rc}")
        return out, " ".join(cmd)

    def commit(self, image_ref: str) -> str:
        """Snapshot this environment as image `image_ref`."""
        self.backend.snapshot(self.root, image_ref)
        return image_ref

    def cleanup(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def _mkdir(self, container_path: str) -> None:
        rc, _, err = self._run(["mkdir", "-p", container_path], timeout=30)
        if rc != 0:
            raise RuntimeError(f"mkdir -p {container_path} in the sandbox failed: {err.strip()}")


class BwrapBackend:
    """Hands out environments: a fresh one for a task's base image, a copy of a snapshot for a
    committed one. `close` removes every scratch folder it made."""

    def __init__(self, scratch_parent: Path | None = None, hide: list[str] | None = None,
                 cancel: threading.Event | None = None):
        self.cancel = cancel or threading.Event()
        """Set: the running commands are killed and none starts (an evaluation nobody waits for any more)."""
        why = bwrap_available()
        if why:
            raise SandboxError(f"cannot score in a sandbox: {why}")
        self.base = Path(tempfile.mkdtemp(prefix="agensh-score-", dir=scratch_parent))
        self.toolchain = _toolchain_dir(self.base)
        self._images: dict[str, Path] = {}
        self._lock = threading.Lock()
        self.hide = sorted({os.path.realpath(p) for p in (hide or []) if os.path.exists(p)})
        """Host files masked (bound to /dev/null) in every environment: the real file of each path given,
        so every link to it (/usr/bin/x -> /etc/alternatives/x -> ...) ends at the mask too."""

    def new_env(self, image: str, *, cwd: str = WORKSPACE, timeout: int = 600, cpus: int | None = None,
                env: dict[str, str] | None = None, run_args: list[str] | None = None) -> BwrapEnvironment:
        root = self.base / f"env-{uuid.uuid4().hex[:12]}"
        with self._lock:
            snapshot = self._images.get(image)
        if snapshot is not None:
            shutil.copytree(snapshot, root, symlinks=True)
        else:
            for d in WRITABLE:
                (root / d).mkdir(parents=True)
            _make_etc(root / "etc")
        full_env = {"PYTEST_XDIST_AUTO_NUM_WORKERS": str(cpus or os.cpu_count() or 1), **(env or {})}
        return BwrapEnvironment(self, root, cwd=cwd, timeout=timeout, env=full_env)

    def snapshot(self, root: Path, image_ref: str) -> None:
        dest = self.base / f"image-{uuid.uuid4().hex[:12]}"
        shutil.copytree(root, dest, symlinks=True)
        with self._lock:
            self._images[image_ref] = dest

    def remove_image(self, image_ref: str) -> None:
        with self._lock:
            path = self._images.pop(image_ref, None)
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)

    def close(self) -> None:
        shutil.rmtree(self.base, ignore_errors=True)
