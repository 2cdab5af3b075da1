"""Organizational efficiency (issue 30): one run's figures as a dict, and across runs the speedup and
efficiency of more workers on the same task and seed, with the scaling curve as a plot.

    python -m agensh_ray.analysis.efficiency RUN_DIR [RUN_DIR ...] [--out DIR] [--json]

One run (`run_efficiency`): the row of analysis/efficiency.sql (features merged per worker-hour, time to 50/90/100%
of the hidden tests, duplicate-work share, conflicts per merged PR, idle share until the last merge, messages per
feature, tool latency at the agent against the server), with what config.json and summary.json say about the run:
its task and seed, and the lag of the agents behind their schedule. The lag is summary.json's `clock` when the run
recorded one (`time_scale, agent_tool_median_ms, server_tool_median_ms, tool_latency_ratio, cpu_wait_share,
machine_bound, why`); otherwise the tool latencies come from the trace (efficiency.sql), and whether the run was
machine-bound is unknown (None).

Across runs (`scaling`): runs are grouped by task and seed; in each group, T_1 is the time the 1-worker run took to
reach a level of the hidden tests (the mean when the group has several), and a run of N workers that reached it in
T_N has speedup S(N) = T_1 / T_N and efficiency S(N) / N, at 50%, 90% and 100%. Unknown (None) when either run never
reached the level, or the group has no 1-worker run. `curve` averages them over seeds per task and worker count.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path
from statistics import mean

from agensh_ray.analysis.views import connect, read_config, run_folder, run_query

LEVELS = (0.5, 0.9, 1.0)
"""The levels of the hidden tests whose time speedup is measured at (efficiency.sql's time_to_50_s, ...)."""
LAG_KEYS = ("agent_tool_median_ms", "server_tool_median_ms", "tool_latency_ratio")


def level_key(level: float) -> str:
    """0.9 -> '90' (the suffix of time_to_90_s, speedup_90, efficiency_90)."""
    return f"{round(level * 100):d}"


def read_summary(run_dir: Path) -> dict:
    """The run's summary.json ({} when it has none: a run still going, or stopped before it was summed up)."""
    path = Path(run_dir) / "summary.json"
    if not path.is_file():
        return {}
    try:
        s = json.loads(path.read_text())
    except ValueError as e:
        raise ValueError(f"{path} is not valid JSON ({e}): it should hold the run's summary") from None
    return s if isinstance(s, dict) else {}


def task_key(task) -> str:
    """The task a run worked on, as runs of the same task compare: a bundled name, or a task folder's name (the
    same generated task written to two places is one task)."""
    if not isinstance(task, str) or not task:
        return "unknown"
    return Path(task.rstrip("/")).name or task


def describe(run_dir: Path, row: dict) -> dict:
    """efficiency.sql's row for `run_dir`, with the run's task, seed and lag (module docstring)."""
    run_dir = Path(run_dir)
    cfg, summary = read_config(run_dir), read_summary(run_dir)
    clock = summary.get("clock") if isinstance(summary.get("clock"), dict) else None
    out = {
        "run_dir": str(run_dir),
        "run_id": summary.get("run_id") or cfg.get("run_id") or run_dir.name,
        "task": task_key(cfg.get("task", summary.get("task"))),
        "seed": cfg.get("seed", 0) if isinstance(cfg.get("seed", 0), int) else None,
        "baseline": bool(cfg.get("baseline", False)),
        "time_scale": cfg.get("time_scale", 1.0),
        **row,
    }
    if clock is not None:
        for k in LAG_KEYS:
            out[k] = clock.get(k)
        out["cpu_wait_share"] = clock.get("cpu_wait_share")
        out["machine_bound"] = clock.get("machine_bound")
        out["machine_bound_why"] = clock.get("why")
        out["lag_source"] = "summary.json clock"
    else:
        out["cpu_wait_share"] = None
        out["machine_bound"] = None
        known = out.get("tool_latency_ratio") is not None
        out["machine_bound_why"] = "the run recorded no clock (summary.json has no `clock`)"
        out["lag_source"] = "trace tool_calls" if known else "unknown"
    return out


def run_efficiency(run_dir: str | Path) -> dict:
    """One run's organizational efficiency as a dict (module docstring)."""
    run_dir = Path(run_dir)
    con = connect(run_dir)
    try:
        cols, rows = run_query(con, "efficiency")
    finally:
        con.close()
    return describe(run_dir, dict(zip(cols, rows[0])))


def _ratio(a, b) -> float | None:
    return a / b if a is not None and b else None


def scaling(runs: list[dict]) -> list[dict]:
    """Per run: speedup_<L> = T_1 / T_N and efficiency_<L> = speedup / N at each level L of LEVELS, T_1 from the
    1-worker runs of the same task and seed (None where unknown), sorted by task, seed, workers."""
    t1: dict[tuple, dict[str, list[float]]] = {}
    for r in runs:
        if r.get("workers") == 1:
            g = t1.setdefault((r["task"], r["seed"]), {})
            for lv in LEVELS:
                t = r.get(f"time_to_{level_key(lv)}_s")
                if t is not None:
                    g.setdefault(level_key(lv), []).append(t)
    out = []
    for r in sorted(runs, key=lambda r: (r["task"], r["seed"] if r["seed"] is not None else -1, r.get("workers") or 0,
                                         str(r.get("run_id")))):
        row = {k: r.get(k) for k in ("run_id", "task", "seed", "workers")}
        base = t1.get((r["task"], r["seed"]), {})
        for lv in LEVELS:
            k = level_key(lv)
            ref = mean(base[k]) if base.get(k) else None
            row[f"time_to_{k}_s"] = r.get(f"time_to_{k}_s")
            row[f"t1_{k}_s"] = ref
            s = _ratio(ref, r.get(f"time_to_{k}_s"))
            row[f"speedup_{k}"] = s
            row[f"efficiency_{k}"] = s / r["workers"] if s is not None and r.get("workers") else None
        out.append(row)
    return out


def curve(rows: list[dict], key: str) -> dict[str, dict[int, float | None]]:
    """`key` (e.g. speedup_90) averaged over seeds: task -> {workers: mean, None when no run of that count knows
    it}."""
    out: dict[str, dict[int, list]] = {}
    for r in rows:
        out.setdefault(r["task"], {}).setdefault(r["workers"], []).append(r.get(key))
    return {t: {n: (mean(v) if (v := [x for x in vs if x is not None]) else None) for n, vs in sorted(by_n.items())}
            for t, by_n in out.items()}


SHOWN = ("workers", "features_merged", "features_per_worker_hour", "time_to_50_s", "time_to_90_s", "time_to_100_s",
         "duplicate_work_share", "conflicts_per_merged_pr", "idle_share", "messages_per_feature", "tool_latency_ratio",
         "machine_bound")


def _cell(v) -> str:
    if v is None:
        return "unknown"
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)


def print_table(rows: list[dict], cols: tuple[str, ...] | list[str], out=None) -> None:
    out = out or sys.stdout
    widths = [max(len(c), *(len(_cell(r.get(c))) for r in rows)) if rows else len(c) for c in cols]
    print("  ".join(c.rjust(w) for c, w in zip(cols, widths)), file=out)
    for r in rows:
        print("  ".join(_cell(r.get(c)).rjust(w) for c, w in zip(cols, widths)), file=out)


def write_csv(path: Path, rows: list[dict]) -> None:
    cols = list(dict.fromkeys(k for r in rows for k in r))
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, cols)
        w.writeheader()
        w.writerows([{k: "" if r.get(k) is None else r.get(k) for k in cols} for r in rows])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m agensh_ray.analysis.efficiency",
        description="Organizational efficiency of one or more runs (analysis/efficiency.sql with the run's clock), "
        "and across runs of the same task and seed the speedup S(N) = T_1 / T_N and efficiency S(N) / N to 50/90/100% "
        "of the hidden tests; with --out, the scaling curve as a plot (scaling.png) and both tables as CSV.")
    ap.add_argument("run_dirs", nargs="+", type=run_folder, metavar="RUN_DIR", help="run folders (runs/<run_id>)")
    ap.add_argument("--out", type=Path, default=None, metavar="DIR",
                    help="write scaling.png, efficiency.csv and scaling.csv here")
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON object instead of tables")
    args = ap.parse_args(argv)
    for d in args.run_dirs:
        if not (d / "trace").is_dir():
            ap.error(f"{d} has no trace/ folder: pass a run folder (runs/<run_id>)")
    runs = [run_efficiency(d) for d in args.run_dirs]
    rows = scaling(runs)
    if args.out:
        from agensh_ray.analysis.scaling import plot_scaling

        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "scaling.png").write_bytes(plot_scaling(rows))
        write_csv(args.out / "efficiency.csv", runs)
        write_csv(args.out / "scaling.csv", rows)
    if args.json:
        print(json.dumps({"runs": runs, "scaling": rows}, default=str))
    else:
        print_table(runs, ("run_id", "task", "seed", *SHOWN))
        print()
        print_table(rows, ("task", "seed", "workers", *(f"{p}_{level_key(lv)}" for lv in LEVELS
                                                        for p in ("speedup", "efficiency"))))
        if args.out:
            print(f"\nwrote {args.out / 'scaling.png'}, {args.out / 'efficiency.csv'}, {args.out / 'scaling.csv'}")


if __name__ == "__main__":
    main()
