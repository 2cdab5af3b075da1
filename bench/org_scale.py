"""The organization at scale (issue 30): does an organization of identical sim agents get more done as it grows?

Runs one generated task (`python -m agensh_ray.tasks generate`, docs/tasks.md) with F >= 4N features for the
largest N at 1, 8, 64, 256 and 1,024 workers (the same task and seed for every N, so that speedup S(N) = T_1 / T_N
compares like with like), each on a simulated cluster on this host packed like bench/scale.py (ceil(N / W) Ray
nodes of W agent slots, `--workers-per-actor W`: one WorkerActor and one sim agent process per node). Each N gets
its own time scale, slower than real time where this machine needs it:

    time_scale(N) = min(--max-time-scale, cores x --cpu-budget x think_s x 1.13 / (N x cpu_per_step))

that is, N workers taking a step every think_s schedule seconds (1.13 x the median: the mean of the sim's lognormal
step) must need at most --cpu-budget of the cores. cpu_per_step starts at --cpu-per-step (0.45 CPU seconds, issue
30's measure) and is then measured after every run from its sim agents' `sim stats` lines (their own CPU and their
subprocesses': git, the checks, per step; not the forge's, the board's or the hosts'), so a larger N is scaled by
what the smaller one cost (and, when that run's agents lagged, their tool calls taking r > 2 times as long as at
the tool server and at least a schedule second longer, r / 2 times that: the machine gave them less CPU than the rule assumed). It is also at most the checkpoint interval over twice a checkpoint's wall time as the
previous run measured it: a checkpoint that takes longer than its interval is skipped (recorded missed), and time
to a level is known only at checkpoints (--checkpoints per run, over its expected time). Then the figures of
analysis/efficiency.sql per run, and across runs the speedup and efficiency at 50/90/100% of the hidden tests
(agensh_ray.analysis.efficiency; the run's `clock` in summary.json says whether it was machine-bound).

`--from-runs DIR ...` skips the runs: the same figures from existing run folders (a sweep's cells, e.g.
`experiments/<name>/cells/*`).

Prints the machine facts, each run's figures, the scaling table, and as its last line one JSON object: workers,
max_workers, speedup_90 and efficiency_90 (per worker count), time_to_90_s, features_per_worker_hour,
duplicate_work_share, conflicts_per_merged_pr, idle_share, messages_per_feature (per worker count, means over
seeds), agent_vs_server_tool_latency (the tool latency ratio at the largest N), machine_bound (per run), time_scale
and cpu_per_step (per worker count, when this script ran them), the task, and the goals of issue 30 with what
was measured against them (null where unknown).

    python bench/org_scale.py                                    # 1, 8, 64, 256, 1,024 workers (hours)
    python bench/org_scale.py --workers 1,8 --think 20           # a small end-to-end check (minutes)
    python bench/org_scale.py --from-runs experiments/org/cells/*
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agensh_ray.analysis.efficiency import LEVELS, curve, level_key, print_table, run_efficiency, scaling  # noqa: E402
from bench.common import descendants, machine_facts, print_result, reap, say  # noqa: E402

DEFAULT_WORKERS = "1,8,64,256,1024"
STEP_MEAN = math.exp(0.5**2 / 2)
"""The sim's mean step over its median (lognormal, sigma 0.5: agensh_ray/sim/README.md): 1.13."""
SIM_STATS = re.compile(r"sim stats: pid (\d+) steps (\d+) cpu_self ([\d.]+) cpu_children ([\d.]+) cpu_start ([\d.]+)")
PER_N = ("features_per_worker_hour", "time_to_90_s", "duplicate_work_share", "conflicts_per_merged_pr", "idle_share",
         "messages_per_feature")
GOALS = {
    "efficiency_90 >= 0.7 up to 64 workers": None,
    "efficiency_90 >= 0.5 at 256 workers": None,
    "time to 90% falling from 256 to 1024 workers": None,
    "duplicate_work_share < 0.10": None,
    "conflicts_per_merged_pr < 1.5": None,
    "idle_share < 0.2": None,
    "agent_vs_server_tool_latency <= 2": None,
}


def worker_list(text: str) -> list[int]:
    try:
        ns = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"--workers takes worker counts separated by commas (1,8,64), not {text!r}")
    if not ns or ns[0] < 1 or ns[-1] > 1024:
        raise argparse.ArgumentTypeError(f"worker counts are 1 to 1,024: got {text!r}")
    return ns


def cpu_per_step(run_dir: Path) -> float | None:
    """CPU seconds per sim step in a finished run: from each sim agent process's last `sim stats` line in the run's
    logs (cumulative: its own CPU after its imports, and its finished subprocesses'), summed over processes; None
    when no line was written."""
    last: dict[str, tuple[int, float]] = {}
    for path in (run_dir / "logs").rglob("*.stderr") if (run_dir / "logs").is_dir() else ():
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        for pid, steps, own, kids, start in SIM_STATS.findall(text):
            last[pid] = (int(steps), float(own) + float(kids) - float(start))
    steps = sum(s for s, _ in last.values())
    return sum(c for _, c in last.values()) / steps if steps else None


def checkpoint_wall_s(run_dir: Path) -> float | None:
    """Median wall seconds a checkpoint of a finished run took, from main's taking (scores.schedule_s) to its score
    being recorded; None when no checkpoint says."""
    from agensh_ray.analysis.views import connect

    con = connect(run_dir)
    try:
        v = con.execute("SELECT median(sched_s(ts) - schedule_s) / (SELECT time_scale FROM run_info) FROM scores "
                        "WHERE schedule_s IS NOT NULL").fetchone()[0]
    finally:
        con.close()
    return None if v is None or v <= 0 else float(v)


def choose_time_scale(n: int, think_s: float, cpu_step: float, cores: int, budget: float, most: float,
                      score_every_s: float | None = None, ckpt_wall_s: float | None = None) -> float:
    """The module docstring's rule, and at most score_every_s / (2 x ckpt_wall_s) (a checkpoint must take at most
    half of its interval in wall time, or periodic checkpoints are missed and time to a level is not measured),
    rounded to 3 significant digits."""
    fit = cores * budget * think_s * STEP_MEAN / (n * cpu_step)
    scale = min(most, fit)
    if score_every_s and ckpt_wall_s:
        scale = min(scale, score_every_s / (2 * ckpt_wall_s))
    return float(f"{scale:.3g}")


def schedule_estimate(task, n: int, think_s: float, lines_per_step: int = 10) -> float:
    """Schedule seconds the sim needs for every feature with n workers, if nothing got in the way: each feature's
    steps (a claim, ceil(size / lines_per_step) writes, a check, a merge, a gather) at the mean step, spread over
    min(n, F / L) workers, and at least the critical path's."""
    feats = {f.name: f for f in task.features()}
    steps = {name: 4 + math.ceil((f.size or lines_per_step) / lines_per_step) for name, f in feats.items()}
    path: dict[str, tuple[int, int]] = {}  # feature -> (features, steps) on the longest chain ending with it

    def chain(name: str) -> tuple[int, int]:
        if name not in path:
            before = [chain(d) for d in feats[name].deps if d in feats]
            depth, cost = max(before, default=(0, 0))
            path[name] = (depth + 1, cost + steps[name])
        return path[name]

    longest = max((chain(name) for name in feats), default=(1, 0))
    total = sum(steps.values()) * think_s * STEP_MEAN
    return max(total / max(1.0, min(n, len(feats) / longest[0])), longest[1] * think_s * STEP_MEAN)


def run_one(args, task_dir: Path, n: int, scale: float, score_every_s: float, minutes: float) -> Path:
    """One run of n workers on a simulated cluster of ceil(n / W) nodes (bench/scale.py's packing)."""
    import ray
    from ray.cluster_utils import Cluster

    from agensh_ray.config import RunConfig, SandboxConfig, SimConfig
    from agensh_ray.driver import Run
    from agensh_ray.task import Task

    per = min(args.workers_per_actor, n)
    nodes = -(-n // per)
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 2, "resources": {"agent_slot": per}, "include_dashboard": False,
        "_system_config": {"prestart_worker_first_driver": False, "enable_worker_prestart": False}})
    for _ in range(nodes - 1):
        cluster.add_node(num_cpus=2, resources={"agent_slot": per}, include_log_monitor=False)
    cluster.wait_for_nodes()
    cfg = RunConfig(
        workers=n, workers_per_actor=per, address=cluster.address, ship_code=False, task=str(task_dir),
        minutes=minutes, time_scale=scale, seed=args.seed, launch_interval_s=args.launch_interval,
        launch_fast_interval_s=args.launch_interval, run_dir=args.run_dir,
        run_id=f"org-w{n:04d}-s{args.seed}-{int(time.time())}", stop_when_done=True, score_every_s=score_every_s,
        sim=SimConfig(think_s=args.think), sandbox=SandboxConfig(enabled=not args.no_sandbox))
    buf = io.StringIO()

    class Tee(io.TextIOBase):
        def write(self, s):
            if args.verbose:
                sys.stdout.write(s)
                sys.stdout.flush()
            return buf.write(s)

    ours = []
    try:
        summary = Run(cfg, Task.load(str(task_dir)), out=Tee()).execute()
    finally:
        ours = descendants([os.getpid()])
        ray.shutdown()
        cluster.shutdown()
        reap(ours)
    tail = [line for line in buf.getvalue().splitlines() if line.strip()][-12:]
    print("\n".join("    " + line for line in tail), flush=True)
    return Path(summary["run_dir"])


def sweep(args, t0: float) -> tuple[list[Path], dict, dict, dict]:
    """Generate the task (or reuse it), then run every worker count; returns the run folders, the time scale and
    measured CPU per step per worker count, and the task's facts."""
    from agensh_ray.agent import sandbox
    from agensh_ray.task import Task
    from agensh_ray.task.generate import Params, generate

    if not args.no_sandbox and sandbox.unavailable():
        sys.exit(f"bench/org_scale.py: cannot sandbox the workers here: {sandbox.unavailable()} (or pass --no-sandbox)")
    features = args.features or max(args.min_features, 4 * max(args.workers))
    if features < 4 * max(args.workers):
        print(f"note: F = {features} < 4 x {max(args.workers)} workers: issue 30 asks F >= 4N", flush=True)
    task_dir = args.tasks_dir / f"genkit-f{features}-L{args.depth}-s{args.seed}"
    if not (task_dir / "task.yaml").is_file():
        say(t0, f"generating the task: F={features}, depth {args.depth}, seed {args.seed} -> {task_dir}")
        generate(Params(features=features, seed=args.seed, depth=args.depth), task_dir)
    task = Task.load(str(task_dir))
    facts = {"task": task_dir.name, "features": features, "depth": args.depth, "seed": args.seed,
             "think_s": args.think}
    cores = os.cpu_count() or 1
    step_cpu, ckpt = args.cpu_per_step, None
    runs, scales, cpu = [], {}, {}
    serial = schedule_estimate(task, 1, args.think)
    for n in args.workers:
        est = schedule_estimate(task, n, args.think)
        # a deadline no organization should need: 3x the serial estimate (a loaded machine made a 1-worker run need
        # 1.5x; runs end once done)
        minutes = args.minutes or max(60.0, math.ceil(3 * serial / 60))
        score_every = max(60.0, round(est / args.checkpoints))
        scale = args.time_scale or choose_time_scale(n, args.think, step_cpu, cores, args.cpu_budget,
                                                    args.max_time_scale, score_every, ckpt)
        say(t0, f"{n} workers: time scale {scale:g} (cpu/step {step_cpu:.3f} s, a checkpoint "
                f"{'unmeasured' if ckpt is None else f'{ckpt:.0f} wall s'}), up to {minutes:g} schedule min "
                f"(~{est / 60:.0f} expected), a checkpoint every {score_every:g} schedule s")
        d = run_one(args, task_dir, n, scale, score_every, minutes)
        runs.append(d)
        scales[n] = scale
        measured = cpu_per_step(d)
        cpu[n] = None if measured is None else round(measured, 3)
        if measured:
            step_cpu = measured
        e = run_efficiency(d)
        lag = e.get("tool_latency_ratio")
        late_s = ((e["agent_tool_median_ms"] - e["server_tool_median_ms"]) / 1000 * scale
                  if lag is not None else 0.0)
        # the agents lagged (agensh_ray/lag.py's rule: more than twice the server's time, and at least a schedule
        # second late per call): the machine gave them less CPU than the rule assumed
        if lag is not None and lag > 2 and late_s >= 1:
            step_cpu *= lag / 2
            say(t0, f"{n} workers: tool calls took {lag:.1f}x as long at the agent as at the server: the next time "
                    f"scale assumes {step_cpu:.3f} CPU s per step")
        ckpt = checkpoint_wall_s(d) or ckpt
        say(t0, f"{n} workers done: {d} (cpu per step measured: {'unknown' if measured is None else f'{measured:.3f} s'})")
    return runs, scales, cpu, facts


def by_n(rows: list[dict], key: str) -> dict[str, float | None]:
    """key averaged over the runs of each worker count (over tasks and seeds), as JSON-able {"N": value}."""
    out: dict[int, list] = {}
    for r in rows:
        out.setdefault(r["workers"], []).append(r.get(key))
    return {str(n): (sum(v) / len(v) if (v := [x for x in vs if x is not None]) else None)
            for n, vs in sorted(out.items())}


def goals(result: dict) -> dict:
    """Issue 30's goals against what was measured: true/false, or None when unknown."""
    eff = {int(k): v for k, v in result["efficiency_90"].items()}
    t90 = {int(k): v for k, v in result["time_to_90_s"].items()}

    def all_known(vals, ok):
        if not vals or any(v is None for v in vals):
            return None
        return all(ok(v) for v in vals)

    up_to_64 = [v for n, v in eff.items() if 1 < n <= 64]
    g = dict(GOALS)
    g["efficiency_90 >= 0.7 up to 64 workers"] = all_known(up_to_64, lambda v: v >= 0.7)
    g["efficiency_90 >= 0.5 at 256 workers"] = None if eff.get(256) is None else eff[256] >= 0.5
    g["time to 90% falling from 256 to 1024 workers"] = (None if t90.get(256) is None or t90.get(1024) is None
                                                         else t90[1024] < t90[256])
    for key, ok in (("duplicate_work_share", lambda v: v < 0.10), ("conflicts_per_merged_pr", lambda v: v < 1.5),
                    ("idle_share", lambda v: v < 0.2)):
        name = next(k for k in GOALS if k.startswith(key))
        g[name] = all_known(list(result[key].values()), ok)
    lat = result["agent_vs_server_tool_latency"]
    g["agent_vs_server_tool_latency <= 2"] = None if lat is None else lat <= 2
    return g


def figures(run_dirs: list[Path], t0: float) -> dict:
    effs = []
    for d in run_dirs:
        e = run_efficiency(d)
        effs.append(e)
        t90 = "never reached" if e["time_to_90_s"] is None else f"{e['time_to_90_s'] / 3600:.2f} schedule h"
        bound = "unknown" if e["machine_bound"] is None else "yes" if e["machine_bound"] else "no"
        say(t0, f"{e['run_id']}: {e['workers']} workers, {e['features_merged']} features merged, time to 90% {t90}; "
                f"machine-bound: {bound}")
    rows = scaling(effs)
    print("\nper run:", flush=True)
    print_table(effs, ("run_id", "task", "seed", "workers", "time_scale", *PER_N, "tool_latency_ratio", "machine_bound"))
    print("\nscaling (T_1 from the 1-worker run of the same task and seed):", flush=True)
    print_table(rows, ("task", "seed", "workers", *(f"{p}_{level_key(lv)}" for lv in LEVELS
                                                    for p in ("speedup", "efficiency"))))
    ns = sorted({e["workers"] for e in effs})
    top = [e.get("tool_latency_ratio") for e in effs if e["workers"] == ns[-1]] if ns else []
    top = [x for x in top if x is not None]
    result = {
        "workers": ns,
        "max_workers": ns[-1] if ns else None,
        "tasks": sorted({e["task"] for e in effs}),
        "speedup_90": by_n(rows, "speedup_90"),
        "efficiency_90": by_n(rows, "efficiency_90"),
        "speedup_50": by_n(rows, "speedup_50"),
        "efficiency_50": by_n(rows, "efficiency_50"),
        "speedup_100": by_n(rows, "speedup_100"),
        "efficiency_100": by_n(rows, "efficiency_100"),
        **{k: by_n(effs, k) for k in PER_N},
        "agent_vs_server_tool_latency": sum(top) / len(top) if top else None,
        "machine_bound": {e["run_id"]: e["machine_bound"] for e in effs},
        "runs": {e["run_id"]: e["run_dir"] for e in effs},
    }
    for k, v in list(result.items()):  # one curve per task: a single task's curve is the same numbers
        if k.startswith(("speedup_", "efficiency_")) and len(result["tasks"]) > 1:
            result[k + "_by_task"] = {t: {str(n): x for n, x in c.items()} for t, c in curve(rows, k).items()}
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--from-runs", nargs="+", type=Path, metavar="DIR", default=None,
                    help="compute the figures from these run folders instead of running")
    ap.add_argument("--workers", type=worker_list, default=worker_list(DEFAULT_WORKERS),
                    help=f"worker counts, comma-separated (default {DEFAULT_WORKERS})")
    ap.add_argument("--features", type=int, default=None,
                    help="F of the generated task (default max(--min-features, 4 x the largest worker count))")
    ap.add_argument("--min-features", type=int, default=32)
    ap.add_argument("--depth", type=int, default=4, help="the task's critical path L, in features (default 4)")
    ap.add_argument("--seed", type=int, default=0, help="the task's and the run's seed")
    ap.add_argument("--think", type=float, default=45.0,
                    help="the sim's median step, schedule seconds (default 45: an LLM agent's 30-60)")
    ap.add_argument("--time-scale", type=float, default=None, help="one time scale for every N (default: per N, "
                    "the rule above)")
    ap.add_argument("--max-time-scale", type=float, default=30.0, help="the fastest time scale used (default 30)")
    ap.add_argument("--cpu-budget", type=float, default=0.5, help="share of the cores the agents' steps may need "
                    "(default 0.5: the rest for git, the forge, scoring and other users of the machine)")
    ap.add_argument("--cpu-per-step", type=float, default=0.45,
                    help="CPU seconds per sim step before one is measured (default 0.45, issue 30's)")
    ap.add_argument("--checkpoints", type=int, default=8,
                    help="periodic checkpoints per run, over its expected schedule time (default 8): time to a level "
                    "is known to that resolution")
    ap.add_argument("--minutes", type=float, default=None,
                    help="schedule minutes per run (default: 3x the expected time of one worker, at least 60; runs "
                    "end once done)")
    ap.add_argument("--launch-interval", type=float, default=0.0,
                    help="schedule seconds between worker launches (default 0: all at once, as bench/scale.py)")
    ap.add_argument("--workers-per-actor", type=int, default=64, help="agent slots per simulated node (default 64)")
    ap.add_argument("--run-dir", type=Path, default=Path("/tmp/agensh-org-scale"))
    ap.add_argument("--tasks-dir", type=Path, default=Path("/tmp/agensh-org-scale/tasks"))
    ap.add_argument("--no-sandbox", action="store_true", help="run the workers without their bubblewrap sandbox")
    ap.add_argument("--verbose", action="store_true", help="print each run's progress as it goes")
    args = ap.parse_args()
    t0 = time.time()
    import ray

    print("machine:", json.dumps(machine_facts(ray=ray.__version__)), flush=True)
    scales, cpu, facts = {}, {}, {}
    if args.from_runs:
        bad = [str(d) for d in args.from_runs if not (d / "trace").is_dir()]
        if bad:
            ap.error(f"not run folders (no trace/ inside): {', '.join(bad)}")
        run_dirs = args.from_runs
    else:
        run_dirs, scales, cpu, facts = sweep(args, t0)
    result = figures(run_dirs, t0)
    result["goals"] = goals(result)
    if scales:
        result["time_scale"] = {str(n): s for n, s in scales.items()}
        result["cpu_per_step_s"] = {str(n): c for n, c in cpu.items()}
        result["task"] = facts
    result["wall_s"] = round(time.time() - t0, 1)
    missed = [k for k, v in result["goals"].items() if v is False]
    unknown = [k for k, v in result["goals"].items() if v is None]
    print(f"\ngoals missed: {', '.join(missed) or 'none'}; unknown: {', '.join(unknown) or 'none'}", flush=True)
    print_result(result)


if __name__ == "__main__":
    main()
