"""The append-only JSON-lines log behind every durable record of a run: the
board, the embedded forge (state and events), both chats and the webhook
intake keep their history in one of these, and reload it after a restart.

One recovery rule for all of them. A process can die in the middle of an
append, leaving a torn last line (no newline). At open, that fragment is cut
off and the cut is fsynced before anything else is written, so the next
record never lands glued to it. Every complete line is kept; a complete line
that is not JSON (disk damage, a hand edit) is logged and skipped, and the
lines after it are still read. Numbering is the owner's: records carry their
own sequence numbers, and an owner continues from the highest one it
reloaded (`next_seq`), never from a count of lines, so a number is never
handed out twice.

An append is one `os.write` of whole lines on an O_APPEND descriptor, then an
fsync (unless the log was opened with ``sync=False``). If the write or the
fsync fails, the file is truncated back to its size before the append and the
error is raised: a record is either all there and durable, or absent.

Fencing: one writer at a time. Each open takes the next *incarnation* of the log, a number kept in a sidecar
file (`<log>.owner`), under an exclusive `flock` of that file; each append takes the same lock and checks the
number is still its own before it writes. An older incarnation that comes back to life (a process stopped with
SIGSTOP, replaced, then continued; a process Ray wrongly believed dead) fails its next append with `Fenced` and
writes nothing: there is never a double writer. An open waits for an append in progress to end; a writer stopped
mid-append holds the lock until it is killed (the driver kills a hung actor: actors/supervise.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

READ_CHUNK = 1 << 20
"""Bytes of complete lines handed out per chunk when reloading (see `chunks`)."""


class Fenced(OSError):
    """An append by an incarnation of a log that a newer one has replaced: refused, nothing written."""


def encode(record: dict[str, Any]) -> bytes:
    """One record as a log line: compact JSON, ASCII only (lone surrogates escaped), newline-terminated."""
    return (json.dumps(record, separators=(",", ":"), ensure_ascii=True) + "\n").encode("ascii")


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - a platform without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def complete_end(f: Any, size: int) -> int:
    """Byte offset just after the last newline of an open binary file of `size` bytes."""
    pos = size
    while pos > 0:
        step = min(1 << 16, pos)
        pos -= step
        f.seek(pos)
        k = f.read(step).rfind(b"\n")
        if k >= 0:
            return pos + k + 1
    return 0


class AppendLog:
    """One append-only JSON-lines file (see the module docstring for the rules).

    ``records()`` (or ``chunks()`` for a fast bulk parse) reads what the file held at open;
    ``append``/``append_many``/``append_bytes`` add to it. Thread-safe; ``close()`` is idempotent.
    """

    def __init__(self, path: str | os.PathLike[str], sync: bool = True):
        self.path = Path(path)
        self.sync = sync
        self.path.parent.mkdir(parents=True, exist_ok=True)
        created = not self.path.exists()
        self._owner = os.open(self.path.with_name(self.path.name + ".owner"), os.O_RDWR | os.O_CREAT, 0o644)
        self._lock = threading.Lock()
        with self._owned(check=False):
            self.incarnation = self._read_incarnation() + 1
            """This writer's number: appends fail (`Fenced`) once a newer open has taken the next one."""
            data = f"{self.incarnation}\n".encode()
            os.pwrite(self._owner, data, 0)
            os.ftruncate(self._owner, len(data))
            os.fsync(self._owner)
            self._open_log(created)

    def _read_incarnation(self) -> int:
        raw = os.pread(self._owner, 64, 0).strip()
        try:
            return int(raw or 0)
        except ValueError:  # a damaged sidecar: any number is newer than every writer that could hold it
            log.error("%s.owner: unreadable incarnation %r; counting from it as 0", self.path, raw[:20])
            return 0

    @contextlib.contextmanager
    def _owned(self, check: bool = True):
        """The log's sidecar lock held; with `check`, `Fenced` unless this writer is still the newest."""
        fcntl.flock(self._owner, fcntl.LOCK_EX)
        try:
            if check and (now := self._read_incarnation()) != self.incarnation:
                raise Fenced(f"{self.path}: this writer (incarnation {self.incarnation}) was replaced by incarnation "
                             f"{now}; nothing written")
            yield
        finally:
            fcntl.flock(self._owner, fcntl.LOCK_UN)

    def _open_log(self, created: bool) -> None:
        self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        if created:
            _fsync_dir(self.path.parent)  # the new name survives a crash too
        size = os.fstat(self._fd).st_size
        with open(self.path, "rb") as f:
            end = complete_end(f, size)
        self.torn_bytes = size - end
        """Bytes of a torn last line cut off at open (0 if the file ended cleanly)."""
        if self.torn_bytes:
            log.warning("%s: torn last line (%d bytes after the last complete line, a crash mid-write); cut off",
                        self.path, self.torn_bytes)
            os.ftruncate(self._fd, end)
            os.fsync(self._fd)
        self._size = end
        self._loaded_end = end
        self.bad_lines = 0
        """Complete lines that were not JSON, skipped by `records()`."""

    # -- reading what was there at open -----------------------------------------------

    def chunks(self, chunk_bytes: int = READ_CHUNK) -> Iterator[list[bytes]]:
        """The complete lines present at open, in lists of about `chunk_bytes` (each line keeps its newline)."""
        end = self._loaded_end
        read = 0
        with open(self.path, "rb") as f:
            while read < end:
                lines: list[bytes] = f.readlines(min(chunk_bytes, end - read))
                if not lines:
                    break
                got = sum(map(len, lines))
                if read + got > end:  # never past what was complete at open
                    keep, total = [], read
                    for line in lines:
                        if total + len(line) > end:
                            break
                        keep.append(line)
                        total += len(line)
                    lines, got = keep, total - read
                read += got
                yield lines

    def records(self) -> Iterator[dict[str, Any]]:
        """Every record present at open, in order; a line that is not a JSON object is logged and skipped."""
        line_no = 0
        for lines in self.chunks():
            for raw in lines:
                line_no += 1
                if not raw.strip():
                    continue
                try:
                    rec = json.loads(raw)
                except ValueError as exc:
                    self.skipped(line_no, exc)
                    continue
                if not isinstance(rec, dict):
                    self.skipped(line_no, "not a JSON object")
                    continue
                yield rec

    def skipped(self, line_no: int, why: object) -> None:
        """Count and log one unreadable line (owners that parse `chunks()` themselves call this too)."""
        self.bad_lines += 1
        log.error("%s: line %d is unreadable (%s); skipped", self.path, line_no, why)

    # -- appending ---------------------------------------------------------------------

    def append(self, record: dict[str, Any]) -> None:
        self.append_bytes(encode(record))

    def append_many(self, records: Iterable[dict[str, Any]]) -> None:
        self.append_bytes(b"".join(encode(r) for r in records))

    def append_bytes(self, data: bytes) -> None:
        """Append whole lines (`data` must end with a newline): one write, then fsync; rolled back on failure."""
        if not data:
            return
        if not data.endswith(b"\n"):
            raise ValueError("an append must be whole lines (end with a newline)")
        with self._lock:
            if self._fd < 0:
                raise ValueError(f"{self.path} is closed")
            with self._owned():
                self._write(data)

    def _write(self, data: bytes) -> None:
        try:
            view = memoryview(data)
            while view:
                n = os.write(self._fd, view)
                view = view[n:]
            if self.sync:
                os.fsync(self._fd)
        except BaseException:
            try:
                os.ftruncate(self._fd, self._size)
            except OSError:  # pragma: no cover - the disk is gone too
                log.exception("%s: could not roll back a failed append", self.path)
            raise
        self._size += len(data)

    @property
    def size(self) -> int:
        """Bytes of complete lines in the file (what was loaded plus what was appended since)."""
        return self._size

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
            if self._owner >= 0:
                os.close(self._owner)
                self._owner = -1

    def __enter__(self) -> AppendLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def next_seq(records: Iterable[dict[str, Any]], key: str = "seq") -> int:
    """One more than the highest `key` among `records` (1 for none): where an owner continues numbering."""
    top = 0
    for rec in records:
        v = rec.get(key)
        if isinstance(v, int) and v > top:
            top = v
    return top + 1


def read_new_lines(path: Path, offset: int) -> tuple[list[bytes], int]:
    """Complete lines another process appended to `path` after byte `offset`, and the offset after them
    (a line still being written is left for the next call). Missing file: ([], offset)."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return [], offset
    if size <= offset:
        return [], offset
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read(size - offset)
    end = data.rfind(b"\n") + 1
    return data[:end].splitlines(keepends=True), offset + end
