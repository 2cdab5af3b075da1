"""Benchmark: the analysis report on a synthetic trace shaped like a 6-hour, 1,024-worker run.

    python bench/analysis.py [--events 10000000] [--dir /tmp/agensh-bench-run] [--reuse] [--runs 1]

Generates a synthetic trace shaped like a 6-hour, 1,024-worker run (bench/synthetic_run.py: 1,024
workers on the default launch schedule, 16 host writers, turns, tool calls, usage, board entries with
colliding claims, DMs, ~8k PRs with reviews, conflicts and diff snapshots, scores, 2% of the mirrored
rows written twice; the rest of the event budget is deliveries); `--small` makes the same 1,024
workers over 1.5 hours in ~200k events instead (a quick look, not the goal).

Then it times `python -m agensh_ray.analysis.report RUN --out DIR` in a subprocess (every query and
every plot) and reads that process's peak RSS. Prints the machine, then as its last line one
JSON object: events, generate_s, report_s, peak_rss_mib (medians over --runs report runs), and
report_cpu_s (the report's user+system CPU time: on a shared, busy box the honest figure).
Goals on the 2-core dev box: report_s <= 30, peak_rss_mib <= 4000.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agensh_ray.trace import SCHEMAS  # noqa: E402
from bench.common import machine_facts, print_result  # noqa: E402
from bench.synthetic_run import FULL, RUN_ID, SMALL, generate  # noqa: E402


def time_report(run: Path, out: Path) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds and peak RSS (MiB) of one `python -m agensh_ray.analysis.report` process."""
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "agensh_ray.analysis.report", str(run), "--out", str(out)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - t0
    output = proc.stdout.read()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"the report failed:\n{output}")
    return elapsed, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python bench/analysis.py", description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=None, help="events in the trace (default 10,000,000; --small 200,000)")
    ap.add_argument("--small", action="store_true",
                    help="the same 1,024 workers over 1.5 hours with few PRs and long turns (for tests, not the goal)")
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "agensh-bench-run",
                    help="where the synthetic run goes (deleted first unless --reuse)")
    ap.add_argument("--reuse", action="store_true", help="reuse the trace already in --dir")
    ap.add_argument("--rows-per-file", type=int, default=20_000)
    ap.add_argument("--runs", type=int, default=1, help="report runs to time (median)")
    args = ap.parse_args(argv)
    import duckdb

    facts = machine_facts(duckdb=duckdb.__version__, pyarrow=pa.__version__)
    for k, v in facts.items():
        print(f"{k:12} {v}")
    run = args.dir / RUN_ID
    generate_s = 0.0
    if args.reuse and (run / "trace").is_dir():
        events = sum(duckdb.sql(f"SELECT count(*) FROM read_parquet('{run}/trace/{t}/*.parquet')").fetchall()[0][0]
                     for t in SCHEMAS if (run / "trace" / t).is_dir())
        print(f"reusing {events:,} events under {run}")
    else:
        shutil.rmtree(run, ignore_errors=True)
        t0 = time.perf_counter()
        events = generate(run, args.events or (200_000 if args.small else 10_000_000), args.rows_per_file,
                          shape=SMALL if args.small else FULL)
        generate_s = time.perf_counter() - t0
    times, cpus, rss = [], [], []
    for i in range(args.runs):
        s, c, m = time_report(run, args.dir / "report")
        print(f"report run {i + 1}: {s:.1f} s wall, {c:.1f} s CPU, peak RSS {m:.0f} MiB "
              f"(load average {os.getloadavg()[0]:.1f})", flush=True)
        times.append(s)
        cpus.append(c)
        rss.append(m)
    print_result({"events": events, "shape": "small" if args.small else "full", "generate_s": round(generate_s, 1), "report_s": round(statistics.median(times), 1),
                  "peak_rss_mib": round(statistics.median(rss)), "report_cpu_s": round(statistics.median(cpus), 1)})


if __name__ == "__main__":
    main()
