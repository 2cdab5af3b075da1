"""`python -m agensh_ray.experiment PLAN.yaml`: run an experiment's cells and print the table across them."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pydantic import ValidationError

from agensh_ray.experiment.plan import load_plan
from agensh_ray.experiment.runner import Experiment, ExperimentError
from agensh_ray.experiment.summary import summarize


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m agensh_ray.experiment",
        description=(
            "Run an experiment: every cell of the plan (tasks x ablations x worker counts x seeds; 1 worker is the "
            "single-agent baseline) as a normal run folder EXP/cells/<cell>/, then print the table across cells "
            "(mean score and spread over seeds, resolved %, time to score, merges, conflicts, DMs, claims settled, "
            "cost per point) and write it to EXP/summary.md, EXP/summary.csv and EXP/cells.csv. The plan, each "
            "cell's exact RunConfig (EXP/configs/) and the git commit (EXP/ledger.jsonl) are recorded. Run it "
            "again to resume: finished cells (a summary.json that did not end interrupted) are skipped. "
            "How to write a plan: docs/experiments.md."),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("plan", type=Path, help="the plan (YAML): name, tasks, workers, seeds, base, ablations")
    p.add_argument("--out", type=Path, default=None, help="the experiment folder (default: experiments/<plan name>)")
    p.add_argument("--parallel", type=int, default=1,
                   help="cells run at once on this machine, each with its own Ray instance (mind the cores)")
    p.add_argument("--max-cells", type=int, default=None, help="start at most this many cells, then summarize")
    p.add_argument("--summarize-only", action="store_true",
                   help="run nothing: rebuild the summary files from the cells' run folders and print the table")
    p.add_argument("--report", action="store_true",
                   help="also write the report across the finished cells (analysis.report) to EXP/report/")
    p.add_argument("--dry-run", action="store_true", help="list the cells and whether each is finished; run nothing")
    p.add_argument("--force", action="store_true", help="use an experiment folder that holds a different plan")
    a = p.parse_args(argv)
    if a.parallel < 1 or (a.max_cells is not None and a.max_cells < 0):
        p.error("--parallel must be at least 1 and --max-cells at least 0")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    try:
        text = a.plan.read_text()
        plan = load_plan(a.plan)
    except (OSError, ValueError, ValidationError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = (a.out or Path("experiments") / plan.name).absolute()
    exp = Experiment(plan, text, out)
    code = 0
    if a.dry_run:
        from agensh_ray.experiment.runner import finished

        for c in exp.cells:
            print(f"{c.id}  {'finished' if finished(out, c.id) else 'to run'}")
        return 0
    if not a.summarize_only:
        try:
            exp.prepare(force=a.force)
        except ExperimentError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        code = exp.run(parallel=a.parallel, max_cells=a.max_cells)
    table = summarize(plan, out)
    print(f"\nsummary of {out} (also in summary.md, summary.csv, cells.csv):\n\n{table}", flush=True)
    if a.report:
        from agensh_ray.analysis.report import write_report
        from agensh_ray.experiment.runner import finished

        dirs = [out / "cells" / c.id for c in exp.cells if finished(out, c.id)]
        if dirs:
            write_report(dirs, out / "report", milestones=plan.milestones)
            print(f"report: {out / 'report' / 'report.html'}")
    return code
