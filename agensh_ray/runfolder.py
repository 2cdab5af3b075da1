"""The run folder, checked before anything starts: `--run-dir` must be a folder this process can write
(not a file, not under a kernel filesystem), the run folder must be inside it, and a folder an earlier
run used (it holds config.json) is refused unless `--overwrite`, which empties it first.

Reusing a folder without emptying it would start a new run on the old board, PRs and clones. A run whose
driver died goes on in its folder with `--resume RUN_ID` (agensh_ray/driver/resume.py checks that folder).

`--run-dir s3://bucket/prefix`: the store is checked (reachable, the bucket there and writable, no earlier
run's folder unless `--overwrite`) and so is the local staging folder the run writes before its mirror
ships it (agensh_ray/storage.py, agensh_ray/mirror.py).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from agensh_ray import storage
from agensh_ray.config import check_run_id
from agensh_ray.errors import RunFolderError

KERNEL_FILESYSTEMS = (Path("/proc"), Path("/sys"), Path("/dev"))
"""No run folder under these: they are the kernel's views, not storage."""

MARK = "config.json"
"""A folder holding this was a run's folder (the driver writes it first)."""


def check_parent(run_dir: Path) -> Path:
    """The resolved `--run-dir`, created if missing and checked writable; RunFolderError says why not."""
    parent = Path(run_dir).expanduser().resolve()
    for k in KERNEL_FILESYSTEMS:
        if parent == k or parent.is_relative_to(k):
            raise RunFolderError(f"--run-dir {run_dir} is under {k}, a kernel filesystem: choose a folder on disk")
    if parent.exists() and not parent.is_dir():
        raise RunFolderError(f"--run-dir {run_dir} is a file, not a folder")
    try:
        parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=parent, prefix=".agensh-probe-"):
            pass
    except OSError as exc:
        raise RunFolderError(f"--run-dir {run_dir} cannot be used: {exc.strerror or exc}") from None
    return parent


def check_folder(run_dir: Path, run_id: str, overwrite: bool) -> Path:
    """The run folder `run_dir/run_id`, checked (not created, not emptied): RunFolderError if it is outside
    `run_dir`, not a folder, or an earlier run's folder without `overwrite`."""
    try:
        check_run_id(run_id)
    except ValueError as exc:
        raise RunFolderError(f"--run-id: {exc}") from None
    parent = check_parent(run_dir)
    folder = (parent / run_id).resolve()
    if folder.parent != parent:
        raise RunFolderError(f"run folder {folder} is outside --run-dir {parent}")
    if folder.exists() and not folder.is_dir():
        raise RunFolderError(f"run folder {folder} is a file")
    if (folder / MARK).exists() and not overwrite:
        raise RunFolderError(
            f"run folder {folder} holds an earlier run (its {MARK}): choose another --run-id, or pass "
            f"--overwrite to remove its contents first, or --resume {run_id} to go on with it if its driver died")
    return folder


def prepare(run_dir: Path, run_id: str, overwrite: bool) -> Path:
    """Check the run folder, empty it if `overwrite` and it held a run, and create it."""
    folder = check_folder(run_dir, run_id, overwrite)
    if overwrite and folder.is_dir():
        for child in folder.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunFolderError(f"run folder {folder} cannot be created: {exc.strerror or exc}") from None
    return folder


def check_target(run_dir: Path | str, run_id: str | None, overwrite: bool) -> None:
    """Everything checkable before Ray starts, for a local `--run-dir` or an object store's URI (then its
    staging folder too); RunFolderError says why not."""
    if storage.is_uri(run_dir):
        storage.check(str(run_dir), run_id, overwrite)
        run_dir = storage.staging_parent(str(run_dir))
    check_parent(run_dir)
    if run_id is not None:
        check_folder(run_dir, run_id, overwrite)


def prepare_target(run_dir: Path | str, run_id: str, overwrite: bool) -> Path:
    """`prepare` for a local `--run-dir`; for a URI, the store checked (and its earlier run emptied with
    `overwrite`) and the staging copy prepared: the local folder the run writes."""
    if not storage.is_uri(run_dir):
        return prepare(Path(run_dir), run_id, overwrite)
    loc = storage.check(str(run_dir), run_id, overwrite)
    if overwrite:
        storage.empty_remote(loc.child(run_id))
    return prepare(storage.staging_parent(str(run_dir)), run_id, overwrite)
