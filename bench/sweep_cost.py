"""What one sim run on a generated task costs this machine, and hence the time scale each point of the
org-scale sweep can run at without being machine-bound (docs/experiments.md, "The org-scale sweep").

Generates a task (`features` = 4 per worker unless given, depth 4, a registry per 4 workers: the sweep's
task), runs `python -m agensh_ray.run` on it as a subprocess, and samples the CPU of the run's whole
process tree (the driver, Ray, the services, the hosts, every sim agent and its git and check
subprocesses) every `--sample` seconds. Over the schedule (from "launching workers" to "stopping
workers" in the run's output) it reports:

- `cores_used`: CPU seconds of the tree / wall seconds;
- `cpu_per_step_s`: those CPU seconds / the sim steps taken (the sum of each agent process's last
  `sim stats:` line in logs/*agent.stderr: per worker, or per host when packed), and `agent_cpu_per_step_s`, the agents' own share
  (their CPU and their subprocesses', imports left out);
- `cpu_by_part_s`: those CPU seconds by part of the run (`part_of`: each Ray actor class, Ray's daemons, the sim
  agents with their git and checks, the driver), largest first, to show where a step's CPU goes;
- `cpu_per_worker_schedule_s`: CPU seconds per worker per schedule second, the figure that scales:
  N workers at time scale s need N * s * that many cores;
- `max_time_scale`: for N = 1, 8, 64, 256, 1,024 and a budget of `--cores` cores, the largest time
  scale at which the workers' demand fits, `cores / (N * cpu_per_worker_schedule_s)` (a linear
  extrapolation from this run's N: the services' share grows more slowly than N, the checkpoints'
  with F; measure again at the N you mean to run), and `wall_per_schedule_hour_s`, the wall seconds
  one schedule hour then takes.

The CPU is sampled (each process's own and its reaped children's times, the latest seen per process, and
its parent): a process seen alive and then reaped counts once (its reaper's reaped-children time less what
was seen of it); one that lives less than one interval counts through its reaper, or is missed if that is
not in the tree; the agents' own figures (`sim stats`) are exact.

    python bench/sweep_cost.py --workers 8 --time-scale 30
    python bench/sweep_cost.py --workers 64 --time-scale 4 --workers-per-actor 8 --cores 2
    python bench/sweep_cost.py --plan plans/org-scale-quick.yaml --exp EXP   # every cell of an experiment
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import machine_facts, print_result, process_tree, say  # noqa: E402

SWEEP = (1, 8, 64, 256, 1024)
STATS_RE = re.compile(r"sim stats: pid (\d+) steps (\d+) cpu_self ([\d.]+) cpu_children ([\d.]+) cpu_start ([\d.]+)")


def part_of(p: psutil.Process, root: int) -> str:
    """Which part of the run a process is, for the CPU breakdown: a Ray actor by its class (its process title is
    `ray::Class.method` or `ray::Class`), Ray's own daemons, a sim agent, the bubblewrap sandbox, git, the
    driver; anything else by its executable's name."""
    if p.pid == root:
        return "driver"
    try:
        argv = p.cmdline()
        name = p.name()
    except psutil.Error:
        return "gone"
    head = argv[0] if argv else name
    if name in ("raylet", "gcs_server"):  # by executable: a Ray worker's argv names the raylet too
        return "ray raylet" if name == "raylet" else "ray gcs"
    if head.startswith("ray::"):
        cls = head[5:].split(".", 1)[0].split(" ", 1)[0]
        return "ray::IDLE (a pooled worker)" if cls == "IDLE" else f"actor {cls.split(':')[-1]}"
    text = " ".join(argv)
    if "default_worker.py" in text:  # a Ray worker before its process title is set: looked at again later
        return "ray::IDLE (a pooled worker)"
    if name.startswith("git"):  # by executable before argv: a git command's arguments may say anything
        return "git"
    if name in ("bwrap", "bubblewrap"):
        return "bubblewrap"
    for needle, part in (("agensh_ray.sim", "sim agent"), ("agensh_ray.run", "driver"),
                         ("agensh_ray.experiment", "experiment runner"),
                         ("dashboard", "ray dashboard"), ("log_monitor", "ray log monitor"),
                         ("runtime_env", "ray runtime env agent"), ("monitor.py", "ray monitor")):
        if needle in text:
            return part
    if "python" in name:
        return "python (other: checks, tools)"
    return name


Key = tuple[int, float]
"""A process: (pid, create time), so a reused pid is another process."""


class CpuSampler:
    """The CPU seconds of a process tree, sampled: per process the latest own and reaped-children times, its
    parent and which part of the run it is (`part_of`).

    A process seen alive and later reaped is counted once: its reaper's reaped-children time less what was
    seen of the process itself (and of its own reaped children) while it lived. What a process used after its
    last sample is counted in its reaper's, so a process that lives less than an interval is counted through
    its reaper (if that is in the tree)."""

    def __init__(self, root: int, interval: float):
        self.root, self.interval = root, interval
        self.own: dict[Key, float] = {}  # user + system of the process itself
        self.kids: dict[Key, float] = {}  # its reaped children's, as the kernel sums them
        self.parent: dict[Key, Key] = {}
        self.parts: dict[Key, str] = {}
        self.alive: set[Key] = set()  # as of the last sample
        self._lock = threading.Lock()  # the sampling thread and the marks' thread both sample
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, daemon=True)

    def sample(self) -> dict[Key, tuple[str, float, float]]:
        """Sample the tree now; each process's part, own CPU seconds and reaped children's seconds not counted as
        processes of their own (`snapshot`)."""
        with self._lock:
            procs = process_tree([self.root])
            keys: dict[int, Key] = {}
            alive: set[Key] = set()
            for p in procs:
                try:
                    t = p.cpu_times()
                    key = (p.pid, p.create_time())
                    ppid = p.ppid()
                except psutil.Error:
                    continue
                keys[p.pid] = key
                alive.add(key)
                self.own[key] = max(self.own.get(key, 0.0), t.user + t.system)
                self.kids[key] = max(self.kids.get(key, 0.0), t.children_user + t.children_system)
                if ppid in keys:
                    self.parent[key] = keys[ppid]
                if self.parts.get(key, "ray::IDLE").startswith("ray::IDLE"):  # a pooled Ray worker may become an actor
                    self.parts[key] = part_of(p, self.root)
            self.alive = alive
            return self._snapshot()

    def _snapshot(self) -> dict[Key, tuple[str, float, float]]:
        counted: dict[Key, float] = {}  # per reaper: what its gone children were seen to use
        for key, parent in self.parent.items():
            if key not in self.alive:
                counted[parent] = counted.get(parent, 0.0) + self.own[key] + self.kids[key]
        return {key: (self.parts.get(key, "?"), own, max(0.0, self.kids[key] - counted.get(key, 0.0)))
                for key, own in self.own.items()}

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def start(self) -> CpuSampler:
        self._t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._t.join()


def cpu_between(before: dict[Key, tuple[str, float, float]],
                after: dict[Key, tuple[str, float, float]]) -> tuple[float, dict[str, float]]:
    """The CPU seconds used between two snapshots, in all and by part: each process's increase, under the part it
    had at the end (a pooled Ray worker that became an actor meanwhile counts as that actor); reaped children
    apart, as `<part> (reaped children)`."""
    parts: dict[str, float] = {}
    for key, (part, own, kids) in after.items():
        _, own0, kids0 = before.get(key, (part, 0.0, 0.0))
        parts[part] = parts.get(part, 0.0) + own - own0
        reaped = f"{part} (reaped children)"
        parts[reaped] = parts.get(reaped, 0.0) + kids - kids0
    return sum(parts.values()), parts


def agent_stats(run_dir: Path) -> dict:
    """Steps and CPU of every sim agent process: the last `sim stats:` line of each (file, pid)."""
    last: dict[tuple[str, str], tuple[int, float, float]] = {}
    for f in sorted((run_dir / "logs").glob("*agent.stderr")):
        for m in STATS_RE.finditer(f.read_text(errors="replace")):
            pid, steps, me, kids, start = m.groups()
            last[(f.name, pid)] = (int(steps), float(me) - float(start), float(kids))
    steps = sum(v[0] for v in last.values())
    return {"processes": len(last), "steps": steps, "cpu_self_s": round(sum(v[1] for v in last.values()), 2),
            "cpu_children_s": round(sum(v[2] for v in last.values()), 2)}


def figures(n: int, features: int | None, depth: int | None, registries: int | None, think: float,
            time_scale: float, per_actor: int, marks: dict, run_dir: Path, cores: float, t0: float) -> dict:
    """One run's figures from the CPU at the start and end of its schedule (`marks`) and its folder."""
    import json

    (w0, s0), (w1, s1) = marks["start"], marks["end"]
    wall = w1 - w0
    cpu, by_part = cpu_between(s0, s1)
    parts = {k: round(v, 1) for k, v in sorted(by_part.items(), key=lambda kv: -kv[1]) if v >= 0.05}
    st = agent_stats(run_dir)
    schedule = wall * time_scale
    per_worker = cpu / (n * schedule)
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        summary = {}
    result = {
        "workers": n, "features": features, "depth": depth, "registries": registries, "think_s": think,
        "time_scale": time_scale, "workers_per_actor": per_actor,
        "schedule_wall_s": round(wall, 1), "schedule_s": round(schedule), "cpu_s": round(cpu, 1),
        "cores_used": round(cpu / wall, 2), "steps": st["steps"],
        "cpu_per_step_s": round(cpu / st["steps"], 3) if st["steps"] else None,
        "agent_cpu_per_step_s": (round((st["cpu_self_s"] + st["cpu_children_s"]) / st["steps"], 3)
                                 if st["steps"] else None),
        "agent_processes": st["processes"],
        "cpu_by_part_s": parts,
        "cpu_per_worker_schedule_s": round(per_worker, 6),
        "cores_budget": cores,
        "max_time_scale": {str(k): round(cores / (k * per_worker), 2) for k in SWEEP},
        "wall_per_schedule_hour_s": {str(k): round(3600 * k * per_worker / cores) for k in SWEEP},
        "score": summary.get("score"), "prs_merged": summary.get("prs_merged"), "ended": summary.get("ended"),
    }
    say(t0, f"{run_dir.name}: schedule {wall:.0f} s wall ({schedule:.0f} schedule s), {cpu:.0f} CPU s = "
            f"{cpu / wall:.2f} cores; {st['steps']} steps, {result['cpu_per_step_s']} CPU s a step (the agents' own "
            f"{result['agent_cpu_per_step_s']}); {per_worker * 1000:.2f} CPU ms per worker per schedule second")
    for part, sec in parts.items():
        say(t0, f"  {part:<32} {sec:8.1f} CPU s  {100 * sec / cpu if cpu else 0:5.1f}%  "
                f"{1000 * sec / st['steps'] if st['steps'] else 0:7.1f} ms a step")
    for k in SWEEP:
        say(t0, f"  N={k:>5}: on {cores:g} cores, not machine-bound up to time scale "
                f"{result['max_time_scale'][str(k)]:g} (a schedule hour = {result['wall_per_schedule_hour_s'][str(k)]} s wall)")
    return result


def watch_experiment(a: argparse.Namespace, facts: dict, t0: float) -> int:
    """`--plan`: run the experiment under the sampler; each cell's schedule window from its log (cells run one
    after another, so the tree's CPU in a window is that cell's)."""
    from agensh_ray.experiment.plan import load_plan

    plan = load_plan(a.plan)
    exp = a.exp.absolute()
    cells = {c.id: c for c in plan.cells(exp)}
    argv = [sys.executable, "-m", "agensh_ray.experiment", str(a.plan), "--out", str(exp)]
    if a.max_cells is not None:
        argv += ["--max-cells", str(a.max_cells)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                            start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    sampler = CpuSampler(proc.pid, a.sample).start()
    marks: dict[str, dict[str, tuple[float, dict]]] = {}
    done = threading.Event()

    def tail() -> None:
        while not done.wait(0.5):
            for log in (exp / "logs").glob("*.log"):
                cid = log.name[:-4]
                m = marks.setdefault(cid, {})
                if "end" in m:
                    continue
                try:
                    text = log.read_text(errors="replace")
                except OSError:
                    continue
                for key, needle in (("start", "launching workers"), ("end", "stopping workers")):
                    if needle in text and key not in m:
                        m[key] = (time.time(), sampler.sample())

    watcher = threading.Thread(target=tail, daemon=True)
    watcher.start()
    try:
        for line in proc.stdout:
            print(f"  | {line}", end="", flush=True)
        proc.wait()
    except KeyboardInterrupt:
        os.killpg(proc.pid, 2)
        proc.wait()
        raise
    finally:
        done.set()
        watcher.join()
        sampler.stop()
    results = []
    for cid, m in marks.items():
        if "start" in m and "end" in m and cid in cells:
            c = cells[cid]
            g = c.generate or {}
            results.append(figures(c.workers, g.get("features"), g.get("depth"), g.get("registries"),
                                   c.config.sim.think_s, c.config.time_scale, c.config.workers_per_actor, m,
                                   exp / "cells" / cid, a.cores, t0) | {"cell": cid})
    print_result({"experiment": str(exp), "exit_code": proc.returncode, "cells": results, "machine": facts,
                  "load_avg_end": os.getloadavg(), "total_wall_s": round(time.time() - t0, 1)})
    return proc.returncode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--features", type=int, default=None, help="F (default 4 per worker)")
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--registries", type=int, default=None, help="default: one per 4 workers (at least 1)")
    ap.add_argument("--task-seed", type=int, default=0)
    ap.add_argument("--time-scale", type=float, default=30.0)
    ap.add_argument("--think", type=float, default=30.0, help="sim: median schedule seconds of a step")
    ap.add_argument("--workers-per-actor", type=int, default=1)
    ap.add_argument("--minutes", type=float, default=240.0)
    ap.add_argument("--checkpoint-every", type=float, default=10.0, help="schedule minutes")
    ap.add_argument("--cores", type=float, default=float(os.cpu_count() or 1),
                    help="the cores a sweep point may use (default: this machine's)")
    ap.add_argument("--sample", type=float, default=1.0, help="seconds between CPU samples")
    ap.add_argument("--out", type=Path, default=None, help="keep the task and run folder here (default: a temp folder)")
    ap.add_argument("--plan", type=Path, default=None,
                    help="instead of one run: run this experiment plan (python -m agensh_ray.experiment PLAN --out "
                         "EXP) under the sampler and give each cell's figures")
    ap.add_argument("--exp", type=Path, default=None, help="with --plan: the experiment folder")
    ap.add_argument("--max-cells", type=int, default=None, help="with --plan: start at most this many cells")
    a = ap.parse_args()
    if a.plan is not None and a.exp is None:
        ap.error("--plan needs --exp (the experiment folder)")
    n = a.workers
    features = a.features or 4 * n
    registries = a.registries or max(1, -(-n // 4))
    t0 = time.time()
    facts = machine_facts(nice=str(os.nice(0)))
    print(f"machine: {facts}", flush=True)
    if a.plan is not None:
        return watch_experiment(a, facts, t0)
    tmp = None
    if a.out is None:
        tmp = tempfile.TemporaryDirectory(prefix="sweep-cost-")
        out = Path(tmp.name)
    else:
        out = a.out.absolute()
        out.mkdir(parents=True, exist_ok=True)
    try:
        from agensh_ray.task.generate import Params, generate

        task = out / f"genkit-F{features}-s{a.task_seed}"
        generate(Params(features=features, seed=a.task_seed, depth=a.depth, registries=registries), task)
        say(t0, f"generated {task.name}: F={features} L={a.depth} R={registries}")
        run_id = f"w{n:04d}-ts{a.time_scale:g}"
        argv = [sys.executable, "-m", "agensh_ray.run", "--workers", str(n), "--task", str(task),
                "--time-scale", str(a.time_scale), "--think", str(a.think), "--minutes", str(a.minutes),
                "--checkpoint-every", str(a.checkpoint_every), "--workers-per-actor", str(a.workers_per_actor),
                "--run-dir", str(out), "--run-id", run_id, "--overwrite"]
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                                start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        sampler = CpuSampler(proc.pid, a.sample).start()
        marks: dict[str, tuple[float, dict]] = {}
        try:
            for line in proc.stdout:
                print(f"  | {line}", end="", flush=True)
                for key, text in (("start", "launching workers"), ("end", "stopping workers")):
                    if text in line and key not in marks:
                        marks[key] = (time.time(), sampler.sample())
            proc.wait()
        except KeyboardInterrupt:
            os.killpg(proc.pid, 2)
            proc.wait()
            raise
        finally:
            sampler.stop()
        run_dir = out / run_id
        if "start" not in marks or "end" not in marks or proc.returncode not in (0,):
            print(f"the run did not go through its schedule (exit code {proc.returncode})", file=sys.stderr)
            return 1
        result = figures(n, features, a.depth, registries, a.think, a.time_scale, a.workers_per_actor, marks,
                         run_dir, a.cores, t0)
        result.update(total_wall_s=round(time.time() - t0, 1), load_avg_end=os.getloadavg(), machine=facts,
                      run_dir=str(run_dir) if tmp is None else None)
        print_result(result)
        return 0
    finally:
        if tmp is not None:
            tmp.cleanup()


if __name__ == "__main__":
    sys.exit(main())
