"""What the benchmarks share, written once: percentiles, machine facts, memory and CPU accounting
over a process tree, reaping the processes a Ray instance leaves behind, the progress line and the
final JSON line.

The benchmarks are scripts (`python bench/X.py`); each puts the project root on sys.path and
imports this as `bench.common`. Nothing here starts Ray; `ray` is imported only by the function
that asks a running instance for its processes.
"""

from __future__ import annotations

import json
import os
import platform
import threading
import time
from pathlib import Path

import psutil

# -- percentiles -----------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float | None:
    """The q-quantile (0..1) of `values` by nearest rank (the value at index int(q * n) of the
    sorted values, the last for q = 1); None if there are none."""
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def pct(values: list[float], q: float) -> float:
    """`percentile`, NaN if there are no values (so it can be rounded and formatted as is)."""
    v = percentile(values, q)
    return float("nan") if v is None else v


# -- machine facts ---------------------------------------------------------------------------


def machine_facts(**versions: str) -> dict:
    """The machine a figure was measured on: cores, CPU model, RAM, Python, the given library
    versions (e.g. ray=ray.__version__), the platform and the load average at the start (the box is
    shared: a figure taken under load says so)."""
    mem = psutil.virtual_memory()
    try:
        with open("/proc/cpuinfo") as f:
            model = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        model = platform.processor()
    return {
        "cpus": os.cpu_count(),
        "cpu": model,
        "ram_gib": round(mem.total / 2**30, 1),
        "python": platform.python_version(),
        **versions,
        "platform": platform.platform(),
        "load_avg": os.getloadavg(),
    }


def fsync_ms(folder: Path, n: int = 100) -> dict:
    """The disk's own floor: latency of appending 10 KB and fsyncing, n times, in `folder`."""
    path = folder / "fsync-probe.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    lat = []
    try:
        for _ in range(n):
            os.write(fd, b"x" * 10_000)
            t = time.perf_counter()
            os.fsync(fd)
            lat.append((time.perf_counter() - t) * 1000)
            time.sleep(0.005)
    finally:
        os.close(fd)
        path.unlink()
    return {"fsync_p50_ms": round(pct(lat, 0.5), 2), "fsync_p99_ms": round(pct(lat, 0.99), 2)}


# -- process trees: memory, CPU, reaping -----------------------------------------------------


def process_tree(roots: list[int]) -> list[psutil.Process]:
    """The processes `roots` and all their descendants, each once (processes that end meanwhile are
    skipped)."""
    seen: set[int] = set()
    out = []
    for pid in roots:
        try:
            root = psutil.Process(pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            continue
        for p in procs:
            if p.pid not in seen:
                seen.add(p.pid)
                out.append(p)
    return out


def descendants(roots: list[int]) -> list[psutil.Process]:
    """The descendants of `roots` (not the roots themselves): what `reap` is given."""
    out = []
    for pid in roots:
        try:
            out += psutil.Process(pid).children(recursive=True)
        except psutil.Error:
            pass
    return out


class MemorySampler:
    """Peak memory of a process tree (`roots` and their descendants; default: this process),
    sampled every `interval` seconds on a thread, three ways:

    - rss_sum: the sum of each process's RSS, which counts every shared page (Python, Ray's
      libraries, forked workers' copy-on-write pages) once per process that maps it. It overstates
      memory by the sharing. Cheap (one read of /proc/<pid>/statm per process).
    - pss: the sum of each process's proportional set size (a page shared by n processes counts 1/n
      in each), i.e. what the process tree really occupies. Reading it walks each process's page
      tables (/proc/<pid>/smaps_rollup): tens of ms per sweep over a few GiB, so a bench that measures
      latencies on a small box can leave it off (`pss=False`; peak_pss stays None).
    - used: the machine's used memory (total - available) above what it was at the start, a
      cross-check that includes the kernel's own costs (page tables, socket buffers).

    Use as a context manager, or start() and stop().
    """

    def __init__(self, roots: list[int] | None = None, interval: float = 2.0, pss: bool = True):
        self.roots = roots if roots is not None else [os.getpid()]
        self.pss = pss
        self.peak_rss_sum = self.peak_used = 0
        self.peak_pss: int | None = 0 if pss else None
        self.used0 = self._used()
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, args=(interval,), daemon=True)

    @staticmethod
    def _used() -> int:
        vm = psutil.virtual_memory()
        return vm.total - vm.available

    def sample(self) -> None:
        pss = rss = 0
        for p in process_tree(self.roots):
            try:
                m = p.memory_full_info() if self.pss else p.memory_info()
            except psutil.Error:
                continue
            rss += m.rss
            if self.pss:
                pss += m.pss
        self.peak_rss_sum = max(self.peak_rss_sum, rss)
        if self.pss:
            self.peak_pss = max(self.peak_pss, pss)
        self.peak_used = max(self.peak_used, self._used() - self.used0)

    def _run(self, interval: float) -> None:
        while not self._stop.wait(interval):
            self.sample()

    def start(self) -> MemorySampler:
        self._t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._t.is_alive():
            self._t.join()

    def __enter__(self) -> MemorySampler:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def cpu_by_process(roots: list[int]) -> dict[int, tuple[str, float]]:
    """CPU seconds used so far per process of the tree, with a role name from its title (a Ray
    worker's `ray::RouterActor.method` gives RouterActor; other processes their program's name)."""
    out: dict[int, tuple[str, float]] = {}
    for p in process_tree(roots):
        try:
            t = p.cpu_times()
            title = (p.cmdline() or [p.name()])[0]
        except psutil.Error:
            continue
        role = title.split(":")[-1].split(".")[0] if title.startswith("ray::") else Path(title).name
        out[p.pid] = (role, t.user + t.system)
    return out


def cpu_by_role(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]], seconds: float) -> dict:
    """Cores used per role between two `cpu_by_process` snapshots."""
    roles: dict[str, float] = {}
    for pid, (role, t) in after.items():
        roles[role] = roles.get(role, 0.0) + (t - before.get(pid, (role, 0.0))[1]) / seconds
    return {k: round(v, 2) for k, v in sorted(roles.items(), key=lambda kv: -kv[1]) if v >= 0.01}


def ray_system_pids() -> list[int]:
    """The processes of the Ray instance this driver started (gcs_server, raylet, ...; the actors'
    processes are the raylet's children)."""
    import ray

    node = ray._private.worker._global_node
    return [p.process.pid for info in node.all_processes.values() for p in info if p.process is not None]


def reap(procs: list[psutil.Process], grace_s: float = 5.0) -> None:
    """Kill what is left of a Ray instance's processes (`descendants` taken before shutdown) once it
    is shut down: an async actor busy at shutdown can hang in its exit path (seen in
    bench/board_router.py: a few hosts per run, each holding ~150 MiB and some CPU), and must not
    tax the next run on a shared machine."""
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    if alive:
        print(f"killed {len(alive)} actor processes left behind by ray.shutdown()", flush=True)


# -- output ----------------------------------------------------------------------------------


def say(t0: float, text: str) -> None:
    """A progress line, stamped with the seconds since `t0`."""
    print(f"[{time.time() - t0:6.1f}s] {text}", flush=True)


def print_result(result: dict) -> None:
    """The bench's last line: its figures as one JSON object (what scripts comparing runs read)."""
    print(json.dumps(result), flush=True)
