"""The execute-only reference in a worker's clone: running it works, reading its bytes does not.

The reference is never committed (git would hand its bytes to anyone): the driver builds it once
per run (`Task.build_reference`, mode 0111) and each worker's clone gets a copy at
`reference/<program>`, excluded from git. What stops a read:

* the ACP client refuses `fs/read_text_file` and `fs/write_text_file` on a file with no read bit
  (`execute_only`), whoever the client runs as;
* the kernel refuses `open()` of a 0111 file to any process without CAP_DAC_OVERRIDE /
  CAP_DAC_READ_SEARCH, while `execve` works (for an ELF: the bundled textkit's reference is one,
  with its Python interpreter embedded, see tasks/textkit/src/build_exe.py), and marks the
  process non-dumpable, so /proc/<pid>/mem is closed too. An agent sandbox that runs agents as a
  non-root uid without capabilities, with the clone's `reference/` bound read-only (so it cannot be
  chmod-ed) and the task folder and run folder not mounted, makes this hold for every shell command.
  Agents running unsandboxed as root can read anything, the task folder included.

The agent sandbox (agensh_ray/agent/sandbox.py) makes the kernel's rule hold for every command an
agent runs, whoever the host runs as:

* the clone's `reference/` is bound read-only over the writable workdir: chmod, rename, unlink,
  hard links and new files there fail;
* a host running as root runs its agents as uid 0 without capabilities and no user namespace; the
  clone's copy belongs to `REFERENCE_UID` (nobody), so the agent is not its owner (no chmod even
  where it could write) and a user namespace it makes cannot map the owner (no CAP_DAC_OVERRIDE
  over it there);
* a host running as another user shares the reference by hard link (its owner is that user, so the
  agent is): the sandbox forbids nested user namespaces (`--disable-userns`), where the agent would
  hold CAP_DAC_OVERRIDE over its own files.

The host reads a file for an agent (ACP `fs/read_text_file`) with `read_text`, which opens it beneath
the workdir's fd without following any link (agensh_ray/confined.py) and checks the file it opened, so
swapping a path for a link to the reference (or to anything) between a check and the read gains nothing.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from agensh_ray.confined import READ_LIMIT, Confined
from agensh_ray.errors import ConfinementError

log = logging.getLogger(__name__)

REFERENCE_DIR = "reference"
"""Where a worker's clone holds the execute-only reference (`reference/<program>`, untracked)."""

RUN_IGNORE = f"""\
# Written by agensh-ray. Nobody may read the execute-only copies of the task's reference program,
# rsync included, so `ray rsync-down` of this run folder leaves them behind (the cluster files'
# rsync_filter reads .gitignore files):
/{REFERENCE_DIR}/
/workers/*/repo/{REFERENCE_DIR}/
"""


def ignore_references(run_dir: str | os.PathLike) -> Path:
    """Write the run folder's `.gitignore` naming its execute-only reference copies (see RUN_IGNORE)."""
    path = Path(run_dir) / ".gitignore"
    path.write_text(RUN_IGNORE)
    return path


REFERENCE_UID = 65534
"""Who owns a clone's copy when the host runs as root (nobody): not the agent, which runs as uid 0."""


class ExecuteOnlyError(PermissionError):
    """The file is the execute-only reference: it runs, its bytes are not handed out."""


def execute_only(path: str | os.PathLike) -> bool:
    """True for a regular file that someone may execute and nobody may read."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    return _execute_only_mode(st.st_mode)


def _execute_only_mode(mode: int) -> bool:
    readable = mode & (stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    runnable = mode & (stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return stat.S_ISREG(mode) and bool(runnable) and not readable


def not_execute_only(st: os.stat_result) -> None:
    """Raise ExecuteOnlyError for the stat of the execute-only reference (a check made on an opened file)."""
    if _execute_only_mode(st.st_mode):
        raise ExecuteOnlyError("the file is execute-only")


def install_reference(built: Path, workdir: Path, relpath: str) -> Path:
    """Copy the run's built reference into a worker's clone at `relpath` (0111), excluded from git.

    The clone is the worker's: anything in it may have been replaced by a link (to /etc, say) while its agent
    ran. So every step is taken beneath the clone's fd without following one (agensh_ray/confined.py): the
    folder opened (made) beneath it (a link in its place removed first), the copy written to a new name in
    that folder and renamed over `relpath` there (a link in its place is replaced, not followed), the
    exclude file read bounded and written only if it is a regular file reached without a link."""
    root = Confined(workdir)
    try:
        head, _, name = root.relative(relpath).rpartition("/")
        try:
            folder = root.open_dir(head, create=True)
        except ConfinementError:  # `reference` made a link by the worker: the link goes, a real folder comes
            st = root.lstat(head)
            if st is None or not stat.S_ISLNK(st.st_mode):
                raise
            log.warning("%s: %s was a symbolic link; replaced by a folder", workdir, head)
            root.unlink(head, link=True)
            folder = root.open_dir(head, create=True)
        try:
            return _install(built, root, folder, head, name)
        finally:
            os.close(folder)
    finally:
        root.close()


def _install(built: Path, root: Confined, folder: int, head: str, name: str) -> Path:
    tmp = name + ".tmp"
    try:
        os.unlink(tmp, dir_fd=folder)  # a link or a file of that name: removed, not followed
    except FileNotFoundError:
        pass
    try:
        src = os.open(built, os.O_RDONLY | os.O_CLOEXEC)  # execute-only bytes: root (or CAP_DAC_OVERRIDE) only
    except PermissionError:
        # A run as a non-root user (a cluster host's): a hard link needs no read. The clones then share one
        # inode with the run's reference.
        os.link(built, tmp, dst_dir_fd=folder, follow_symlinks=False)
    else:
        try:
            dst = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o100,
                          dir_fd=folder)
            try:
                while os.sendfile(dst, src, None, 1 << 24):
                    pass
                os.fchmod(dst, 0o111)
                if os.geteuid() == 0:  # the agents run as uid 0: they must not own it (module docstring)
                    os.fchown(dst, REFERENCE_UID, REFERENCE_UID)
            finally:
                os.close(dst)
        finally:
            os.close(src)
    os.replace(tmp, name, src_dir_fd=folder, dst_dir_fd=folder)
    line = f"/{REFERENCE_DIR}/"
    exclude = ".git/info/exclude"
    if root.is_dir(".git/info"):
        try:
            text = root.read_text(exclude, 1 << 20) if root.lstat(exclude) is not None else ""
            if line not in text.splitlines():
                root.write_text(exclude, text + ("" if text.endswith("\n") or not text else "\n") + line + "\n",
                                parents=False)
        except OSError as exc:  # a link or a FIFO in its place: left alone (git shows reference/ as untracked)
            log.warning("%s: the reference is not excluded from git: %s", root.root, exc)
    return root.path(f"{head}/{name}" if head else name)


def read_text(root: Confined, path: str | os.PathLike, limit: int = READ_LIMIT) -> str:
    """A regular file's text beneath `root`, read for an agent; ExecuteOnlyError for the execute-only
    reference. The check is made on the file opened (no link is followed on the way, FIFOs and devices are
    refused without blocking: agensh_ray/confined.py), so the path cannot be swapped for a link to the
    reference after the check."""
    return root.read_text(path, limit, check=not_execute_only)
