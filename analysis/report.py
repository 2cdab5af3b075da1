"""A report on one or more runs: every question file (analysis/*.sql) run over each
run's trace, as a self-contained HTML page (plots embedded) and a Markdown file
(plots as PNG files beside it), plus each answer as CSV. Given several runs, it
also puts them side by side: final score and time to 30%/50% against worker
count (the paper's figures 5 and 6).

    python -m agensh_ray.analysis.report runs/A runs/B --out report/
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from agensh_ray.analysis.answers import Answer, RunAnswers, analyse
from agensh_ray.analysis.doc import Doc, fmt, hours, money, pct
from agensh_ray.analysis.plots import (
    plot_cost,
    plot_dm_graph,
    plot_funnel,
    plot_roles,
    plot_scores,
    plot_side_by_side,
)
from agensh_ray.analysis.time_to_score import plot_time_to_score

__all__ = ["analyse", "build", "main", "write_report"]


def summary_row(r: RunAnswers) -> list[str]:
    run, ms, m = r.run, r.answers["score_milestones"].one(), r.answers["merges"].one()
    total = next((c for c in r.answers["cost"].dicts() if c["level"] == "run"), {})
    return [r.label, fmt(run["harness"]), fmt(run["workers"]), hours(run["duration_s"]), pct(ms["final_pass_rate"]),
            hours(ms["time_to_30_s"]), hours(ms["time_to_50_s"]), fmt(m["opened"]), fmt(m["merged"]),
            fmt(m["merge_conflicts"]), money(total.get("cost_usd"))]


SUMMARY_COLS = ["run", "harness", "workers", "duration", "final score", "time to 30%", "time to 50%",
                "PRs opened", "PRs merged", "merge conflicts", "cost"]


def build(runs: list[RunAnswers], data_dirs: dict[str, str]) -> Doc:
    doc = Doc()
    doc.h(1, "Run report" if len(runs) == 1 else f"Report on {len(runs)} runs")
    doc.p("Times are schedule time (wall time x the run's time_scale). Every table is one question file of "
          "`analysis/` run over the run's trace; the full answers are CSV files under `data/`.")
    doc.table(SUMMARY_COLS, [summary_row(r) for r in runs])
    doc.img("scores.png", plot_scores(runs), "score over time")
    doc.img("time_to_score.png", plot_time_to_score(runs), "time to reach each tenth of the hidden tests")
    if len(runs) > 1:
        doc.h(2, "Side by side")
        doc.p("Final score and time to reach 30% and 50% of the hidden tests, against worker count.")
        doc.img("side_by_side.png", plot_side_by_side(runs), "final score and time to score against workers")
    for i, r in enumerate(runs):
        d = data_dirs[r.label]
        a = r.answers
        tag = f"{i + 1}-" if len(runs) > 1 else ""
        doc.h(2, f"Run {r.label}")
        doc.p(f"`{r.run_dir}` — {fmt(r.run['workers'])} workers, harness {fmt(r.run['harness'])}, "
              f"time scale {fmt(r.run['time_scale'])}, {hours(r.run['duration_s'])} of schedule "
              f"({fmt(r.run['wall_s'])} s wall).")
        doc.h(3, "Score")
        doc.answer(a["score_milestones"], f"{d}/score_milestones.csv")
        doc.h(3, "Pull requests")
        doc.img(f"{tag}funnel.png", plot_funnel(r), "PR funnel")
        doc.answer(a["merges"], f"{d}/merges.csv")
        doc.h(3, "Roles")
        doc.p("Role thresholds: see `analysis/roles.sql` (integrator: merged >= 2 peers' PRs; reviewer: >= 2 reviews; "
              "builder: opened a PR; scout: only board/messages; idle: nothing).")
        doc.img(f"{tag}roles.png", plot_roles(r), "roles")
        ranked = sorted(a["roles"].rows, key=lambda w: (-(w[3] + w[6] + w[7]), w[0]))
        doc.answer(Answer(a["roles"].cols, ranked), f"{d}/roles.csv")
        doc.h(3, "Claims and duplicated work")
        doc.p(f"{len(a['claims'].rows):,} colliding claims, "
              f"{sum(1 for c in a['claims'].dicts() if c['settled_by_dm']):,} of them followed by a DM between the two; "
              f"{len(a['duplicated_work'].rows):,} PR pairs duplicating work.")
        doc.answer(a["claims"], f"{d}/claims.csv",
                   cols=["seq", "worker_id", "earlier_seq", "earlier_worker", "gap_s", "shared", "settled_by_dm"],
                   empty="no colliding claims")
        doc.answer(a["duplicated_work"], f"{d}/duplicated_work.csv", empty="no duplicated work")
        doc.h(3, "Hotspots")
        doc.answer(a["hotspots"], f"{d}/hotspots.csv", top=15, empty="no PR diffs or conflicts recorded")
        doc.h(3, "Messages")
        doc.answer(a["messages"], f"{d}/messages.csv")
        doc.img(f"{tag}dm_graph.png", plot_dm_graph(r), "DM graph")
        doc.h(3, "Cost")
        doc.img(f"{tag}cost.png", plot_cost(r), "cost per worker")
        doc.answer(Answer(a["cost"].cols, [c for c in a["cost"].rows if c[0] != "worker"]), f"{d}/cost.csv")
        doc.h(3, "Idle time")
        idle = a["idle"].dicts()
        if idle:
            up = sum(w["up_s"] for w in idle)
            doc.p(f"Workers were idle {pct(sum(w['idle_s'] for w in idle) / up if up else None)} of their up time; "
                  f"{sum(w['nudges'] for w in idle):,} nudges, "
                  f"{sum(w['share_findings_prompts'] for w in idle):,} share-findings prompts. Most idle first:")
        ranked = sorted(a["idle"].rows, key=lambda w: (-(w[5] or 0), w[0]))
        doc.answer(Answer(a["idle"].cols, ranked), f"{d}/idle.csv")
    return doc


def write_report(run_dirs: list[Path], out: Path, prices: Path | None = None, memory_limit: str | None = "2GB") -> dict:
    out.mkdir(parents=True, exist_ok=True)
    runs = [analyse(Path(d), prices, memory_limit) for d in run_dirs]
    seen: dict[str, int] = {}
    for r in runs:  # unique labels
        n = seen.get(r.label, 0)
        seen[r.label] = n + 1
        if n:
            r.label = f"{r.label}-{n + 1}"
    data_dirs = {}
    for r in runs:
        d = out / "data" / r.label
        d.mkdir(parents=True, exist_ok=True)
        for name, a in r.answers.items():
            with open(d / f"{name}.csv", "w", newline="") as f:
                w = csv.writer(f)
                w.writerow(a.cols)
                w.writerows([["" if v is None else v for v in row] for row in a.rows])
        data_dirs[r.label] = f"data/{r.label}"
    doc = build(runs, data_dirs)
    (out / "img").mkdir(exist_ok=True)
    for name, png in doc.images.items():
        (out / "img" / name).write_bytes(png)
    title = "agensh-ray report: " + ", ".join(r.label for r in runs)
    (out / "report.md").write_text(doc.markdown())
    (out / "report.html").write_text(doc.html(title))
    return {"html": out / "report.html", "markdown": out / "report.md", "runs": [r.label for r in runs],
            "query_s": {r.label: round(r.seconds, 3) for r in runs}}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m agensh_ray.analysis.report",
        description="Write an HTML page (self-contained) and a Markdown file with tables and plots about one or "
        "more runs: score over time, the PR funnel, roles, the DM graph, cost per worker, claims, hotspots, idle "
        "time; with several runs, final score and time to 30%/50% against worker count. Also writes every "
        "question's full answer as CSV under OUT/data/.",
    )
    ap.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR",
                    help="a run folder (runs/<run_id>, with trace/ inside); finished or still running")
    ap.add_argument("--out", type=Path, required=True, metavar="DIR",
                    help="where to write report.html, report.md, img/ and data/")
    ap.add_argument("--prices", type=Path, default=None, metavar="CSV",
                    help="price table: model,input_usd_per_mtok,output_usd_per_mtok (default analysis/prices.csv); "
                    "a run's tokens are priced by the row named like its harness")
    ap.add_argument("--memory-limit", default="2GB", help="DuckDB memory limit per run (default 2GB)")
    args = ap.parse_args(argv)
    for d in args.run_dirs:
        if not (d / "trace").is_dir():
            ap.error(f"{d} has no trace/ folder: pass a run folder (runs/<run_id>)")
    res = write_report(args.run_dirs, args.out, args.prices, args.memory_limit)
    print(f"wrote {res['html']}")
    print(f"wrote {res['markdown']} (plots in {args.out / 'img'}, answers as CSV in {args.out / 'data'})")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
