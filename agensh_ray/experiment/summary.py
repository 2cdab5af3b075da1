"""The table across an experiment's cells, computed from each cell's run folder with DuckDB through the trace
views and question files of `analysis/` (nothing from the runner's memory: `summarize` rebuilds it any time).

Per cell (EXP/cells.csv): final score, resolved (every hidden test passed), schedule time to each milestone,
merges, merge conflicts, DMs, colliding claims and those settled by DM, cost and cost per point (per percentage
point of score), how the run ended. Per (task, ablation, worker count) over the seeds (EXP/summary.csv and the
markdown table in EXP/summary.md): the mean and the spread (standard deviation, min-max) of the score, resolved
%, and the means of the rest; time to a milestone is the mean over the seeds that reached it ("n/m" says how
many did).
"""

from __future__ import annotations

import csv
import statistics
from pathlib import Path

from agensh_ray.analysis.columns import duration, money, pct
from agensh_ray.analysis.views import connect, run_query
from agensh_ray.experiment.plan import BASE, Plan
from agensh_ray.experiment.runner import cell_summary, finished


def cell_metrics(run_dir: Path, milestones: list[float]) -> dict:
    """One finished cell's figures, from its trace."""
    con = connect(run_dir, milestones=milestones)
    try:
        def one(name: str) -> dict:
            cols, rows = run_query(con, name)
            return dict(zip(cols, rows[0])) if rows else {}

        def rows(name: str) -> list[dict]:
            cols, rs = run_query(con, name)
            return [dict(zip(cols, r)) for r in rs]

        score = one("final_score")
        reached = {m["milestone"]: m["time_to_s"] for m in rows("score_milestones")}
        merges, conflicts = con.execute(
            "SELECT count(*) FILTER (WHERE kind = 'pr_merged'), count(*) FILTER (WHERE kind = 'merge_conflict') "
            "FROM forge").fetchone()
        dms = con.execute("SELECT count(*) FROM messages WHERE recipient IS NOT NULL").fetchone()[0]
        claims = rows("claims")
        cost = next((c for c in rows("cost") if c.get("level") == "run"), {})
        run = one("run")
    finally:
        con.close()
    final = score.get("final_pass_rate")
    # no cost recorded, or only part of it known (cost.sql: cost_usd null when any call has no price)
    usd = cost.get("cost_usd") if cost.get("cost_basis") not in (None, "none", "partial") else None
    return {
        "score": final,
        "resolved": final is not None and final >= 1.0 - 1e-9,
        **{f"t{round(100 * m)}_s": reached.get(m) for m in milestones},
        "merges": merges,
        "conflicts": conflicts,
        "dms": dms,
        "claims_colliding": len(claims),
        "claims_settled": sum(bool(c.get("settled_by_dm")) for c in claims),
        "cost_usd": usd,
        "cost_per_point": usd / (100 * final) if usd is not None and final else None,
        "schedule_s": run.get("duration_s"),
        "wall_s": run.get("wall_s"),
    }


def mean(xs: list) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.fmean(xs) if xs else None


def collect(plan: Plan, out: Path) -> tuple[list[dict], list[dict]]:
    """(one row per finished cell, one row per (task, ablation, workers) group with a finished cell)."""
    cells = []
    for c in plan.cells(out):
        if not finished(out, c.id):
            continue
        s = cell_summary(out, c.id) or {}
        cells.append({"cell": c.id, "task": c.task, "ablation": c.ablation, "workers": c.workers, "seed": c.seed,
                      "baseline": c.config.baseline, "ended": s.get("ended"),
                      **cell_metrics(out / "cells" / c.id, plan.milestones)})
    groups: dict[tuple, list[dict]] = {}
    for r in cells:
        groups.setdefault((r["task"], r["ablation"], r["workers"]), []).append(r)
    table = []
    for (task, ablation, workers), rs in groups.items():
        scores = [r["score"] or 0.0 for r in rs]
        row = {"task": task, "ablation": ablation, "workers": workers, "seeds": len(rs),
               "score_mean": statistics.fmean(scores), "score_sd": statistics.stdev(scores) if len(rs) > 1 else 0.0,
               "score_min": min(scores), "score_max": max(scores),
               "resolved_pct": 100 * sum(r["resolved"] for r in rs) / len(rs)}
        for m in plan.milestones:
            key = f"t{round(100 * m)}_s"
            row[f"{key}_mean"] = mean([r[key] for r in rs])
            row[f"{key}_reached"] = sum(r[key] is not None for r in rs)
        for key in ("merges", "conflicts", "dms", "claims_colliding", "claims_settled", "cost_usd", "cost_per_point"):
            row[f"{key}_mean"] = mean([r[key] for r in rs])
        table.append(row)
    return cells, table


def write_csv(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        if rows:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)


def num(x: float | None, digits: int = 1) -> str:
    return "–" if x is None else f"{x:,.{digits}f}"


def markdown(plan: Plan, table: list[dict], cells_total: int, cells_done: int) -> str:
    """The table as printed and kept in EXP/summary.md."""
    ms = [f"t{round(100 * m)}_s" for m in plan.milestones]
    head = ["task", "ablation", "workers", "seeds", "score mean ± sd (min–max)", "resolved",
            *[f"time to {pct(m)}" for m in plan.milestones], "merges", "conflicts", "DMs", "claims settled",
            "cost per point"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in table:
        workers = f"{r['workers']}" + (" (baseline)" if r["workers"] == 1 and plan.baseline else "")
        cells = [r["task"], r["ablation"] if r["ablation"] != BASE else "–", workers, str(r["seeds"]),
                 f"{pct(r['score_mean'])} ± {100 * r['score_sd']:.1f} ({pct(r['score_min'])}–{pct(r['score_max'])})",
                 f"{r['resolved_pct']:.0f}%",
                 *[f"{duration(r[k + '_mean'])} ({r[k + '_reached']}/{r['seeds']})" for k in ms],
                 num(r["merges_mean"]), num(r["conflicts_mean"]), num(r["dms_mean"]),
                 f"{num(r['claims_settled_mean'])}/{num(r['claims_colliding_mean'])}",
                 money(r["cost_per_point_mean"]) if r["cost_per_point_mean"] is not None else "none recorded"]
        lines.append("| " + " | ".join(cells) + " |")
    note = (f"{cells_done} of {cells_total} cells finished. Means over seeds; times are schedule time to the first "
            "checkpoint at that score, over the seeds that reached it (n/m); claims settled: colliding claims settled "
            "by DM / colliding claims; cost per point: dollars per percentage point of final score (the sim "
            "records no model cost).")
    return "\n".join(lines) + "\n\n" + note + "\n"


def summarize(plan: Plan, out: Path) -> str:
    """Write EXP/cells.csv, EXP/summary.csv and EXP/summary.md from the cells' run folders; return the markdown."""
    out = Path(out).absolute()
    cells, table = collect(plan, out)
    write_csv(out / "cells.csv", cells)
    write_csv(out / "summary.csv", table)
    text = markdown(plan, table, len(plan.cells(out)), len(cells))
    (out / "summary.md").write_text(f"# Experiment {plan.name}\n\n" + text)
    return text
