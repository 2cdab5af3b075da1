"""The time-to-score plot across runs: for each run, the schedule hours it took main to first
reach each tenth of the hidden tests (analysis/time_to_score.sql), one line per run, so runs of
different sizes or harnesses compare at a glance. Kept apart from plots.py so the report's layout
can change around it."""

from __future__ import annotations

from agensh_ray.analysis.answers import RunAnswers
from agensh_ray.analysis.plots import _empty, _plt, _png


def plot_time_to_score(runs: list[RunAnswers]) -> bytes:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 3.4))
    drawn = False
    for r in runs:
        pts = [p for p in r.answers["time_to_score"].dicts() if p["t_s"] is not None]
        if pts:
            drawn = True
            ax.plot([100 * p["level"] for p in pts], [p["t_s"] / 3600 for p in pts], marker="o",
                    label=f"{r.label} ({r.run['workers']} workers)")
    if not drawn:
        _empty(ax, "no checkpoint reached 10% of the hidden tests")
    else:
        ax.set_xlabel("hidden tests passed (%), first reached")
        ax.set_ylabel("schedule hours since start")
        ax.set_xlim(5, 105)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
    ax.set_title("Time to score")
    return _png(fig)
