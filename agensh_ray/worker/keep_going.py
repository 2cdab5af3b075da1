"""The single-agent baseline's stop hook (`RunConfig.baseline`): when the agent ends its turn before the
deadline it is told to keep going (prompts/keep_going.md), until the deadline or `baseline_idle_turns` turns
in a row that did no work; then the worker stops and the run ends.

A turn did work when the agent edited a file (an ACP tool call of kind `edit`), used a forge tool that
changes something (`WORK_TOOLS`), or left its clone different from how the turn found it (HEAD, the index
or the working tree: `fingerprint`), which also catches edits made through the shell. Plain logic and no git
(the clone's config is the agent's: git would run what it names, on the host), so the rule is tested without a
host.
"""

from __future__ import annotations

import hashlib
import os
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

WORK_TOOLS = frozenset({"pr_create", "pr_merge", "pr_review", "pr_comment", "board_write", "send_dm", "channel_post"})
"""Infra tools whose successful call counts as work."""
NOT_ENDED = frozenset({"cancelled", "agent_died", "turn_deadline", "error"})
"""Turn endings the hook leaves alone: the run is stopping, the host is restarting the agent, or the turn
failed (a model outage is the host's to back off from, not the agent choosing to stop)."""

MAX_FILES = 20_000
"""Entries of the working tree a fingerprint looks at; past it, "capped" is hashed instead of the rest."""
MAX_BYTES = 32 * 2**20
"""Bytes of file content read per fingerprint; files past it are hashed by size and mtime."""
MAX_FILE_BYTES = 2**20
"""A bigger file is hashed by its size and mtime."""
MAX_DEPTH = 64
"""Folders deeper than this are not entered ("capped")."""
MAX_GIT_FILE = 4 * 2**20
"""Bytes read of HEAD, a ref, packed-refs or the index."""
_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
_DIR = os.O_RDONLY | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC


def fingerprint(workdir: Path) -> str:
    """A hash of a clone's state: HEAD and the ref it names, the index's entries and the working tree (each
    entry's path and mode, a link's target, a file's content, or its size and mtime past the byte budget; the
    ignored files too), read off the disk without git (which would run what the clone's config names) and
    without following any link, within fixed bounds (a cap reached is hashed too). It changes when the agent
    changed something; "" when the clone cannot be opened."""
    h = hashlib.sha256()
    try:
        top = os.open(workdir, _DIR)
    except OSError:
        return ""
    try:
        _hash_git(h, top)
        budget = _Budget()
        _hash_tree(h, top, b"", 0, budget)
        h.update(b"\0capped" if budget.capped else b"\0whole")
    finally:
        os.close(top)
    return h.hexdigest()


class _Budget:
    def __init__(self) -> None:
        self.files = MAX_FILES
        self.bytes = MAX_BYTES
        self.capped = False


def _read(dir_fd: int, name: str | bytes, limit: int) -> bytes | None:
    """At most `limit` bytes of the regular file `name` in `dir_fd` (None: missing, a link, not a regular file)."""
    try:
        fd = os.open(name, _OPEN, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks, left = [], limit
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def _open_dir(dir_fd: int, parts: list[str]) -> int | None:
    """The folder `parts` below `dir_fd`, each component opened without following a link (None: not there)."""
    fd = os.dup(dir_fd)
    for part in parts:
        try:
            nxt = os.open(part, _DIR, dir_fd=fd)
        except OSError:
            os.close(fd)
            return None
        os.close(fd)
        fd = nxt
    return fd


def _hash_git(h: hashlib._Hash, top: int) -> None:
    """HEAD, the ref it names (a loose ref, else packed-refs) and the index's entries."""
    git = _open_dir(top, [".git"])
    if git is None:  # no .git folder (or a link, or a gitfile): its bytes, if a file
        h.update(b"nogit\0" + (_read(top, ".git", 4096) or b"?"))
        return
    try:
        head = _read(git, "HEAD", 4096) or b"?"
        h.update(b"HEAD\0" + head + b"\0")
        ref = head.strip()[5:].strip() if head.startswith(b"ref:") else b""
        parts = ref.decode("utf-8", "replace").split("/")
        if ref and parts[0] == "refs" and not any(p in ("", ".", "..") for p in parts):
            folder = _open_dir(git, parts[:-1])
            loose = _read(folder, parts[-1], 4096) if folder is not None else None
            if folder is not None:
                os.close(folder)
            h.update(b"ref\0" + (loose if loose is not None else b"packed\0" + (_read(git, "packed-refs",
                                                                                     MAX_GIT_FILE) or b"?")))
        h.update(b"\0index\0" + _index_entries(_read(git, "index", MAX_GIT_FILE)))
    finally:
        os.close(git)


def _index_entries(data: bytes | None) -> bytes:
    """What the index says is staged (each entry's mode, object id, stage and path), not its stat cache: `git
    status` rewrites that without any work done. The raw bytes when the format is not one this reads."""
    if data is None:
        return b"?"
    if len(data) < 12 or data[:4] != b"DIRC":
        return hashlib.sha256(data).digest()
    version, count = struct.unpack(">II", data[4:12])
    if version not in (2, 3, 4):
        return hashlib.sha256(data).digest()
    out = hashlib.sha256()
    pos, previous = 12, b""
    try:
        for _ in range(count):
            mode = data[pos + 24:pos + 28]
            oid = data[pos + 40:pos + 60]
            flags = struct.unpack(">H", data[pos + 60:pos + 62])[0]
            at = pos + 62 + (2 if version >= 3 and flags & 0x4000 else 0)
            if version == 4:
                strip, n = 0, 0
                while True:  # git's offset encoding of how much of the previous path to drop
                    byte = data[at + n]
                    strip = (strip << 7) | (byte & 0x7F)
                    n += 1
                    if not byte & 0x80:
                        break
                    strip += 1
                end = data.index(b"\0", at + n)
                path = previous[:len(previous) - strip] + data[at + n:end]
                pos = end + 1
            else:
                end = data.index(b"\0", at)
                path = data[at:end]
                pos = pos + ((end - pos + 8) & ~7)
            previous = path
            out.update(mode + oid + bytes([(flags >> 12) & 3]) + path + b"\0")
    except (IndexError, ValueError, struct.error):
        return hashlib.sha256(data).digest()
    return out.digest()


def _hash_tree(h: hashlib._Hash, dir_fd: int, prefix: bytes, depth: int, budget: _Budget) -> None:
    """The entries of the folder `dir_fd` (not .git at the top), in name order, each folder entered without
    following a link, until the budget runs out."""
    names: list[bytes] = []
    try:
        with os.scandir(dir_fd) as it:
            for entry in it:
                if len(names) >= budget.files:
                    budget.capped = True
                    break
                names.append(os.fsencode(entry.name))
    except OSError:
        h.update(prefix + b"\0unreadable\0")
        return
    for name in sorted(names):
        if not prefix and name == b".git":
            continue
        if budget.files <= 0:
            budget.capped = True
            return
        budget.files -= 1
        path = prefix + name
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            h.update(path + b"\0gone\0")
            continue
        h.update(b"%s\0%o\0" % (path, st.st_mode))
        if stat.S_ISLNK(st.st_mode):
            try:
                h.update(os.fsencode(os.readlink(name, dir_fd=dir_fd)) + b"\0")
            except OSError:
                h.update(b"?\0")
        elif stat.S_ISDIR(st.st_mode):
            if depth >= MAX_DEPTH:
                budget.capped = True
                continue
            sub = _open_dir(dir_fd, [os.fsdecode(name)])
            if sub is None:
                h.update(b"?\0")
                continue
            try:
                _hash_tree(h, sub, path + b"/", depth + 1, budget)
            finally:
                os.close(sub)
        elif not stat.S_ISREG(st.st_mode):
            continue  # a FIFO, socket or device: never opened
        elif st.st_mode & 0o444 and st.st_size <= min(MAX_FILE_BYTES, budget.bytes):
            # its content, not its mtime: a rewrite with the same bytes (a test run's cache) is no work
            data = _read(dir_fd, name, st.st_size + 1)
            budget.bytes -= st.st_size
            h.update(b"=" + hashlib.sha256(data if data is not None else b"?").digest())
        else:  # too big for the budget, or the execute-only reference (its bytes are never read): size and mtime
            h.update(b"%d %d\0" % (st.st_size, st.st_mtime_ns))


@dataclass
class KeepGoing:
    """Counts a baseline worker's idle turns and says whether to tell it to keep going."""

    idle_limit: int
    """Consecutive turns without work after which the agent is let stop."""
    idle: int = 0
    """Turns without work in a row so far."""
    told: int = 0
    """Keep-going prompts sent."""

    def turn_ended(self, worked: bool, stop_reason: str, before_deadline: bool) -> str | None:
        """"keep_going" (prompt the agent again), "stop" (let it stop: the reason is `why_stop`) or None (this
        ending is not the agent's: leave it to the host)."""
        if stop_reason in NOT_ENDED:
            return None
        self.idle = 0 if worked else self.idle + 1
        if not before_deadline:
            return None  # the run ends at its deadline anyway
        if self.idle >= self.idle_limit:
            return "stop"
        self.told += 1
        return "keep_going"

    @property
    def why_stop(self) -> str:
        return f"baseline: {self.idle} turns in a row without work (after {self.told} keep-going prompts)"
