"""The mirror: what one process wrote into a staged run folder, shipped to the object store with a
bounded lag (agensh_ray/storage.py says what staging is).

Every `interval_s` (2 s) a thread looks at the files this process owns (globs relative to the run folder:
the board's folder, a trace writer's own Parquet files, ...) and uploads those new or changed (size or
mtime) since their last upload, oldest first: a rolled Parquet file once, an append-only log whole each
time it grew, a file gone locally (git's packed loose refs) is deleted from the store. So the lag is one
interval plus the upload time, while the store answers. While it does not, nothing is dropped: the
files wait in the staging copy, the thread retries every interval and warns (then every 30 s) naming the
store, the count and bytes waiting and the staging folder; when the store is back it ships the backlog
and says how long the outage lasted. A record acknowledged by a writer is in the local staging copy
(fsynced as before); it reaches the store when the next round after the outage succeeds.

One mirror per process and run folder (`attach`), stopped with a last bounded flush at exit.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from agensh_ray.storage import NOT_SHIPPED, StoreURI, restore, run_uri_of

log = logging.getLogger("agensh.storage")

INTERVAL_S = 2.0
"""Seconds between the mirror's rounds: the lag's bound while the store answers (plus the upload)."""
WARN_EVERY_S = 30.0
SKIP_SUFFIXES = (".tmp", ".lock", ".part")
"""Files in the middle of being written (trace's atomic rename, git's locks, downloads)."""


@dataclass
class Report:
    """What a flush left: `pending` files not shipped (0: the store has everything this mirror owns)."""

    shipped_files: int = 0
    shipped_bytes: int = 0
    pending: int = 0
    lag_max_s: float = 0.0
    lag_p50_s: float = 0.0
    outages: int = 0
    outage_s: float = 0.0
    error: str | None = None


class Mirror:
    """Ships the owned files of a local folder to `remote`; thread-safe; `start` runs it every interval."""

    def __init__(self, local: Path, remote: StoreURI, interval_s: float = INTERVAL_S, store=None, warn=None,
                 probe_every_s: float = 0.0):
        self.local = Path(local)
        self.probe_every_s = probe_every_s
        """With nothing to ship, ask the store this often whether it answers (0: never; the driver's does)."""
        self.remote = remote
        self.interval_s = interval_s
        self._store = store
        self._warn = warn or log.warning
        self._owned: set[str] = set()
        self._sent: dict[str, tuple[int, int]] = {}
        """Relative path -> (size, mtime_ns) as last uploaded."""
        self._lock = threading.Lock()
        self._owned_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.report = Report()
        self._lags: list[float] = []
        self._down_since: float | None = None
        self._warned_at = 0.0
        self.last_ok = time.time()

    @property
    def store(self):
        if self._store is None:
            self._store = self.remote.filesystem()
        return self._store

    def own(self, *globs: str) -> None:
        """Ship the files matching these globs (relative to the run folder; `board/**/*` a whole subtree)."""
        with self._owned_lock:  # the thread iterates a copy (not `_lock`: that one is held while uploading)
            self._owned = self._owned | set(globs)

    def start(self) -> Mirror:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="mirror", daemon=True)
            self._thread.start()
        return self

    # -- a round -------------------------------------------------------------------------------------------
    def _changed(self, everything: bool) -> tuple[list[tuple[str, os.stat_result]], list[str]]:
        """(owned files new or changed since their upload, oldest first; uploaded files gone locally)."""
        seen: dict[str, os.stat_result] = {}
        if everything:
            paths = (p for p in self.local.rglob("*") if p.relative_to(self.local).parts[0] not in NOT_SHIPPED)
        else:
            with self._owned_lock:
                owned = sorted(self._owned)
            paths = (p for g in owned for p in self.local.glob(g))
        for p in paths:
            if p.name.endswith(SKIP_SUFFIXES):
                continue
            try:
                st = p.stat()
            except OSError:
                continue
            if p.is_file():
                seen[p.relative_to(self.local).as_posix()] = st
        todo = [(rel, st) for rel, st in seen.items() if self._sent.get(rel) != (st.st_size, st.st_mtime_ns)]
        gone = [rel for rel in self._sent if rel not in seen and (everything or self._owns(rel))
                and not (self.local / rel).exists()]
        return sorted(todo, key=lambda t: t[1].st_mtime_ns), gone

    def _owns(self, rel: str) -> bool:
        return any(rel.startswith(g[:-4] + "/") if g.endswith("/**/*") else PurePosixPath(rel).match(g)
                   for g in self._owned)

    def ship_once(self, everything: bool = False) -> int:
        """One round: upload what changed, delete what went; the number of files still waiting (an error
        stops the round: the store is unreachable, retried next round)."""
        with self._lock:
            if everything:  # what the other processes' mirrors shipped already is not sent again
                try:
                    self._note_remote()
                except OSError as exc:
                    self._down(exc, [])
                    return 1
            todo, gone = self._changed(everything)
            probe = not (todo or gone) and (self._down_since is not None or bool(
                self.probe_every_s and time.time() - self.last_ok >= self.probe_every_s))
            if not (todo or gone or probe or everything):
                return 0
            done = 0
            try:
                if probe:  # nothing to ship: is the store there? (an outage is said even while idle)
                    self.store.get_file_info(self.remote.path)
                for rel, st in todo:
                    self._upload(rel, st, lag=not everything)
                    done += 1
                for rel in gone:
                    self.store.delete_file(f"{self.remote.path}/{rel}")
                    self._sent.pop(rel, None)
            except OSError as exc:
                self._down(exc, todo[done:])
                return len(todo) - done if todo else int(not probe)
            self._up()
            return 0

    def _note_remote(self) -> None:
        from pyarrow import fs

        base = self.remote.path
        for info in self.store.get_file_info(fs.FileSelector(base, recursive=True, allow_not_found=True)):
            rel = info.path[len(base) + 1:]
            if info.type == fs.FileType.File and rel not in self._sent:
                try:
                    st = (self.local / rel).stat()
                except OSError:
                    continue
                # As long on the store, or longer (another node's process shipped a later copy: the logs only
                # grow): this process's copy is never sent over it.
                if st.st_size <= info.size:
                    self._sent[rel] = (st.st_size, st.st_mtime_ns)

    def _upload(self, rel: str, st: os.stat_result, lag: bool = True) -> None:
        try:
            src = open(self.local / rel, "rb")
        except FileNotFoundError:  # removed since the scan (git repacked): deleted from the store next round
            return
        with src, self.store.open_output_stream(f"{self.remote.path}/{rel}") as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
        self._sent[rel] = (st.st_size, st.st_mtime_ns)
        self.report.shipped_files += 1
        self.report.shipped_bytes += st.st_size
        if lag:
            self._lags.append(max(0.0, time.time() - st.st_mtime))

    def _down(self, exc: BaseException, todo: list[tuple[str, os.stat_result]]) -> None:
        now = time.time()
        if self._down_since is None:
            self._down_since = now
            self.report.outages += 1
        self.report.error = " ".join(str(exc).split())[:200]
        if now - self._warned_at >= WARN_EVERY_S:
            self._warned_at = now
            size = sum(st.st_size for _, st in todo)
            waits = f"{len(todo)} files ({size:,} bytes) wait" if todo else "what is written meanwhile waits"
            self._warn(f"object store {self.remote.where} unreachable for {now - self._down_since:.0f} s "
                       f"({self.report.error}); {waits} in the local copy {self.local}, retried every "
                       f"{self.interval_s:g} s: nothing written is lost while that folder survives")

    def _up(self) -> None:
        self.last_ok = time.time()
        if self._down_since is not None:
            took = time.time() - self._down_since
            self.report.outage_s += took
            self._warn(f"object store {self.remote.where} reachable again after {took:.1f} s; the backlog is shipped")
            self._down_since = None
            self._warned_at = 0.0
            self.report.error = None

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.ship_once()
            except Exception:  # never let the thread die: the next round tries again
                log.exception("mirror round failed for %s", self.local)

    # -- the end -------------------------------------------------------------------------------------------
    def flush(self, timeout_s: float = 10.0, everything: bool = False) -> Report:
        """Rounds until nothing waits or `timeout_s` passed; the report (`pending` > 0: not all shipped)."""
        deadline = time.time() + timeout_s
        while True:
            pending = self.ship_once(everything)
            if not pending or time.time() >= deadline:
                break
            self._stop.wait(min(self.interval_s, max(0.0, deadline - time.time())))
        self.report.pending = pending
        if self._lags:
            lags = sorted(self._lags)
            self.report.lag_max_s = round(lags[-1], 2)
            self.report.lag_p50_s = round(lags[len(lags) // 2], 2)
        return self.report

    def close(self, timeout_s: float = 10.0) -> Report:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s + 30)
        return self.flush(timeout_s)


_MIRRORS: dict[Path, Mirror] = {}
_GUARD = threading.Lock()


def attach(path: str | os.PathLike, *globs: str, restore_missing: bool = False) -> Mirror | None:
    """This process writes `path` (a file or folder in a run folder), and the `globs` (relative to the run
    folder; none: `path` itself, a folder whole): on a staged run, ship them with this process's mirror,
    started on first use; `restore_missing`: first fetch `path` from the store if it is not here. A local
    run: None, nothing done."""
    found = run_uri_of(path)
    if found is None:
        return None
    run_dir, loc = found
    if restore_missing:
        restore(path)
    rel = Path(path).resolve().relative_to(run_dir).as_posix()
    with _GUARD:
        if run_dir not in _MIRRORS:
            if not _MIRRORS:
                atexit.register(close_all)
            _MIRRORS[run_dir] = Mirror(run_dir, loc).start()
        m = _MIRRORS[run_dir]
    m.own(*(globs or ([rel] if Path(path).is_file() else [f"{rel}/**/*"])))
    return m


def flush(path: str | os.PathLike, timeout_s: float = 10.0) -> Report | None:
    """A bounded flush of this process's mirror of the run folder holding `path` (None: not mirrored)."""
    found = run_uri_of(path)
    m = _MIRRORS.get(found[0]) if found else None
    return m.flush(timeout_s) if m else None


def close_all(timeout_s: float = 5.0) -> None:
    with _GUARD:
        mirrors = list(_MIRRORS.values())
        _MIRRORS.clear()
    for m in mirrors:
        try:
            rep = m.close(timeout_s)
            if rep.pending:
                log.warning("exit: %d files of %s not shipped to %s; they are in that local copy",
                            rep.pending, m.local, m.remote.where)
        except Exception:
            log.exception("closing the mirror of %s failed", m.local)
