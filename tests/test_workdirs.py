"""A worker's clone survives its host dying at any moment (agensh_ray/worker/workdir.py): a clone or seed
mirror killed half-way is never mistaken for one to go on from, and a kept clone keeps the worker's work."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from agensh_ray.worker.workdir import Workdirs, git_env


def git(*args: str, cwd: Path | None = None, home: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True,
                          env=git_env("w001", home)).stdout.strip()


@pytest.fixture
def forge_repo(tmp_path) -> str:
    """A bare repository with one commit on main, standing where the forge's clone URL would."""
    src, home = tmp_path / "src", tmp_path / "home"
    src.mkdir()
    git("init", "-q", "-b", "main", cwd=src, home=home)
    (src / "README.md").write_text("hello\n")
    git("add", "-A", cwd=src, home=home)
    git("commit", "-q", "-m", "start", cwd=src, home=home)
    git("clone", "-q", "--bare", str(src), str(tmp_path / "forge.git"), home=home)
    return str(tmp_path / "forge.git")


def test_a_clone_killed_before_its_refs_is_cloned_again_in_the_same_folder(tmp_path, forge_repo):
    run, home = tmp_path / "run", tmp_path / "w001-home"
    wd = Workdirs(run, "h000")
    workdir = run / "workers" / "w001" / "repo"
    workdir.mkdir(parents=True)
    git("init", "-q", cwd=workdir, home=home)  # what `git clone` leaves when SIGKILLed before fetching
    (workdir / "half-written").write_text("x")
    inode = workdir.stat().st_ino
    assert not wd.kept(workdir)
    wd.prepare("w001", workdir, home, forge_repo)
    assert wd.kept(workdir)
    assert (workdir / "README.md").read_text() == "hello\n" and not (workdir / "half-written").exists()
    assert (workdir.parent / "left-behind-1" / "half-written").read_text() == "x"  # moved aside, not deleted
    assert workdir.stat().st_ino == inode, "the folder itself was replaced (a sandbox's mount of it would go stale)"
    assert git("remote", "get-url", "origin", cwd=workdir, home=home) == forge_repo


def test_a_seed_mirror_killed_half_way_is_never_used(tmp_path, forge_repo):
    run, home = tmp_path / "run", tmp_path / "w001-home"
    wd = Workdirs(run, "h000")
    partial = wd.seed.with_name(wd.seed.name + ".partial")
    partial.mkdir(parents=True)
    (partial / "HEAD").write_text("ref: refs/heads/main\n")  # a mirror clone SIGKILLed mid-fetch
    workdir = run / "workers" / "w001" / "repo"
    wd.prepare("w001", workdir, home, forge_repo)
    assert (workdir / "README.md").exists() and wd.seed.is_dir() and not partial.exists()
    assert git("rev-parse", "main", cwd=wd.seed, home=home) == git("rev-parse", "main", cwd=Path(forge_repo), home=home)


def _clone_with_unpushed_work(run: Path, home: Path, forge_repo: str) -> tuple[Path, str]:
    """w001's clone, prepared by a host, holding a commit of its own not pushed: (its folder, that commit)."""
    workdir = run / "workers" / "w001" / "repo"
    Workdirs(run, "h000").prepare("w001", workdir, home, forge_repo)
    (workdir / "work.py").write_text("print('mine')\n")
    git("add", "-A", cwd=workdir, home=home)
    git("commit", "-q", "-m", "unpushed work", cwd=workdir, home=home)
    return workdir, git("rev-parse", "HEAD", cwd=workdir, home=home)


def test_a_kept_clone_keeps_the_workers_commit_and_gets_back_an_origin_it_removed(tmp_path, forge_repo):
    run, home = tmp_path / "run", tmp_path / "w001-home"
    workdir, mine = _clone_with_unpushed_work(run, home, forge_repo)
    git("remote", "remove", "origin", cwd=workdir, home=home)  # a stray agent's doing, then its host died
    again = Workdirs(run, "h000")  # the restarted host
    assert again.kept(workdir)
    again.prepare("w001", workdir, home, forge_repo + "#new-token")
    assert git("rev-parse", "HEAD", cwd=workdir, home=home) == mine
    assert git("remote", "get-url", "origin", cwd=workdir, home=home) == forge_repo + "#new-token"


def test_a_clone_git_cannot_read_is_never_taken_for_no_clone(tmp_path, forge_repo):
    """The clone's own .git/config is broken (its agent can write there): every git command on it fails, yet
    the clone with an unpushed commit is kept (the failure is said), never cleared and cloned again. A broken
    .gitconfig in the worker's HOME no longer matters: the host's git reads nothing of that HOME."""
    run, home = tmp_path / "run", tmp_path / "w001-home"
    workdir, mine = _clone_with_unpushed_work(run, home, forge_repo)
    git("pack-refs", "--all", cwd=workdir, home=home)  # every ref in packed-refs only, as after a gc
    (home / ".gitconfig").write_text("[broken\n")
    Workdirs(run, "h000").prepare("w001", workdir, home, forge_repo)
    (home / ".gitconfig").unlink()
    config = workdir / ".git" / "config"
    good = config.read_text()
    config.write_text("[broken\n")
    assert Workdirs.kept(workdir)
    with pytest.raises(RuntimeError, match="bad config"):
        Workdirs(run, "h000").prepare("w001", workdir, home, forge_repo)
    config.write_text(good)
    assert git("rev-parse", "HEAD", cwd=workdir, home=home) == mine and (workdir / "work.py").exists()


def test_a_broken_git_folder_never_reaches_the_checkout_around_the_run(tmp_path, forge_repo):
    """A .git without a HEAD (a clone killed at its first step) inside a run folder that sits in a git
    checkout (runs/ in the project's): not a clone; its folder is cloned again, the checkout untouched."""
    outer, home = tmp_path / "checkout", tmp_path / "w001-home"
    outer.mkdir()
    git("init", "-q", "-b", "main", cwd=outer, home=home)
    (outer / "f").write_text("x")
    git("add", "-A", cwd=outer, home=home)
    git("commit", "-q", "-m", "outer", cwd=outer, home=home)
    workdir = outer / "runs" / "r1" / "workers" / "w001" / "repo"
    (workdir / ".git").mkdir(parents=True)
    (workdir / "half-written").write_text("y")
    assert not Workdirs.kept(workdir)
    wd = Workdirs(outer / "runs" / "r1", "h000")
    wd.recover("w001", workdir, home)  # git there fails; before, it found the checkout and stashed runs/ away
    assert git("stash", "list", cwd=outer, home=home) == "" and (workdir / ".git").is_dir()
    wd.prepare("w001", workdir, home, forge_repo)
    assert (workdir / "README.md").exists() and Workdirs.kept(workdir)
    assert git("remote", cwd=outer, home=home) == ""
    assert git("status", "--porcelain", cwd=outer, home=home) == "?? runs/"
