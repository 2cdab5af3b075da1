"""Per-worker resource limits: processes, memory, CPU share, /tmp and disk, each with a message when reached.

Where the machine has cgroups, each sandboxed agent process (its sandbox: the agent, every command it runs,
every terminal that joins it; for a shared sim process, the host's one process) runs in a cgroup of its own,
`<the host's own group>/agensh-<run id>/<label>-<n>` in each controller, made when the process starts and
removed when it stops (the host removes what is left at its stop, the run's reaper after a driver that died:
empty groups only, an `rmdir` of a group that still holds a task fails):

- memory: `memory.limit_in_bytes` (v1; `memory.memsw.limit_in_bytes` too where swap is accounted) or
  `memory.max` + `memory.swap.max` 0 + `memory.oom.group` (v2). Past it the kernel's OOM killer kills inside
  that group only; `memory.oom_control`'s `oom_kill` (v1) or `memory.events`' `oom_kill` (v2) tells the host.
- pids: `pids.max` counts the group's tasks (processes and threads) whatever their uid, root included
  (RLIMIT_NPROC does not hold for uid 0, and counts a user's processes machine-wide); `pids.events` `max`
  counts the forks it refused.
- cpu: `cpu.shares` (v1) or `cpu.weight` (v2): workers share the CPU equally under contention; the run's
  parent group weighs as much as its groups together, so the agents as a whole keep the share they had.

The process joins its groups before bubblewrap starts (`wrap`: a `sh` that writes its own pid into each
group's `cgroup.procs`, then execs), so nothing of the sandbox ever runs outside them; enter.py does the same
for a terminal (`--cgroup`). cgroup v2 is used where every controller is in the v2 hierarchy and the host's
own group can delegate them (its `cgroup.subtree_control`); a machine with neither gets the fallback:

- rlimits (prlimit before bwrap, copied by enter.py onto a terminal): RLIMIT_DATA for memory (per process,
  not per worker; RLIMIT_AS would stop V8, which reserves far more address space than it uses), RLIMIT_NPROC
  only when the host is not root (for root the kernel ignores it), no CPU limit (RLIMIT_CPU would end a
  long-lived agent).

Always: RLIMIT_FSIZE at the disk limit (no single file larger), a /tmp and /var/tmp of `tmp_mib` each
(bwrap `--size`, sandbox.py), and the disk watcher (`DiskUsage`): the worker's host measures its workdir and
HOME (a bounded walk that follows no link and stays on one file system) every `disk_check_s`, sooner as the
usage nears the limit; at the limit it stops the agent's turn (ACP cancel, the commands it runs killed),
refuses its fs/* writes until it is back under, tells the agent and writes a `limit_reached` lifecycle row.
This file system has no per-folder quota, and a loop-mounted image per worker would take the clone out of the
run folder (bench/sandbox.py measures what the watcher costs).
"""

from __future__ import annotations

import errno
import functools
import itertools
import os
import shlex
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from agensh_ray.config import LimitsConfig

CONTROLLERS = ("memory", "pids", "cpu")
PARENT_PREFIX = "agensh-"
"""The run's parent group is `agensh-<run id>` under the host's own group in each controller."""
V1_SHARES_PER_WEIGHT = 1024 / 100
"""v1 `cpu.shares` 1024 is v2 `cpu.weight` 100: each the default."""
RLIMIT_MARGIN_PROCS = 64
"""RLIMIT_NPROC (non-root fallback) is the user's processes at start plus the limit plus this margin."""
_serial = itertools.count(1)


def mib(n: int) -> int:
    return int(n) << 20


def parent_name(run_id: str) -> str:
    return f"{PARENT_PREFIX}{run_id}"


# -- what the machine has ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Hierarchy:
    """Where this process's own group is, per controller, and which cgroup version holds them."""

    version: int
    own: dict[str, Path] = field(default_factory=dict)
    """v1: controller -> the folder of this process's group in that controller's hierarchy; v2: all -> one."""


def _mounts() -> list[tuple[str, str, str, str]]:
    """(mount point, root inside the file system, fstype, super options) of each cgroup mount."""
    out = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        left, _, right = line.partition(" - ")
        a, b = left.split(), right.split()
        if len(a) >= 5 and len(b) >= 3 and b[0] in ("cgroup", "cgroup2"):
            out.append((a[4].replace("\\040", " "), a[3], b[0], b[2]))
    return out


def _own_paths() -> dict[str, str]:
    """controller -> this process's group path ('' key: the v2 group), from /proc/self/cgroup."""
    out: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        _, ctrls, path = line.split(":", 2)
        for c in ctrls.split(",") if ctrls else [""]:
            out[c] = path
    return out


def _under(mount: str, root: str, path: str) -> Path | None:
    rel = os.path.relpath(path, root) if root != "/" else path.lstrip("/")
    if rel.startswith(".."):
        return None  # our group is outside what this mount shows
    return Path(mount) / ("" if rel == "." else rel)


@functools.cache
def detect() -> tuple[Hierarchy | None, str]:
    """The cgroups this host can make groups in, or None and why not (checked once per process)."""
    if os.environ.get("AGENSH_NO_CGROUPS"):
        return None, "AGENSH_NO_CGROUPS is set"
    mounts, own = _mounts(), _own_paths()
    v1: dict[str, Path] = {}
    for mount, root, fstype, opts in mounts:
        if fstype != "cgroup":
            continue
        for c in CONTROLLERS:
            if c in opts.split(",") and c in own and c not in v1:
                d = _under(mount, root, own[c])
                if d is not None:
                    v1[c] = d
    if len(v1) == len(CONTROLLERS):
        missing = [c for c, d in v1.items() if not os.access(d, os.W_OK)]
        if missing:
            return None, f"cgroup v1 {', '.join(missing)}: the host's group is not writable"
        return Hierarchy(1, v1), "cgroup v1"
    why = f"cgroup v1 has {', '.join(sorted(v1)) or 'none'} of {', '.join(CONTROLLERS)}"
    for mount, root, fstype, _ in mounts:
        if fstype != "cgroup2" or "" not in own:
            continue
        d = _under(mount, root, own[""])
        if d is None:
            continue
        try:
            available = set((d / "cgroup.controllers").read_text().split())
        except OSError:
            continue
        if not set(CONTROLLERS) <= available:
            why += f"; cgroup v2 at {mount} has {', '.join(sorted(available & set(CONTROLLERS))) or 'none'}"
            continue
        try:
            enabled = set((d / "cgroup.subtree_control").read_text().split())
            if not set(CONTROLLERS) <= enabled:  # only where the group may delegate (no processes of its own)
                (d / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in CONTROLLERS))
        except OSError as exc:
            why += f"; cgroup v2: the host's group {d} cannot delegate {', '.join(CONTROLLERS)} ({exc.strerror})"
            continue
        return Hierarchy(2, {c: d for c in CONTROLLERS}), "cgroup v2"
    return None, why


@functools.cache
def bwrap_tmpfs_size() -> bool:
    """bubblewrap takes `--size` before `--tmpfs` (0.5 and later; Debian bookworm's 0.8.0 does)."""
    import subprocess

    from agensh_ray import bubblewrap

    try:
        res = subprocess.run([bubblewrap.executable(), "--help"], capture_output=True, text=True, timeout=10,
                             check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "--size" in res.stdout + res.stderr


# -- one agent process's group ---------------------------------------------------------------------------
def _write(path: Path, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _field(text: str, name: str) -> int:
    for line in text.splitlines():
        k, _, v = line.partition(" ")
        if k == name:
            try:
                return int(v)
            except ValueError:
                return 0
    return 0


class Group:
    """One agent process's cgroup (a folder per controller in v1, one folder in v2)."""

    def __init__(self, hierarchy: Hierarchy, parent: str, name: str):
        self.h = hierarchy
        self.parent = parent
        self.name = name
        self.dirs = {c: d / parent / name for c, d in hierarchy.own.items()}
        self._seen = {"oom_kill": 0, "pids_max": 0}

    @property
    def folders(self) -> list[Path]:
        return list(dict.fromkeys(self.dirs.values()))

    def create(self, memory_b: int | None, pids: int | None, cpu_weight: int | None) -> None:
        """Make the group with its limits (and the run's parent where missing)."""
        for d in self.folders:
            for attempt in range(3):  # another host of the node may remove the empty parent meanwhile
                try:
                    if not d.parent.is_dir():
                        d.parent.mkdir(exist_ok=True)
                        if self.h.version == 2:
                            _write(d.parent / "cgroup.subtree_control", " ".join(f"+{x}" for x in CONTROLLERS))
                    d.mkdir(exist_ok=True)
                    break
                except FileNotFoundError:
                    if attempt == 2:
                        raise
        if self.h.version == 1:
            if memory_b:
                m = self.dirs["memory"]
                _write(m / "memory.limit_in_bytes", str(memory_b))
                if (m / "memory.memsw.limit_in_bytes").exists():  # no swap past the limit either
                    _write(m / "memory.memsw.limit_in_bytes", str(memory_b))
            if pids:
                _write(self.dirs["pids"] / "pids.max", str(pids))
            if cpu_weight:
                _write(self.dirs["cpu"] / "cpu.shares", str(max(2, int(cpu_weight * V1_SHARES_PER_WEIGHT))))
                self._weigh_parent(self.dirs["cpu"].parent, "cpu.shares", V1_SHARES_PER_WEIGHT, 2, 262144)
        else:
            d = self.dirs["memory"]
            if memory_b:
                _write(d / "memory.max", str(memory_b))
                if (d / "memory.swap.max").exists():
                    _write(d / "memory.swap.max", "0")
                if (d / "memory.oom.group").exists():  # the whole sandbox goes, as the agent's death path expects
                    _write(d / "memory.oom.group", "1")
            if pids:
                _write(d / "pids.max", str(pids))
            if cpu_weight:
                _write(d / "cpu.weight", str(min(10000, max(1, cpu_weight))))
                self._weigh_parent(d.parent, "cpu.weight", 1, 1, 10000)

    @staticmethod
    def _weigh_parent(parent: Path, name: str, unit: float, lo: int, hi: int) -> None:
        """The run's parent weighs as its children together (best effort: hosts of a node race on it)."""
        total = 0
        for child in parent.iterdir():
            if child.is_dir():
                try:
                    total += int(_read(child / name).strip() or 0)
                except ValueError:
                    pass
        try:
            _write(parent / name, str(min(hi, max(lo, total or int(100 * unit)))))
        except OSError:
            pass

    def procs_files(self) -> list[Path]:
        return [d / "cgroup.procs" for d in self.folders]

    def wrap(self, argv: list[str]) -> list[str]:
        """`argv`, run by a shell that first moves itself into this group (then execs: the same pid)."""
        joins = " && ".join(f"echo $$ > {shlex.quote(str(p))}" for p in self.procs_files())
        script = f"{joins} || {{ echo 'agensh: cannot join the worker'\"'\"'s cgroup' >&2; exit 125; }}; exec \"$@\""
        return ["/bin/sh", "-c", script, "agensh-limits", *argv]

    def counters(self) -> dict[str, int]:
        """How often the kernel enforced a limit in this group since it was made."""
        if self.h.version == 1:
            oom = _field(_read(self.dirs["memory"] / "memory.oom_control"), "oom_kill")
            pmax = _field(_read(self.dirs["pids"] / "pids.events"), "max")
        else:
            oom = _field(_read(self.dirs["memory"] / "memory.events"), "oom_kill")
            pmax = _field(_read(self.dirs["pids"] / "pids.events"), "max")
        return {"oom_kill": oom, "pids_max": pmax}

    def new_events(self) -> dict[str, int]:
        """Counters that grew since the last call (each event is reported once)."""
        now = self.counters()
        out = {k: v - self._seen[k] for k, v in now.items() if v > self._seen[k]}
        self._seen.update(now)
        return out

    def peak_memory(self) -> int:
        if self.h.version == 1:
            return int(_read(self.dirs["memory"] / "memory.max_usage_in_bytes").strip() or 0)
        return int(_read(self.dirs["memory"] / "memory.peak").strip() or 0)

    def pids(self) -> list[int]:
        out: set[int] = set()
        for p in self.procs_files():
            out.update(int(x) for x in _read(p).split())
        return sorted(out)

    def remove(self, wait_s: float = 2.0) -> bool:
        """rmdir the group (only an empty group goes: the kernel refuses one with tasks), then the run's parent if
        it is empty too. False if the group still held tasks after `wait_s`."""
        deadline = time.monotonic() + wait_s
        for d in self.folders:
            while True:
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as exc:
                    if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                        return False
                    time.sleep(0.05)
            try:
                d.parent.rmdir()
            except OSError:
                pass  # other groups of the run are still there
        return True


def remove_empty(parent: str, hierarchy: Hierarchy | None = None) -> list[str]:
    """Remove the run's parent group `parent` and every empty group under it, in every controller; what is left
    (a group still holding a task) stays. Returns the folders removed."""
    h = hierarchy or detect()[0]
    if h is None:
        return []
    removed = []
    for base in dict.fromkeys(h.own.values()):
        top = base / parent
        if not top.is_dir():
            continue
        for root, dirs, _ in os.walk(top, topdown=False):
            for d in dirs:
                try:
                    os.rmdir(os.path.join(root, d))
                    removed.append(os.path.join(root, d))
                except OSError:
                    pass
        try:
            top.rmdir()
            removed.append(str(top))
        except OSError:
            pass
    return removed


# -- what a process gets -----------------------------------------------------------------------------------
@dataclass
class ProcessLimits:
    """The limits of one agent process (a worker's, or a host's shared sim process serving `scale` workers):
    its cgroup where the machine has them, else rlimits; RLIMIT_FSIZE always."""

    cfg: LimitsConfig
    run_id: str
    label: str
    scale: int = 1
    group: Group | None = None
    mechanism: str = ""
    """What enforces them, for the lifecycle row ("cgroup v1", or the fallback and why)."""

    @property
    def memory_mib(self) -> int | None:
        return self.cfg.memory_mib * self.scale if self.cfg.memory_mib else None

    @property
    def pids(self) -> int | None:
        return self.cfg.pids * self.scale if self.cfg.pids else None

    def start(self) -> None:
        """Make the process's group (blocking: run it in a thread)."""
        h, why = detect()
        self.group = None
        if h is not None and self.cfg.cgroups:
            g = Group(h, parent_name(self.run_id), f"{self.label}-{next(_serial)}")
            try:
                g.create(mib(self.memory_mib) if self.memory_mib else None, self.pids, self.cfg.cpu_weight)
                self.group, self.mechanism = g, why
                return
            except OSError as exc:
                g.remove(0)
                why = f"{why}: could not make {g.folders[0]}: {exc.strerror or exc}"
        elif not self.cfg.cgroups:
            why = "cgroups off (LimitsConfig.cgroups)"
        self.mechanism = f"rlimits ({why})"

    def rlimits(self) -> dict[str, int]:
        """prlimit's options: FSIZE always; DATA and NPROC only without a group."""
        out: dict[str, int] = {}
        if self.cfg.disk_mib:
            out["fsize"] = mib(self.cfg.disk_mib)
        if self.group is None:
            if self.memory_mib:
                out["data"] = mib(self.memory_mib)
            if self.pids and os.geteuid() != 0:
                out["nproc"] = self.pids + _user_processes() + RLIMIT_MARGIN_PROCS
        return out

    def wrap(self, argv: list[str]) -> list[str]:
        """`argv` (bwrap's command line) in its group and under its rlimits."""
        limits = self.rlimits()
        if limits:
            argv = ["prlimit", *(f"--{k}={v}" for k, v in limits.items()), "--", *argv]
        return self.group.wrap(argv) if self.group is not None else argv

    def describe(self) -> str:
        parts = []
        if self.memory_mib:
            parts.append(f"memory {self.memory_mib} MiB")
        if self.pids:
            parts.append(f"{self.pids} processes")
        if self.group is not None and self.cfg.cpu_weight:
            parts.append(f"cpu weight {self.cfg.cpu_weight}")
        if self.cfg.tmp_mib:
            parts.append(f"/tmp {self.cfg.tmp_mib} MiB")
        if self.cfg.disk_mib:
            parts.append(f"disk {self.cfg.disk_mib} MiB")
        return ", ".join(parts) + f" ({self.mechanism or 'not started'})"

    def events(self) -> list[str]:
        """What the kernel enforced since the last call, as messages ("memory limit 256 MiB reached: ...")."""
        if self.group is None:
            return []
        out = []
        new = self.group.new_events()
        if new.get("oom_kill"):
            out.append(f"memory limit {self.memory_mib} MiB reached: the kernel killed {new['oom_kill']} process(es) "
                       "of the sandbox (the largest). Run fewer or smaller things at once (parallel builds or tests, "
                       "large data in memory or in /tmp).")
        if new.get("pids_max"):
            out.append(f"process limit {self.pids} reached: {new['pids_max']} fork(s) refused (processes and threads "
                       "of the sandbox count). End the processes you no longer need and start fewer at once.")
        return out

    def cause(self) -> str | None:
        """The limit the kernel enforced in this process's life, if one was (the memory limit first)."""
        c = self.group.counters() if self.group is not None else {}
        if c.get("oom_kill"):
            return f"memory limit {self.memory_mib} MiB reached"
        if c.get("pids_max"):
            return f"process limit {self.pids} reached"
        return None

    def stop(self) -> None:
        """Remove the group (blocking)."""
        if self.group is not None:
            self.group.remove()


def _user_processes() -> int:
    uid = os.geteuid()
    n = 0
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                n += os.stat(f"/proc/{d}").st_uid == uid
            except OSError:
                pass
    return n


# -- the disk watcher ---------------------------------------------------------------------------------------
@dataclass
class Usage:
    bytes: int
    entries: int
    complete: bool
    """False: the walk gave up (the usage is at least `bytes`): counted as over the limit."""
    why: str = ""
    """Why it gave up."""


MAX_DEPTH = 512
"""The disk walk keeps a folder fd open per level: deeper than this counts as over the limit."""


def disk_usage(roots: list[Path], max_entries: int, max_depth: int = MAX_DEPTH) -> Usage:
    """Bytes allocated under `roots`: a walk from directory fds (each folder opened O_NOFOLLOW relative to its
    parent's fd: no link is followed, no path is long, a folder swapped for a link meanwhile is not entered)
    that stays on each root's file system, counts a hard-linked file once, and gives up (incomplete, saying
    why) after `max_entries` entries, below `max_depth` folders, or at a folder it cannot read."""
    total, entries, seen = 0, 0, set()
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    for root in roots:
        try:
            fd = os.open(root, flags)
        except OSError:
            continue
        st = os.fstat(fd)
        dev = st.st_dev
        total += st.st_blocks * 512
        stack: list[tuple[int, object]] = []
        try:
            stack.append((fd, os.scandir(fd)))
            while stack:
                dfd, it = stack[-1]
                e = next(it, None)
                if e is None:
                    it.close()
                    os.close(stack.pop()[0])
                    continue
                entries += 1
                if entries > max_entries:
                    return Usage(total, entries, False, f"more than {max_entries:,} files and folders")
                try:
                    s = e.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if s.st_dev != dev:
                    continue
                if s.st_nlink > 1 and not stat.S_ISDIR(s.st_mode):
                    if (s.st_dev, s.st_ino) in seen:
                        continue
                    seen.add((s.st_dev, s.st_ino))
                total += s.st_blocks * 512
                if not stat.S_ISDIR(s.st_mode):
                    continue
                if len(stack) >= max_depth:
                    return Usage(total, entries, False, f"folders nested deeper than {max_depth}")
                try:
                    cfd = os.open(e.name, flags, dir_fd=dfd)
                except (FileNotFoundError, NotADirectoryError):
                    continue  # gone, or swapped for something else meanwhile
                except OSError as exc:
                    if exc.errno == errno.ELOOP:
                        continue  # swapped for a link meanwhile: not followed
                    return Usage(total, entries, False, f"a folder the host cannot read ({exc.strerror})")
                try:
                    stack.append((cfd, os.scandir(cfd)))
                except OSError as exc:
                    os.close(cfd)
                    return Usage(total, entries, False, f"a folder the host cannot read ({exc.strerror})")
        finally:
            for dfd, it in stack:
                it.close()
                os.close(dfd)
    return Usage(total, entries, True)


ASSUMED_WRITE_BPS = 200 << 20
"""How fast a worker is assumed to fill its disk: the watcher looks again before the headroom could be gone."""
MIN_CHECK_S = 0.2
MAX_WALK_SHARE = 20
"""A worker's walk repeats no sooner than this many times its own duration (at most 5% of a core each)."""


class DiskWatch:
    """One worker's disk watcher state: when to measure next, whether it is over, what to say."""

    def __init__(self, cfg: LimitsConfig, roots: list[Path]):
        self.cfg = cfg
        self.roots = roots
        self.limit = mib(cfg.disk_mib) if cfg.disk_mib else 0
        self.next_at = 0.0
        self.over: str | None = None
        """The message while the worker is over its limit (its fs/* writes are refused), else None."""
        self.last: Usage | None = None
        self.peak = 0
        """The most it measured (bytes)."""
        self._stopped_at = 0
        """The usage when its turn was last stopped: a turn is stopped again only past it (so it can clean up)."""

    def due(self, now: float) -> bool:
        return bool(self.limit) and now >= self.next_at

    def measure(self, now: float) -> str | None:
        """Measure (blocking: run it in a thread); a message when the turn must stop, else None."""
        t0 = time.monotonic()
        u = disk_usage(self.roots, self.cfg.disk_max_entries)
        took = time.monotonic() - t0
        self.last = u
        self.peak = max(self.peak, u.bytes)
        headroom = self.limit - u.bytes
        # sooner as the headroom shrinks; never more than 1/MAX_WALK_SHARE of a core on one worker's walks
        self.next_at = now + max(MIN_CHECK_S, min(self.cfg.disk_check_s, headroom / ASSUMED_WRITE_BPS),
                                 took * MAX_WALK_SHARE)
        if u.complete and headroom > 0:
            self.over, self._stopped_at = None, 0
            return None
        used = f"{u.bytes / (1 << 20):.0f} MiB" if u.complete else f"at least {u.bytes / (1 << 20):.0f} MiB and {u.why}"
        self.over = (f"disk limit {self.cfg.disk_mib} MiB reached: your workdir and HOME use {used}. Delete what you "
                     "do not need (build outputs, caches, large files) before you write more; until then writes "
                     "through the editor are refused and a command that writes more is stopped.")
        if self._stopped_at and u.bytes <= self._stopped_at + max(1 << 20, self.limit // 100):
            return None  # stopped already for this much; let it clean up
        self._stopped_at = u.bytes
        return self.over
