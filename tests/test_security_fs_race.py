"""A hostile worker against the file operations the host does on its behalf (as root, outside the sandbox).

The race: the agent swaps a real directory of its workdir and a symbolic link to a folder outside it with
`renameat2(RENAME_EXCHANGE)` in a tight loop, while it asks the host to read and write files under that
name (ACP fs/read_text_file, fs/write_text_file) and to start terminals there. A host that checks a path
and then opens it by name reads the outside folder's secret and writes files into it; one that resolves
everything beneath the workdir's fd without following a link (agensh_ray/confined.py) never does.

Then the host's other reads and writes in a worker's clone and HOME: `Workdirs.kept`, the lock removal of
`recover`, the reference's install, the forge-token scan of `.git/config`, the agent's HOME files.

Everything here runs in-process, no Ray: the client and the workdir code are plain classes.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest
from acp import RequestError

from agensh_ray.agent.client import SessionObserver, WorkdirClient
from agensh_ray.agent.policy import PermissionPolicy

pytestmark = pytest.mark.security

SECRET = "forge-token-0123456789abcdef"
ROUNDS = 5000
TERMINALS = 60

SWAPPER = r"""
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
SYS_renameat2, AT_FDCWD, RENAME_EXCHANGE = 316, -100, 2
a, b, pause = os.fsencode(sys.argv[1]), os.fsencode(sys.argv[2]), float(sys.argv[3])
print("ready", flush=True)
while True:
    if libc.syscall(SYS_renameat2, AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) != 0:
        sys.exit(f"renameat2: {os.strerror(ctypes.get_errno())}")
    if pause:
        time.sleep(pause)
"""


class Seen(SessionObserver):
    def __init__(self):
        self.refused: list[tuple[str, str]] = []

    def on_refused(self, what, reason):
        self.refused.append((what, reason))


@pytest.fixture
def arena(tmp_path, request):
    """A workdir with a real folder `d` (holding a harmless `secret`) and `l`, a link to a folder outside
    holding the real secret; a process swapping the two names while the test runs: as fast as it can, or
    every `pause` seconds (indirect parameter)."""
    pause = getattr(request, "param", 0.0)
    if os.uname().machine != "x86_64":
        pytest.skip("the swapper calls renameat2 by its x86_64 number")
    work, outside = tmp_path / "work", tmp_path / "outside"
    (work / "d").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret").write_text(SECRET)
    (work / "d" / "secret").write_text("harmless")
    (work / "l").symlink_to(outside)
    swapper = subprocess.Popen([sys.executable, "-c", SWAPPER, str(work / "d"), str(work / "l"), str(pause)],
                               stdout=subprocess.PIPE, text=True)

    def stop() -> None:
        if swapper.returncode is None:
            os.kill(swapper.pid, signal.SIGKILL)
            swapper.wait()
        assert swapper.returncode == -signal.SIGKILL, "the swapper stopped by itself (renameat2 failed)"

    try:
        assert swapper.stdout.readline() == "ready\n"
        yield work, outside, stop
    finally:
        stop()


async def test_reads_and_writes_under_a_swapped_link_never_leave_the_workdir(arena):
    """5,000 reads and 5,000 writes through a name that is, at any instant, the real folder or the link out:
    none reads the secret, none writes outside. The others read the harmless file, write inside, or are
    refused ("a symbolic link on the way")."""
    work, outside, stop = arena
    seen = Seen()
    c = WorkdirClient(work, seen, PermissionPolicy(work, "w001"), {})
    t0 = time.perf_counter()
    leaked = harmless = refused_reads = 0
    why = set()
    for i in range(ROUNDS):
        path = "d/secret" if i % 2 else str(work / "d" / "secret")
        try:
            text = (await c.read_text_file(path, "s")).content
        except Exception as exc:  # RequestError (refused); before, also realpath's EINVAL as names were swapped
            refused_reads += 1
            why.add(exc.data["reason"] if isinstance(exc, RequestError) else repr(exc))
            continue
        leaked += SECRET in text
        harmless += text == "harmless"
    read_s = time.perf_counter() - t0
    written = refused_writes = 0
    for i in range(ROUNDS):
        try:
            await c.write_text_file(f"w{i}", f"d/w{i}.txt" if i % 2 else f"d/sub{i % 7}/w{i}.txt", "s")
            written += 1
        except Exception as exc:
            refused_writes += 1
            why.add(exc.data["reason"] if isinstance(exc, RequestError) else repr(exc))
    total_s = time.perf_counter() - t0
    stop()
    outside_now = sorted(p.name for p in outside.rglob("*"))
    print(f"\n{ROUNDS} reads in {read_s:.2f}s: {leaked} of the secret, {harmless} harmless, {refused_reads} refused; "
          f"{ROUNDS} writes in {total_s - read_s:.2f}s: {written} inside, {refused_writes} refused, "
          f"{len(outside_now) - 1} outside")
    assert leaked == 0
    assert outside_now == ["secret"], f"{len(outside_now) - 1} files written outside the workdir"
    assert (outside / "secret").read_text() == SECRET
    inside = [p for p in work.rglob("w*.txt") if not p.is_symlink()]
    assert len(inside) == written, "every write that succeeded is in the workdir"
    assert harmless + refused_reads == ROUNDS
    assert [w for w in why if "symbolic link on the way" not in w] == []
    assert len(seen.refused) == refused_reads + refused_writes, "each refusal is told to the observer"


@pytest.mark.parametrize("strategy", ["openat2", "walk"])
def test_both_strategies_hold_under_the_swap(arena, strategy):
    """The same race straight on confined.py, with each way of resolving (the walk is what a kernel without
    openat2 gets): nothing read or written outside."""
    from agensh_ray.confined import Confined

    work, outside, stop = arena
    leaked = 0
    with Confined(work, strategy) as c:
        for i in range(ROUNDS // 2):
            try:
                leaked += SECRET in c.read_text("d/secret")
                c.write_text(f"d/sub/x{i}", "x")
            except PermissionError:
                pass
    stop()
    assert leaked == 0
    assert sorted(p.name for p in outside.rglob("*")) == ["secret"]


@pytest.mark.parametrize("arena", [0.002], indirect=True)
async def test_a_terminal_under_a_swapped_link_starts_in_the_workdir(arena):
    """terminal/create with a cwd that is swapped every 2 ms (a terminal takes a few ms to start, so about half
    of them would start wherever the name leads by then): the command starts in a folder of the workdir or
    is refused, never in the folder outside (the host opens the cwd beneath the workdir's fd and starts the
    command in it by that fd)."""
    work, outside, stop = arena
    c = WorkdirClient(work, Seen(), PermissionPolicy(work, "w001"), {"PATH": os.environ["PATH"]})
    started, refused = [], 0
    end = time.monotonic() + 120  # a refusal is instant: on a loaded machine the swapper may leave the link there
    while len(started) < TERMINALS and time.monotonic() < end:  # for many ms, so the bound is time, not refusals
        try:
            t = await c.create_terminal("pwd", "s", args=["-P"], cwd="d")
        except Exception:  # a link on the way, or the policy's own check saw the link (or, before, crashed on it)
            refused += 1
            await asyncio.sleep(0.001)  # let the swapper run
            continue
        await c.wait_for_terminal_exit("s", t.terminal_id)
        started.append((await c.terminal_output("s", t.terminal_id)).output)
        await c.release_terminal("s", t.terminal_id)
    stop()
    print(f"\n{len(started) + refused} terminals: {len(started)} started, {refused} refused, "
          f"{sum(out.strip() == str(outside) for out in started)} in the folder outside")
    assert len(started) == TERMINALS
    assert [out for out in started if Path(out.strip()).parent != work] == []


async def test_a_link_inside_the_workdir_is_refused_with_its_reason(tmp_path):
    """No link is taken, even one that stays inside: the refusal says so, and the observer hears it."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.py").write_text("x = 1\n")
    (tmp_path / "alias").symlink_to(tmp_path / "src")
    seen = Seen()
    c = WorkdirClient(tmp_path, seen, PermissionPolicy(tmp_path, "w001"), {})
    assert (await c.read_text_file("src/a.py", "s")).content == "x = 1\n"
    with pytest.raises(RequestError) as refused:
        await c.read_text_file("alias/a.py", "s")
    assert str(refused.value).startswith("refused by the worker's permission policy: alias/a.py is reached through a "
                                         "symbolic link on the way")
    with pytest.raises(RequestError):
        await c.write_text_file("y", "alias/b.py", "s")
    assert not (tmp_path / "src" / "b.py").exists()
    assert [w for w, _ in seen.refused] == ["fs/read_text_file alias/a.py", "fs/write_text_file alias/b.py"]
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(RequestError) as fifo:
        await asyncio.wait_for(c.read_text_file("pipe", "s"), 5)
    assert "not a regular file" in str(fifo.value)


# -- confined.py itself, both strategies --------------------------------------------------------------------


@pytest.fixture(params=["openat2", "walk"])
def box(request, tmp_path):
    from agensh_ray.confined import Confined

    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "a" / "b").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret").write_text(SECRET)
    (root / "a" / "b" / "f.txt").write_text("hello")
    (root / "a" / "out").symlink_to(outside)
    (root / "zero").symlink_to("/dev/zero")
    os.mkfifo(root / "fifo")
    with Confined(root, request.param) as c:
        yield c, root, outside


def test_confined_reads_only_regular_files_reached_without_a_link(box):
    from agensh_ray.errors import ConfinementError

    c, root, outside = box
    assert c.read_text("a/b/f.txt") == "hello"
    assert c.read_text(root / "a" / "b" / "f.txt") == "hello"
    assert c.read_text("a/b/../b/./f.txt") == "hello", "`..` inside is resolved lexically, never by the kernel"
    cases = {"a/out/secret": "symbolic link on the way", "zero": "symbolic link on the way",
             "fifo": "not a regular file", "../outside/secret": "outside", "a/b/../../../outside/secret": "outside",
             str(outside / "secret"): "outside", "/etc/passwd": "outside"}
    for path, why in cases.items():
        with pytest.raises(ConfinementError, match=why) as refused:
            c.read_bytes(path)
        assert refused.value.path == path
    with pytest.raises(ConfinementError, match="larger than 4 bytes"):
        c.read_bytes("a/b/f.txt", 4)
    assert c.read_bytes("a/b/f.txt", 4, whole=False) == b"hell"
    with pytest.raises(FileNotFoundError):
        c.read_bytes("a/b/missing")
    assert c.is_file("a/b/f.txt") and not c.is_file("zero") and not c.is_file("a/out/secret")
    assert c.is_dir("a") and not c.is_dir("a/out")


def test_confined_writes_beneath_making_parents_and_never_through_a_link(box):
    from agensh_ray.errors import ConfinementError

    c, root, outside = box
    assert c.write_text("new/deep/x.txt", "made") == root / "new" / "deep" / "x.txt"
    assert (root / "new" / "deep" / "x.txt").read_text() == "made"
    assert (root / "new" / "deep" / "x.txt").stat().st_mode & 0o777 == 0o644 & ~_umask()
    c.write_text("a/b/f.txt", "hi")
    assert (root / "a" / "b" / "f.txt").read_text() == "hi", "truncated, then written"
    for path in ("a/out/x", "a/out/new/x", "zero", "fifo"):
        with pytest.raises(ConfinementError):
            c.write_text(path, "x")
    (root / "last").symlink_to(outside / "secret")
    with pytest.raises(ConfinementError, match="symbolic link"):
        c.write_text("last", "overwritten")
    with pytest.raises(IsADirectoryError):
        c.write_text("a", "x")
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]
    assert (outside / "secret").read_text() == SECRET

    def refuse(st):
        raise PermissionError("checked on the opened file")

    with pytest.raises(PermissionError, match="checked"):
        c.write_text("a/b/f.txt", "never", check=refuse)
    assert (root / "a" / "b" / "f.txt").read_text() == "hi", "a check refuses before anything is truncated"


def test_confined_unlinks_walks_and_opens_directories_without_following(box):
    from agensh_ray.errors import ConfinementError

    c, root, outside = box
    with pytest.raises(ConfinementError, match="not a regular file"):
        c.unlink("zero")
    with pytest.raises(ConfinementError, match="symbolic link"):
        c.unlink("a/out/secret")
    c.unlink("a/b/f.txt")
    assert not (root / "a" / "b" / "f.txt").exists() and (outside / "secret").exists()
    walked = {here: (sorted(dirs), sorted(files)) for here, dirs, files, _ in c.walk()}
    assert walked == {"": (["a"], ["fifo", "zero"]), "a": (["b"], ["out"]), "a/b": ([], [])}
    fd = c.open_dir("a/b")
    try:
        assert os.path.samefile(f"/proc/self/fd/{fd}", root / "a" / "b")
    finally:
        os.close(fd)
    with pytest.raises(ConfinementError, match="symbolic link"):
        c.open_dir("a/out")
    with pytest.raises(ConfinementError, match="symbolic link"):
        c.open_dir("a/out/made", create=True)
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]


def _umask() -> int:
    old = os.umask(0)
    os.umask(old)
    return old


# -- the host's other operations on a worker's clone and HOME -----------------------------------------------


def _clone(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(tmp_path), "GIT_AUTHOR_NAME": "t",
           "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    subprocess.run(["git", "init", "-q", "-b", "main", str(work)], check=True, env=env)
    subprocess.run(["git", "-C", str(work), "commit", "-q", "--allow-empty", "-m", "x"], check=True, env=env)
    return work


def test_the_reference_is_never_installed_through_a_link(tmp_path):
    """A worker replaced its clone's `reference/` (and `.git/info/exclude`) with links out before the host
    started again: the install writes nothing through them; the link is replaced by the real folder."""
    from agensh_ray.worker.workdir import Workdirs

    run = tmp_path / "run"
    (run / "reference").mkdir(parents=True)
    (run / "reference" / "prog").write_bytes(b"#!/bin/sh\necho hi\n")
    work = _clone(tmp_path)
    outside = tmp_path / "etc"
    outside.mkdir()
    (outside / "passwd").write_text("root:x:0:0\n")
    (work / "reference").symlink_to(outside)
    (work / ".git" / "info").mkdir(exist_ok=True)
    (work / ".git" / "info" / "exclude").unlink(missing_ok=True)
    (work / ".git" / "info" / "exclude").symlink_to(outside / "passwd")
    Workdirs(run, "h0").install_references(work)
    assert sorted(p.name for p in outside.iterdir()) == ["passwd"]
    assert (outside / "passwd").read_text() == "root:x:0:0\n"
    ref = work / "reference" / "prog"
    assert not (work / "reference").is_symlink() and ref.is_file() and ref.stat().st_mode & 0o777 == 0o111


def test_kept_reads_a_clone_bounded_and_never_through_a_link(tmp_path):
    """`kept` on a clone whose packed-refs is a link (to /dev/zero, to a file outside holding a ref line) or a
    huge file: no link is followed, the read stays small, nothing hangs."""
    from agensh_ray.worker.workdir import Workdirs

    work = _clone(tmp_path)
    git = work / ".git"
    for ref in list((git / "refs").rglob("*")):
        if ref.is_file():
            ref.unlink()
    assert not Workdirs.kept(work)
    outside = tmp_path / "packed"
    outside.write_text("0123456789012345678901234567890123456789 refs/heads/main\n")
    (git / "packed-refs").symlink_to(outside)
    assert not Workdirs.kept(work), "a link to a ref line outside is not followed"
    (git / "packed-refs").unlink()
    (git / "packed-refs").symlink_to("/dev/zero")
    assert not Workdirs.kept(work)
    (git / "packed-refs").unlink()
    os.mkfifo(git / "packed-refs")
    assert not Workdirs.kept(work), "a FIFO is refused without blocking"
    (git / "packed-refs").unlink()
    with open(git / "packed-refs", "wb") as f:
        f.truncate(64 * 1024 * 1024)  # sparse: 64 MiB of zeros, no line break
    tracemalloc.start()
    try:
        assert Workdirs.kept(work), "garbage is read as garbage"
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * 1024 * 1024, f"kept read {peak} bytes of a huge packed-refs"
    (git / "packed-refs").unlink()
    (git / "refs" / "heads").rmdir()
    (git / "refs" / "heads").symlink_to(tmp_path)  # outside: a regular file there is no ref of the clone
    assert not Workdirs.kept(work)


def test_recover_removes_only_the_clones_own_lock_files(tmp_path):
    """git's stale lock files are removed from the clone; a `.git/refs` that is a link to a folder outside
    holding `*.lock` files, and a lock that is a link to a file outside, lose nothing outside."""
    from agensh_ray.worker.workdir import Workdirs

    work = _clone(tmp_path)
    git = work / ".git"
    outside = tmp_path / "run-locks"
    outside.mkdir()
    (outside / "xtables.lock").write_text("host")
    (outside / "other.lock").write_text("host")
    (git / "index.lock").write_text("")
    (git / "HEAD.lock").symlink_to(outside / "other.lock")
    (git / "refs").rename(git / "refs-real")
    (git / "refs").symlink_to(outside)
    home = tmp_path / "home"
    home.mkdir()
    Workdirs(tmp_path / "run", "h0").recover("w001", work, home)
    assert sorted(p.name for p in outside.iterdir()) == ["other.lock", "xtables.lock"]
    assert not (git / "index.lock").exists(), "the clone's own lock file is removed"


def test_host_reads_of_a_clones_config_and_writes_to_home_take_no_link(tmp_path):
    """The forge-token scan of `.git/config` (redaction) and the agent's HOME files (written at each start):
    a link in the worker's clone or HOME is not followed."""
    from agensh_ray.agent.harness import get_harness
    from agensh_ray.agent.session import forge_tokens

    work = _clone(tmp_path)
    elsewhere = tmp_path / "host-config"
    elsewhere.write_text('[remote "origin"]\n\turl = http://w002:peer-token-xyz@forge/r.git\n')
    (work / ".git" / "config").unlink()
    (work / ".git" / "config").symlink_to(elsewhere)
    assert forge_tokens(work) == []
    home, outside = tmp_path / "home", tmp_path / "etc"
    home.mkdir()
    outside.mkdir()
    (home / ".gemini").symlink_to(outside)
    with pytest.raises(PermissionError, match="symbolic link"):
        get_harness("gemini").environment(home=home, extra={})
    assert list(outside.iterdir()) == []
