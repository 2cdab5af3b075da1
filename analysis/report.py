"""A report on one or more runs: every question file (analysis/*.sql) run over each
run's trace, as a self-contained HTML page (plots embedded) and a Markdown file
(plots as PNG files beside it), plus each answer as CSV. Given several runs, it
also puts them side by side: final score and time to 30%/50% against worker
count (the paper's figures 5 and 6).

    python -m agensh_ray.analysis.report runs/A runs/B --out report/
"""

from __future__ import annotations

import argparse
import base64
import csv
import datetime as dt
import html
import io
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from agensh_ray.analysis.views import connect, query_names, run_query

TOP = 20
"""Rows shown per table in the report (every row is in the CSV files)."""
MANY_FILES = 5_000
"""Above this many trace files, suggest compacting the run first."""


@dataclass
class Answer:
    cols: list[str]
    rows: list[tuple]

    def dicts(self) -> list[dict]:
        return [dict(zip(self.cols, r)) for r in self.rows]

    def one(self) -> dict:
        return dict(zip(self.cols, self.rows[0])) if self.rows else {c: None for c in self.cols}


@dataclass
class RunAnswers:
    run_dir: Path
    label: str
    answers: dict[str, Answer] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def run(self) -> dict:
        return self.answers["run"].one()


def analyse(run_dir: Path, prices: Path | None = None, memory_limit: str | None = None) -> RunAnswers:
    """Every question file over one run."""
    t0 = time.perf_counter()
    files = sum(1 for _ in (run_dir / "trace").glob("*/*.parquet"))
    if files > MANY_FILES:
        print(f"note: {run_dir} has {files:,} trace files; every scan pays per file, so "
              f"`python -m agensh_ray.analysis.compact {run_dir}` first makes this report much faster", file=sys.stderr)
    con = connect(run_dir, prices=prices)
    if memory_limit:
        con.execute(f"SET memory_limit = '{memory_limit}'")
    con.execute("SET preserve_insertion_order = false")
    out = RunAnswers(run_dir, run_dir.name)
    for name in query_names():
        cols, rows = run_query(con, name)
        out.answers[name] = Answer(cols, rows)
    con.close()
    out.label = str(out.run.get("run_id") or run_dir.name)
    out.seconds = time.perf_counter() - t0
    return out


# -- formatting ------------------------------------------------------------------------------


def fmt(v) -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if math.isnan(v):
            return "–"
        if v == int(v) and abs(v) < 1e12:
            return f"{int(v):,}"
        return f"{v:,.3f}" if abs(v) < 1000 else f"{v:,.0f}"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, dt.datetime):
        return v.strftime("%Y-%m-%d %H:%M:%S")
    return str(v)


def hours(s) -> str:
    return "–" if s is None else f"{s / 3600:.2f} h"


def pct(x) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def money(x) -> str:
    return "–" if x is None else f"${x:,.2f}"


# -- plots -----------------------------------------------------------------------------------


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    _plt().close(fig)
    return buf.getvalue()


def _empty(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="gray")
    ax.set_xticks([])
    ax.set_yticks([])


def plot_scores(runs: list[RunAnswers]) -> bytes:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 3.4))
    any_rows = False
    for r in runs:
        pts = r.answers["scores"].dicts()
        if pts:
            any_rows = True
            ax.plot([p["t_s"] / 3600 for p in pts], [100 * p["pass_rate"] for p in pts], marker=".",
                    drawstyle="steps-post", label=f"{r.label} ({r.run['workers']} workers)")
    if not any_rows:
        _empty(ax, "no scores recorded")
    else:
        for y in (30, 50):
            ax.axhline(y, color="gray", lw=0.6, ls=":")
        ax.set_xlabel("schedule hours since start")
        ax.set_ylabel("hidden tests passed (%)")
        ax.set_ylim(0, 102)
        ax.legend(fontsize=8)
    ax.set_title("Score over time")
    return _png(fig)


def plot_funnel(r: RunAnswers) -> bytes:
    plt = _plt()
    m = r.answers["merges"].one()
    labels = ["opened", "merged", "closed\nunmerged", "open\nat end", "merged by\nauthor", "merged by\npeer",
              "merged\nno review", "hit a\nconflict"]
    keys = ["opened", "merged", "closed_unmerged", "open_at_end", "merged_by_author", "merged_by_peer",
            "merged_without_review", "prs_with_conflicts"]
    vals = [m.get(k) or 0 for k in keys]
    fig, ax = plt.subplots(figsize=(7, 3.2))
    colors = ["#4c72b0", "#55a868", "#c44e52", "#8172b2", "#64b5cd", "#64b5cd", "#ccb974", "#dd8452"]
    bars = ax.bar(labels, vals, color=colors)
    ax.bar_label(bars, fontsize=8)
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_ylabel("PRs")
    ax.set_title(f"PR funnel — {r.label}")
    ax.tick_params(axis="x", labelsize=8)
    return _png(fig)


ROLE_ORDER = ["integrator", "reviewer", "builder", "scout", "idle"]
ROLE_COLORS = {"integrator": "#c44e52", "reviewer": "#8172b2", "builder": "#4c72b0", "scout": "#55a868", "idle": "#aaaaaa"}


def plot_roles(r: RunAnswers) -> bytes:
    plt = _plt()
    ws = r.answers["roles"].dicts()
    counts = {k: sum(1 for w in ws if w["role"] == k) for k in ROLE_ORDER}
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(8, 3.2), gridspec_kw={"width_ratios": [1, 1.4]})
    bars = ax1.bar(list(counts), list(counts.values()), color=[ROLE_COLORS[k] for k in counts])
    ax1.bar_label(bars, fontsize=8)
    ax1.set_ylabel("workers")
    ax1.set_title("Workers per role")
    ax1.tick_params(axis="x", labelsize=7, rotation=30)
    ax1.yaxis.get_major_locator().set_params(integer=True)
    acts = [("PRs authored", "prs_authored"), ("peer merges", "merged_for_others"), ("reviews", "reviews_given"),
            ("claims", "claims"), ("DMs sent", "dms_sent")]
    bottom = [0.0] * len(acts)
    for role in ROLE_ORDER:
        vals = [sum(w[k] for w in ws if w["role"] == role) for _, k in acts]
        if any(vals):
            ax2.barh([a for a, _ in acts], vals, left=bottom, color=ROLE_COLORS[role], label=role)
            bottom = [b + v for b, v in zip(bottom, vals)]
    if not any(bottom):
        _empty(ax2, "no activity")
    else:
        ax2.legend(fontsize=7)
    ax2.set_title("Activity by role")
    ax2.tick_params(axis="y", labelsize=8)
    return _png(fig)


def plot_dm_graph(r: RunAnswers) -> bytes:
    plt = _plt()
    edges = r.answers["dm_edges"].dicts()
    fig, ax = plt.subplots(figsize=(6, 3.6))
    if not edges:
        _empty(ax, "no direct messages")
        ax.set_title("DM graph")
        return _png(fig)
    names = sorted({e["sender"] for e in edges} | {e["recipient"] for e in edges if e["recipient"]})
    if len(names) <= 40:
        idx = {n: i for i, n in enumerate(names)}
        grid = [[0] * len(names) for _ in names]
        for e in edges:
            if e["recipient"] in idx:
                grid[idx[e["sender"]]][idx[e["recipient"]]] = e["dms"]
        im = ax.imshow(grid, cmap="Blues")
        ax.set_xticks(range(len(names)), names, rotation=90, fontsize=6)
        ax.set_yticks(range(len(names)), names, fontsize=6)
        ax.set_xlabel("recipient")
        ax.set_ylabel("sender")
        fig.colorbar(im, ax=ax, label="DMs").ax.yaxis.get_major_locator().set_params(integer=True)
        ax.set_title("DM graph (sender → recipient)")
    else:
        out_deg: dict[str, int] = {}
        in_deg: dict[str, int] = {}
        for e in edges:
            out_deg[e["sender"]] = out_deg.get(e["sender"], 0) + 1
            in_deg[e["recipient"]] = in_deg.get(e["recipient"], 0) + 1
        top = max(max(out_deg.values()), max(in_deg.values()))
        bins = sorted({int(round(1.25**k)) for k in range(0, 1 + int(math.log(top + 1, 1.25)) + 1)} | {top + 1})
        ax.hist([list(out_deg.values()), list(in_deg.values())], bins=bins, histtype="step", lw=1.5,
                label=["out-degree (peers written to)", "in-degree (peers heard from)"])
        ax.set_xscale("log")
        ax.set_xlabel("distinct peers")
        ax.set_ylabel("workers")
        ax.legend(fontsize=8)
        ax.set_title(f"DM graph degrees ({len(names)} workers, {len(edges)} edges)")
    return _png(fig)


def plot_cost(r: RunAnswers) -> bytes:
    plt = _plt()
    ws = [c for c in r.answers["cost"].dicts() if c["level"] == "worker"]
    ws.sort(key=lambda c: -(c["cost_usd"] or 0))
    fig, ax = plt.subplots(figsize=(7, 3.2))
    if not any((c["cost_usd"] or 0) > 0 or (c["input_tokens"] or 0) > 0 for c in ws):
        _empty(ax, "no token usage reported (the sim agent reports none)")
    else:
        x = range(len(ws))
        ax.bar(x, [c["cost_usd"] for c in ws], color=[ROLE_COLORS.get(c["role"], "#888") for c in ws], width=0.9)
        if len(ws) <= 40:
            ax.set_xticks(list(x), [c["worker_id"] for c in ws], rotation=90, fontsize=6)
        else:
            ax.set_xticks([])
            ax.set_xlabel(f"{len(ws)} workers, most expensive first")
        ax.set_ylabel("USD")
        handles = [plt.Rectangle((0, 0), 1, 1, color=ROLE_COLORS[k]) for k in ROLE_ORDER]
        ax.legend(handles, ROLE_ORDER, fontsize=7)
    ax.set_title(f"Cost per worker — {r.label}")
    return _png(fig)


def plot_side_by_side(runs: list[RunAnswers]) -> bytes:
    plt = _plt()
    pts = sorted(runs, key=lambda r: r.run["workers"] or 0)
    xs = [r.run["workers"] or 0 for r in pts]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.4))
    finals = [r.answers["score_milestones"].one()["final_pass_rate"] for r in pts]
    ax1.plot(xs, [100 * f if f is not None else float("nan") for f in finals], marker="o")
    ax1.set_ylim(0, 102)
    ax1.set_ylabel("final score (%)")
    ax1.set_title("Final score vs workers")
    for key, label in (("time_to_30_s", "30%"), ("time_to_50_s", "50%")):
        ys = [r.answers["score_milestones"].one()[key] for r in pts]
        ax2.plot(xs, [y / 3600 if y is not None else float("nan") for y in ys], marker="o", label=f"to {label}")
    ax2.set_ylabel("schedule hours")
    ax2.set_ylim(bottom=0)
    ax2.set_title("Time to score vs workers")
    ax2.legend(fontsize=8)
    for ax in (ax1, ax2):
        ax.set_xlabel("workers")
        if xs and min(xs) > 0 and max(xs) / min(xs) >= 4:
            ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [str(x) for x in xs])
    return _png(fig)


# -- document --------------------------------------------------------------------------------


@dataclass
class Doc:
    """Blocks rendered to both Markdown and HTML."""

    blocks: list[tuple] = field(default_factory=list)
    images: dict[str, bytes] = field(default_factory=dict)

    def h(self, level: int, text: str) -> None:
        self.blocks.append(("h", level, text))

    def p(self, text: str) -> None:
        self.blocks.append(("p", text))

    def table(self, cols: list[str], rows: list[list], note: str = "") -> None:
        self.blocks.append(("table", cols, rows, note))

    def answer(self, a: Answer, csv_path: str, top: int = TOP, cols: list[str] | None = None,
               empty: str = "none") -> None:
        cols = cols or a.cols
        idx = [a.cols.index(c) for c in cols]
        rows = [[fmt(r[i]) for i in idx] for r in a.rows[:top]]
        note = f"{len(a.rows) - top:,} more rows in `{csv_path}`" if len(a.rows) > top else ""
        if not a.rows:
            note = empty
        self.table(cols, rows, note)

    def img(self, name: str, png: bytes, alt: str) -> None:
        self.images[name] = png
        self.blocks.append(("img", name, alt))

    def markdown(self) -> str:
        out = []
        for b in self.blocks:
            if b[0] == "h":
                out.append("#" * b[1] + " " + b[2])
            elif b[0] == "p":
                out.append(b[1])
            elif b[0] == "table":
                _, cols, rows, note = b
                if rows:
                    cell = lambda s: str(s).replace("|", "\\|").replace("\n", " ")  # noqa: E731
                    lines = ["| " + " | ".join(cell(c) for c in cols) + " |", "|" + "---|" * len(cols)]
                    lines += ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows]
                    out.append("\n".join(lines))
                if note:
                    out.append(f"_{note}_")
            elif b[0] == "img":
                out.append(f"![{b[2]}](img/{b[1]})")
        return "\n\n".join(out) + "\n"

    def html(self, title: str) -> str:
        out = [
            "<!doctype html><html><head><meta charset='utf-8'>",
            f"<title>{html.escape(title)}</title><style>",
            "body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}",
            "table{border-collapse:collapse;font-size:13px;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 6px}",
            "th{background:#f3f3f3}td{text-align:right}td:first-child{text-align:left}img{max-width:100%}",
            ".note{color:#666;font-size:12px;font-style:italic}code{background:#f3f3f3}",
            "</style></head><body>",
        ]
        for b in self.blocks:
            if b[0] == "h":
                out.append(f"<h{b[1]}>{html.escape(b[2])}</h{b[1]}>")
            elif b[0] == "p":
                out.append(f"<p>{_inline(b[1])}</p>")
            elif b[0] == "table":
                _, cols, rows, note = b
                if rows:
                    out.append("<table><tr>" + "".join(f"<th>{html.escape(str(c))}</th>" for c in cols) + "</tr>")
                    out += ["<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in r) + "</tr>" for r in rows]
                    out.append("</table>")
                if note:
                    out.append(f"<p class='note'>{_inline(note)}</p>")
            elif b[0] == "img":
                data = base64.b64encode(self.images[b[1]]).decode()
                out.append(f"<p><img alt='{html.escape(b[2])}' src='data:image/png;base64,{data}'></p>")
        out.append("</body></html>")
        return "\n".join(out) + "\n"


def _inline(text: str) -> str:
    parts = html.escape(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


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
