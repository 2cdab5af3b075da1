"""The report's plots (matplotlib, imported only when a plot is drawn), each returned as PNG bytes:
score over time, the PR funnel, roles, the DM graph, cost per worker, and runs side by side.
"""

from __future__ import annotations

import io
import math

from agensh_ray.analysis.answers import RunAnswers


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
