"""The scaling curve across runs (issue 30): speedup S(N) = T_1 / T_N and efficiency S(N) / N against worker count N,
at 50%, 90% and 100% of the hidden tests, one line per task and level, averaged over seeds
(agensh_ray.analysis.efficiency.scaling, .curve). Kept apart from plots.py like time_to_score.py; drawn by
`python -m agensh_ray.analysis.efficiency RUN_DIR ... --out DIR` and in the report across several runs; the report's
per-run section on efficiency is here too."""

from __future__ import annotations

from agensh_ray.analysis.answers import RunAnswers
from agensh_ray.analysis.columns import duration, fmt, pct
from agensh_ray.analysis.doc import Doc
from agensh_ray.analysis.efficiency import LEVELS, curve, describe, level_key, scaling
from agensh_ray.analysis.plots import _empty, _plt, _png

GOALS = ((64, 0.7), (256, 0.5))
"""Issue 30's efficiency goals at 90%: >= 0.7 up to 64 workers, >= 0.5 at 256 (drawn as marks)."""


def plot_scaling(rows: list[dict]) -> bytes:
    """rows: efficiency.scaling()'s. Left: S(N) on log-log axes with the ideal S = N; right: S(N) / N."""
    plt = _plt()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    drawn = False
    ns = sorted({r["workers"] for r in rows if r.get("workers")})
    styles = {"50": "o--", "90": "s-", "100": "^:"}
    for lv in LEVELS:
        k = level_key(lv)
        sp, ef = curve(rows, f"speedup_{k}"), curve(rows, f"efficiency_{k}")
        for task in sp:
            pts = [(n, s, ef[task][n]) for n, s in sp[task].items() if s is not None]
            if not pts:
                continue
            drawn = True
            label = f"{task}, {k}%" if len(sp) > 1 else f"{k}% of the tests"
            ax1.plot([p[0] for p in pts], [p[1] for p in pts], styles.get(k, "o-"), label=label)
            ax2.plot([p[0] for p in pts], [p[2] for p in pts], styles.get(k, "o-"), label=label)
    if not drawn:
        for ax in (ax1, ax2):
            _empty(ax, "no speedup known: needs a 1-worker run and a run of more workers\n"
                       "of the same task and seed, both reaching a level")
    else:
        ax1.plot(ns, ns, color="gray", lw=0.8, ls="--", label="ideal S = N")
        for ax in (ax1, ax2):
            ax.set_xscale("log", base=2)
            ax.xaxis.set_major_formatter(lambda v, _: f"{v:g}")
            ax.set_xticks(ns)
            ax.set_xlabel("workers N")
        ax1.set_yscale("log", base=2)
        ax1.yaxis.set_major_formatter(lambda v, _: f"{v:g}")
        ax1.set_ylabel("speedup S(N) = T_1 / T_N")
        ax2.axhline(1.0, color="gray", lw=0.8, ls="--")
        for n, goal in GOALS:
            if ns and n <= ns[-1]:  # within the worker counts run
                ax2.plot([n], [goal], marker="_", ms=18, color="#c44e52")
        ax2.set_ylabel("efficiency S(N) / N")
        ax2.set_ylim(bottom=0)
        ax2.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0)
    ax1.set_title("Speedup (schedule time to a level)")
    ax2.set_title("Efficiency (red marks: issue 30's goals at 90%)")
    return _png(fig)


def org_section(doc: Doc, r: RunAnswers, key: str, d: str) -> None:
    """A run's organizational efficiency (efficiency.sql, with summary.json's clock)."""
    e = describe(r.run_dir, r.answers["efficiency"].one())
    doc.h(3, "Organizational efficiency", anchor=f"{key}-efficiency")
    doc.p("What the organization got done for its worker time (`analysis/efficiency.sql`; per PR: "
          "`pr_work.sql`): worker time is up time until the last merge; duplicate work is the time authors spent on "
          "PRs whose feature another worker merged; idle share is the up time until the last merge spent outside "
          "turns.")
    doc.facts(r.answers["efficiency"])
    bound = e.get("machine_bound")
    ratio = e.get("tool_latency_ratio")
    doc.p(f"Lag behind the schedule ({e['lag_source']}): tool calls took "
          f"{'an unknown multiple' if ratio is None else f'{ratio:.2f}x'} as long at the agent as at the tool server"
          + (f", CPU wait {pct(e['cpu_wait_share'])}" if e.get("cpu_wait_share") is not None else "")
          + "; machine-bound: " + ("unknown" if bound is None else "yes" if bound else "no")
          + (f" ({e['machine_bound_why']})" if e.get("machine_bound_why") else "") + ".", note=True)


def scaling_section(doc: Doc, runs: list[RunAnswers]) -> None:
    """Across runs: speedup and efficiency per task, seed and worker count, and the curve."""
    rows = scaling([describe(r.run_dir, r.answers["efficiency"].one()) for r in runs])
    doc.p("Speedup S(N) = T_1 / T_N and efficiency S(N) / N, T_N the schedule time a run of N workers took to reach a "
          "level of the hidden tests and T_1 that of the 1-worker run of the same task and seed (unknown without "
          "one, or when a run never reached the level).")
    ks = [level_key(lv) for lv in LEVELS]
    doc.table(["task", "seed", "workers", *[f"time to {k}%" for k in ks], *[f"S({k}%)" for k in ks],
               *[f"E({k}%)" for k in ks]],
              [[str(x["task"]), fmt(x["seed"]), fmt(x["workers"]), *[duration(x[f"time_to_{k}_s"]) for k in ks],
                *[fmt(x[f"speedup_{k}"]) for k in ks], *[fmt(x[f"efficiency_{k}"]) for k in ks]] for x in rows],
              ["text", "number", "number", *["duration"] * len(ks), *["number"] * 2 * len(ks)])
    doc.img("scaling.png", plot_scaling(rows), "speedup and efficiency against worker count")
