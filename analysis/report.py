"""A report on one or more runs: every question file (analysis/*.sql) run over each
run's trace, as one self-contained HTML page (plots embedded, a table of contents) and
a Markdown file (plots as PNG files beside it), plus each answer as CSV. Given several
runs, it also puts them side by side: final score and time to each score milestone
against worker count (the paper's figures 5 and 6).

    python -m agensh_ray.analysis.report runs/A runs/B --out report/ [--milestones 25,50,75,90]
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from agensh_ray.analysis.answers import Answer, RunAnswers, analyse
from agensh_ray.analysis.columns import duration, fmt, money, pct
from agensh_ray.analysis.doc import Doc
from agensh_ray.analysis.scaling import org_section, scaling_section
from agensh_ray.analysis.plots import (
    ROLE_ORDER,
    plot_cost,
    plot_dm_graph,
    plot_funnel,
    plot_roles,
    plot_scores,
    plot_side_by_side,
)
from agensh_ray.analysis.views import parse_percents, run_folder
from agensh_ray.analysis.time_to_score import plot_time_to_score

__all__ = ["analyse", "build", "main", "write_report"]

ROLES_ALL = 40
"""Up to this many workers the roles table lists every one; above, the most active (the per-role table
and the CSV hold them all)."""

BASIS_MARK = {"agent-reported": " †", "mixed": " ‡"}


def levels(runs: list[RunAnswers]) -> list[float]:
    """The score milestones of these runs (the same setting for all)."""
    return sorted({m["milestone"] for r in runs for m in r.answers["score_milestones"].dicts()})


def run_cost(r: RunAnswers) -> dict:
    return next((c for c in r.answers["cost"].dicts() if c["level"] == "run"), {})


def cost_text(c: dict, harness: str | None = "sim") -> str:
    """Cost as shown: one money format; a mark when it is not priced tokens (see cost_notes). A real agent's run
    with no usage recorded (Claude Code and Codex report none) cost something: "unknown", never $0."""
    if c.get("cost_basis") in (None, "none"):
        return "none recorded" if harness == "sim" else "unknown"
    if c.get("cost_usd") is None:  # some calls have no price (cost_basis partial): the known part, never as the cost
        return partial_text(c)
    return money(c.get("cost_usd")) + BASIS_MARK.get(c["cost_basis"], "")


def partial_text(c: dict) -> str:
    n, calls = c.get("unpriced_calls") or 0, c.get("calls") or 0
    return (f"unknown ({money(c.get('known_cost_usd'))} known; {n:,} of {calls:,} "
            f"{'call has' if n == 1 else 'calls have'} no price)")


def cost_notes(doc: Doc, runs: list[RunAnswers]) -> None:
    by_basis: dict[str, list[str]] = {}
    for r in runs:
        by_basis.setdefault(run_cost(r).get("cost_basis") or "none", []).append(
            f"{r.label} (harness {fmt(r.run['harness'])})")
    if "agent-reported" in by_basis:
        doc.p("† Agent-reported cost: the price table has no row for the harness of "
              f"{', '.join(by_basis['agent-reported'])}, so this is what the agents reported, not their tokens "
              "priced; it is not comparable with priced runs. Add a row to the price table (`--prices`) to price them.",
              note=True)
    if "mixed" in by_basis:
        doc.p(f"‡ Partly agent-reported: some of the calls of {', '.join(by_basis['mixed'])} have no price row.",
              note=True)
    if "partial" in by_basis:
        doc.p(f"Cost unknown for {', '.join(by_basis['partial'])}: some model calls have no price (a model no price "
              "table knows, or an answer without usage), so the run's cost is at least the known part shown; "
              "`cost_per_model` says which models.", note=True)
    if "none" in by_basis:
        doc.p(f"No token usage was recorded for {', '.join(by_basis['none'])} (the sim agent reports none; Claude "
              "Code and Codex report none either: their cost is unknown unless they ran through the model gateway).",
              note=True)


SCORE_FACTS = ("checkpoints", "final_pass_rate", "final_passed", "total", "best_pass_rate")
"""The score facts every run shows; the strict ones are shown only where they differ (strict_differs)."""


def strict_differs(final: dict) -> bool:
    """Main at the end ships files that change the test runner, and its strict score is not the official one
    (or is unknown)."""
    return bool(final.get("final_runner_files")) and final.get("final_strict_pass_rate") != final.get(
        "final_pass_rate")


def strict_pct(final: dict) -> str:
    return "unknown" if final.get("final_strict_pass_rate") is None else pct(final["final_strict_pass_rate"])


def summary(doc: Doc, runs: list[RunAnswers]) -> None:
    ms = levels(runs)
    cols = ["run", "harness", "workers", "schedule time", "final score", *[f"time to {pct(m)}" for m in ms],
            "PRs opened", "PRs merged", "merge conflicts", "cost", "cost per merged PR"]
    kinds = ["text", "text", "number", "duration", "percent", *["duration"] * len(ms)] + ["number"] * 3 + ["money"] * 2
    rows = []
    for r in runs:
        final, m, c = r.answers["final_score"].one(), r.answers["merges"].one(), run_cost(r)
        reached = {x["milestone"]: x["time_to_s"] for x in r.answers["score_milestones"].dicts()}
        per_pr = c.get("cost_per_merged_pr")
        rows.append([r.label, fmt(r.run["harness"]), fmt(r.run["workers"]), duration(r.run["duration_s"]),
                     pct(final["final_pass_rate"]), *[duration(reached.get(x)) for x in ms], fmt(m["opened"]),
                     fmt(m["merged"]), fmt(m["merge_conflicts"]), cost_text(c, r.run.get("harness")),
                     "–" if c.get("cost_basis") == "none" else "unknown" if per_pr is None and c.get("cost_usd") is None
                     and c.get("merged_prs") else "–" if per_pr is None
                     else money(per_pr) + BASIS_MARK.get(c["cost_basis"], "")])
    doc.table(cols, rows, kinds)
    gamed = [(r.label, f) for r in runs if strict_differs(f := r.answers["final_score"].one())]
    if gamed:
        doc.p("Final score is ProgramBench's official score. " + "; ".join(
            f"{label}: {strict_pct(f)} without the files main ships that change the test runner "
            f"({f['final_runner_files']})" for label, f in gamed) + ".", note=True)
    cost_notes(doc, runs)


def build(runs: list[RunAnswers], data_dirs: dict[str, str]) -> Doc:
    doc = Doc()
    doc.h(1, "Run report" if len(runs) == 1 else f"Report on {len(runs)} runs", anchor="top")
    doc.p("Times are schedule time (wall time x the run's time scale) since the schedule started (the first worker's "
          "launch), within the run's schedule: the set-up before it and the final scoring after it are shown apart, "
          "in wall time. Every table answers one question file of "
          "`analysis/` over the run's trace, counting each event once; the full answers are CSV files under `data/`.")
    doc.toc()
    doc.h(2, "Summary", anchor="summary")
    summary(doc, runs)
    score_plots(doc, runs)
    if len(runs) > 1:
        side_by_side(doc, runs)
    for i, r in enumerate(runs):
        run_section(doc, r, i, len(runs), data_dirs[r.label])
    return doc


def clock_text(run: dict) -> str:
    """The run's one clock: its schedule (from the first worker's launch; the configured length unless it ended
    early), then wall time apart, with the set-up before the schedule and what came after it."""
    sched = f"{duration(run.get('duration_s'))} of schedule"
    if run.get("configured_s") is not None:
        if run.get("ended_early"):
            how = run.get("ended_how")
            sched += (f" (ended early, {how}, of {duration(run['configured_s'])} configured)" if how else
                      f" so far (of {duration(run['configured_s'])} configured; still running, or it stopped "
                      "without a summary)")
        else:
            sched += f" (as configured{', ' + run['ended_how'] if run.get('ended_how') else ''})"
    return (f"{sched}; {duration(run.get('wall_s'))} wall: {duration(run.get('setup_wall_s'))} of set-up before the "
            f"schedule (Ray, the actors, the clones), {duration(run.get('schedule_wall_s'))} of schedule, "
            f"{duration(run.get('after_wall_s'))} after it (stopping the workers, the final checkpoint)")


MIN_CHECKPOINTS = 3
"""Fewer scorings than this draw no score-over-time or time-to-score curve: a final checkpoint alone is a flat
line, two a step; the report says so instead."""


def score_plots(doc: Doc, runs: list[RunAnswers]) -> None:
    """The score-over-time and time-to-score plots of the runs with enough checkpoints; the others named, with
    how many they have."""
    enough = [r for r in runs if len(r.answers["scores"].rows) >= MIN_CHECKPOINTS]
    few = [r for r in runs if r not in enough]
    if few:
        doc.p("Too few checkpoints to plot the score over time for "
              + ", ".join(f"{r.label} ({len(r.answers['scores'].rows)} "
                          f"{'checkpoint' if len(r.answers['scores'].rows) == 1 else 'checkpoints'})" for r in few)
              + f": a curve needs at least {MIN_CHECKPOINTS} (a final checkpoint alone would draw a flat line); "
              "periodic checkpoints (`--checkpoint-every`) give one. Their scores are in the tables below.",
              note=True)
    if enough:
        doc.img("scores.png", plot_scores(enough), "score over time")
        doc.img("time_to_score.png", plot_time_to_score(enough), "time to reach each tenth of the hidden tests")


def side_by_side(doc: Doc, runs: list[RunAnswers]) -> None:
    """The runs compared (plots across runs go here)."""
    doc.h(2, "Side by side", anchor="side-by-side")
    doc.p("Final score and time to reach each milestone of the hidden tests, one bar per run, runs ordered by "
          "worker count.")
    doc.img("side_by_side.png", plot_side_by_side(runs), "final score and time to each milestone, per run")
    scaling_section(doc, runs)


def run_section(doc: Doc, r: RunAnswers, i: int, n: int, d: str) -> None:
    a = r.answers
    tag = f"{i + 1}-" if n > 1 else ""
    key = f"run-{i + 1}"
    doc.h(2, f"Run {r.label}", anchor=key)
    doc.p(f"`{str(r.run_dir).replace('`', '')}`: {fmt(r.run['workers'])} workers, harness {fmt(r.run['harness'])}, "
          f"time scale {fmt(r.run['time_scale'])}, {clock_text(r.run)}.")
    clock_warning(doc, r)
    doc.h(3, "Score", anchor=f"{key}-score")
    final = a["final_score"]
    doc.facts(final, cols=[c for c in final.cols if c in SCORE_FACTS or strict_differs(final.one())])
    if strict_differs(final.one()):
        f = final.one()
        doc.p(f"Main ships files that change the hidden tests' runner ({f['final_runner_files']}): the final score "
              f"is ProgramBench's official one, which counts what they made the tests report; without them main "
              f"scores {strict_pct(f)}.", note=True)
    doc.answer(a["score_milestones"], f"{d}/score_milestones.csv", cols=["milestone", "time_to_s", "passed", "total"],
               empty="no milestones")
    doc.h(3, "Pull requests", anchor=f"{key}-prs")
    doc.img(f"{tag}funnel.png", plot_funnel(r), "PR funnel")
    doc.facts(a["merges"])
    roles(doc, r, tag, key, d)
    claims(doc, r, key, d)
    doc.h(3, "Hotspots", anchor=f"{key}-hotspots")
    doc.answer(a["hotspots"], f"{d}/hotspots.csv", top=15, empty="no PR diffs or conflicts recorded")
    doc.h(3, "Messages", anchor=f"{key}-messages")
    doc.facts(a["messages"])
    doc.img(f"{tag}dm_graph.png", plot_dm_graph(r), "DM graph")
    doc.h(3, "Cost", anchor=f"{key}-cost")
    cost_notes(doc, [r])
    doc.img(f"{tag}cost.png", plot_cost(r), "cost per worker")
    doc.answer(a["cost"], f"{d}/cost.csv", top=None, rows=[c for c in a["cost"].rows if c[0] != "worker"],
               cols=[c for c in a["cost"].cols if c != "worker_id"])
    doc.p("Per model (`analysis/cost_per_model.sql`; a model with calls that have no price has an unknown cost and "
          "its known part):")
    doc.answer(a["cost_per_model"], f"{d}/cost_per_model.csv", top=None, empty="no model calls recorded")
    idle(doc, r, key, d)
    org_section(doc, r, key, d)


def clock_warning(doc: Doc, r: RunAnswers) -> None:
    """A machine-bound run says so at the top of its section (analysis/clock.sql; agensh_ray/lag.py)."""
    c = r.answers["clock"].one() if "clock" in r.answers and r.answers["clock"].rows else {}
    if c.get("machine_bound"):
        doc.p(f"**Machine-bound run**: {c['why'].removeprefix('machine-bound: ')} "
              f"({fmt(c['ticks_machine_bound'])} of {fmt(c['ticks'])} progress ticks machine-bound). Its schedule "
              "times measure this machine as much as the organization (docs/operations.md, Machine-bound runs).",
              note=True)


def roles(doc: Doc, r: RunAnswers, tag: str, key: str, d: str) -> None:
    a = r.answers
    t = a["role_thresholds"].one()
    doc.h(3, "Roles", anchor=f"{key}-roles")
    doc.p(f"Roles emerge from what each worker did, with thresholds relative to this run (`analysis/roles.sql`, "
          f"computed by view `role_thresholds`): **integrator**: merged at least {fmt(t['integrator_min_merges'])} "
          f"peers' PRs (the larger of {fmt(t['integrator_floor'])} and {fmt(t['even_share_multiple'])} × "
          f"{fmt(t['peer_merges'])} peer merges / {fmt(t['workers'])} workers, rounded up) and at least as many as it "
          f"authored; **reviewer**: reviewed at least {fmt(t['reviewer_min_reviews'])} peers' PRs (the larger of "
          f"{fmt(t['reviewer_floor'])} and {fmt(t['even_share_multiple'])} × {fmt(t['peer_reviews'])} peer reviews / "
          f"{fmt(t['workers'])} workers, rounded up) and at least as many as it authored; **builder**: authored at "
          f"least {fmt(t['builder_min_prs'])} PR; **scout**: no PR of its own, but board entries, messages, or merges "
          "and reviews below those thresholds; **idle**: none of that (it may have taken turns). `labels` lists every "
          "threshold a worker meets.")
    doc.img(f"{tag}roles.png", plot_roles(r), "roles")
    ws = a["roles"].dicts()
    per_role = [[role, fmt(len(g)), *[fmt(sum(w[k] for w in g)) for k in ROLE_SUMS]]
                for role in ROLE_ORDER if (g := [w for w in ws if w["role"] == role])]
    doc.table(["role", "workers", "PRs authored", "peers' PRs merged", "peers' PRs reviewed", "claims", "DMs sent",
               "turns"], per_role)
    order = {k: j for j, k in enumerate(ROLE_ORDER)}
    active = lambda w: w["prs_authored"] + w["merged_for_others"] + w["reviews_given"] + w["board_entries"]
    cols = ["worker_id", "role", "labels", "prs_authored", "prs_merged", "merged_own", "merged_for_others",
            "reviews_given", "claims", "board_entries", "dms_sent", "dms_received", "turns"]
    if len(ws) <= ROLES_ALL:
        ranked = sorted(a["roles"].rows, key=lambda w: (order.get(w[1], 9), -active(dict(zip(a["roles"].cols, w))), w[0]))
        doc.answer(a["roles"], f"{d}/roles.csv", top=None, cols=cols, rows=ranked)
        return
    ranked = sorted(a["roles"].rows, key=lambda w: (-active(dict(zip(a["roles"].cols, w))), str(w[0])))
    doc.answer(a["roles"], f"{d}/roles.csv", top=TOP_ACTIVE, cols=cols, rows=ranked)
    idle_ids = [str(w["worker_id"]) for w in ws if w["role"] == "idle"]
    if idle_ids:
        shown = ", ".join(idle_ids[:30]) + (", …" if len(idle_ids) > 30 else "")
        doc.p(f"The {TOP_ACTIVE} most active workers; every worker is counted in the table by role above. "
              f"{len(idle_ids):,} idle: {shown}.", note=True)


ROLE_SUMS = ["prs_authored", "merged_for_others", "reviews_given", "claims", "dms_sent", "turns"]
TOP_ACTIVE = 20


def claims(doc: Doc, r: RunAnswers, key: str, d: str) -> None:
    a = r.answers
    dup = a["duplicated_work"].dicts()
    pairs = {(x["pr_a"], x["pr_b"]) for x in dup}
    doc.h(3, "Claims and duplicated work", anchor=f"{key}-claims")
    doc.p(f"{len(a['claims'].rows):,} colliding claims, "
          f"{sum(1 for c in a['claims'].dicts() if c['settled_by_dm']):,} of them followed by a DM between the two; "
          f"{len(pairs):,} PR {'pair' if len(pairs) == 1 else 'pairs'} duplicating work "
          f"(in {len({x['path'] for x in dup}):,} files).")
    doc.answer(a["claims"], f"{d}/claims.csv", empty="no colliding claims",
               cols=["seq", "worker_id", "claimed_s", "text", "earlier_seq", "earlier_worker", "gap_s", "shared",
                     "settled_by_dm"])
    doc.answer(a["duplicated_work"], f"{d}/duplicated_work.csv", empty="no duplicated work")


def idle(doc: Doc, r: RunAnswers, key: str, d: str) -> None:
    a = r.answers
    doc.h(3, "Idle time", anchor=f"{key}-idle")
    rows = a["idle"].dicts()
    up = sum(w["up_s"] for w in rows)
    never_up = sum(1 for w in rows if not w["up_s"])
    doc.p(f"Workers were idle {pct(sum(w['idle_s'] for w in rows) / up if up else None)} of their up time; "
          f"{sum(w['nudges'] for w in rows):,} nudges, {sum(w['share_findings_prompts'] for w in rows):,} "
          f"share-findings prompts; {never_up:,} {'worker' if never_up == 1 else 'workers'} never up. Most idle first:")
    ranked = sorted(a["idle"].rows, key=lambda w: (-(w[5] or 0), str(w[0])))
    doc.answer(Answer(a["idle"].cols, ranked), f"{d}/idle.csv")


def write_report(run_dirs: list[Path], out: Path, prices: Path | None = None, memory_limit: str | None = "2GB",
                 milestones: list[float] | None = None) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    runs = [analyse(Path(d), prices, memory_limit, milestones) for d in run_dirs]
    seen: dict[str, int] = {}
    for r in runs:  # unique labels
        n = seen.get(r.label, 0)
        seen[r.label] = n + 1
        if n:
            r.label = f"{r.label}-{n + 1}"
    data_dirs = {}
    for k, r in enumerate(runs):
        name = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in r.label) or f"run{k + 1}"
        d = out / "data" / name
        d.mkdir(parents=True, exist_ok=True)
        for q, a in r.answers.items():
            with open(d / f"{q}.csv", "w", newline="") as f:
                w = csv.writer(f)
                w.writerow(a.cols)
                w.writerows([["" if v is None else v for v in row] for row in a.rows])
        data_dirs[r.label] = f"data/{name}"
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
        "time; with several runs, final score and time to each score milestone side by side. Also writes every "
        "question's full answer as CSV under OUT/data/.",
    )
    ap.add_argument("run_dirs", nargs="+", type=run_folder, metavar="RUN_DIR",
                    help="a run folder (runs/<run_id>, with trace/ inside), or one on an object store "
                    "(s3://bucket/prefix/<run_id>, downloaded first); finished or still running")
    ap.add_argument("--out", type=Path, required=True, metavar="DIR",
                    help="where to write report.html, report.md, img/ and data/")
    ap.add_argument("--prices", type=Path, default=None, metavar="CSV",
                    help="price table: model,input_usd_per_mtok,output_usd_per_mtok (default analysis/prices.csv); "
                    "a run's tokens are priced by the row named like its harness")
    ap.add_argument("--milestones", default=None, metavar="PCTS",
                    help="score milestones to time, in percent of the hidden tests, comma-separated "
                    "(default 25,50,75,90)")
    ap.add_argument("--memory-limit", default="2GB", help="DuckDB memory limit per run (default 2GB)")
    args = ap.parse_args(argv)
    for d in args.run_dirs:
        if not (d / "trace").is_dir():
            ap.error(f"{d} has no trace/ folder: pass a run folder (runs/<run_id>)")
    try:
        milestones = parse_percents(args.milestones)
    except ValueError as e:
        ap.error(str(e))
    res = write_report(args.run_dirs, args.out, args.prices, args.memory_limit, milestones)
    print(f"wrote {res['html']}")
    print(f"wrote {res['markdown']} (plots in {args.out / 'img'}, answers as CSV in {args.out / 'data'})")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
