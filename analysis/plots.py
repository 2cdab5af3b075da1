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
    matplotlib.rcParams["text.parse_math"] = False  # labels are data (worker ids, run names): `$` is a dollar
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
                    drawstyle="steps-post", label=f"{r.label} ({r.run['workers']:,} workers)")
    if not any_rows:
        _empty(ax, "no scores recorded")
    else:
        for y in sorted({m["milestone"] for r in runs for m in r.answers["score_milestones"].dicts()}):
            ax.axhline(100 * y, color="gray", lw=0.6, ls=":")
        ax.set_xlabel("schedule hours since start")
        ax.set_ylabel("hidden tests passed (%)")
        ax.set_ylim(0, 102)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0)
    ax.set_title("Score over time (dotted: the milestones)")
    return _png(fig)


def plot_funnel(r: RunAnswers) -> bytes:
    plt = _plt()
    m = r.answers["merges"].one()
    bars = [("opened", "opened", "#4c72b0"), ("merged", "merged", "#55a868"),
            ("closed\nunmerged", "closed_unmerged", "#c44e52"), ("open\nat end", "open_at_end", "#8172b2"),
            ("merged by\nauthor", "merged_by_author", "#64b5cd"), ("merged by\npeer", "merged_by_peer", "#64b5cd"),
            ("merged, merger\nunknown", "merged_unattributed", "#aaaaaa"),
            ("merged\nno review", "merged_without_review", "#ccb974"), ("hit a\nconflict", "prs_with_conflicts", "#dd8452")]
    bars = [b for b in bars if b[1] != "merged_unattributed" or m.get(b[1])]
    labels, vals, colors = [b[0] for b in bars], [m.get(b[1]) or 0 for b in bars], [b[2] for b in bars]
    fig, ax = plt.subplots(figsize=(7.5, 3.2))
    bars = ax.bar(labels, vals, color=colors)
    ax.bar_label(bars, fontsize=8)
    ax.set_ylim(bottom=0, top=max(1, *vals) * 1.1)
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_ylabel("PRs")
    ax.set_xlabel("pull requests by outcome")
    ax.set_title(f"PR funnel — {r.label}")
    ax.tick_params(axis="x", labelsize=8)
    return _png(fig)


ROLE_ORDER = ["integrator", "reviewer", "builder", "scout", "idle"]
ROLE_COLORS = {"integrator": "#c44e52", "reviewer": "#8172b2", "builder": "#4c72b0", "scout": "#55a868", "idle": "#aaaaaa"}


def plot_roles(r: RunAnswers) -> bytes:
    plt = _plt()
    ws = r.answers["roles"].dicts()
    counts = {k: sum(1 for w in ws if w["role"] == k) for k in ROLE_ORDER}
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9.5, 3.2), gridspec_kw={"width_ratios": [1, 1.5]})
    bars = ax1.bar(list(counts), list(counts.values()), color=[ROLE_COLORS[k] for k in counts])
    ax1.bar_label(bars, fontsize=8)
    ax1.set_ylabel("workers")
    ax1.set_title(f"Workers per role ({len(ws):,} workers)")
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
        ax2.legend(fontsize=7, title="role", title_fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1),
                   borderaxespad=0)
        ax2.set_xlabel("count, summed over the workers of each role")
        ax2.invert_yaxis()
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
        ax.xaxis.set_major_formatter(lambda v, _: f"{v:g}")  # plain numbers (mathtext is off: labels are data)
        ax.set_xlabel("distinct peers")
        ax.set_ylabel("workers")
        ax.legend(fontsize=8)
        ax.set_title(f"DM graph degrees ({len(names)} workers, {len(edges)} edges)")
    return _png(fig)


def plot_cost(r: RunAnswers) -> bytes:
    plt = _plt()
    ws = [c for c in r.answers["cost"].dicts() if c["level"] == "worker"]
    known = lambda c: c["cost_usd"] if c["cost_usd"] is not None else (c.get("known_cost_usd") or 0)
    ws.sort(key=lambda c: -known(c))
    fig, ax = plt.subplots(figsize=(7, 3.2))
    if not any(known(c) > 0 or (c["input_tokens"] or 0) > 0 for c in ws):
        _empty(ax, "no token usage reported (the sim agent reports none)")
    else:
        x = range(len(ws))
        bars = ax.bar(x, [known(c) for c in ws], color=[ROLE_COLORS.get(c["role"], "#888") for c in ws], width=0.9)
        for b, c in zip(bars, ws):
            if c["cost_usd"] is None:  # some calls have no price: the bar is the known part only
                b.set_hatch("//")
        if len(ws) <= 40:
            ax.set_xticks(list(x), [c["worker_id"] or "(no worker)" for c in ws], rotation=90, fontsize=6)
            ax.set_xlabel("worker, most expensive first")
        else:
            ax.set_xticks([])
            ax.set_xlabel(f"{len(ws):,} workers, most expensive first")
        ax.set_ylabel("cost (USD)" if all(c["cost_usd"] is not None for c in ws)
                      else "cost (USD; hatched: known part,\nsome calls have no price)", fontsize=8)
        ax.yaxis.set_major_formatter(lambda v, _: f"${v:,.2f}")
        present = [k for k in [*ROLE_ORDER, "unattributed"] if any(c["role"] == k for c in ws)]
        handles = [plt.Rectangle((0, 0), 1, 1, color=ROLE_COLORS.get(k, "#888")) for k in present]
        ax.legend(handles, present, fontsize=7, title="role", title_fontsize=7, loc="upper left",
                  bbox_to_anchor=(1.01, 1), borderaxespad=0)
    ax.set_title(f"Cost per worker — {r.label}")
    return _png(fig)


def plot_side_by_side(runs: list[RunAnswers]) -> bytes:
    """Final score and time to each milestone per run, runs ordered by worker count; every run is its
    own labelled bar, so runs with the same worker count stay apart."""
    plt = _plt()
    pts = sorted(runs, key=lambda r: (r.run["workers"] or 0, r.label))
    names = [f"{_short(r.label)}\n{r.run['workers'] or 0:,} workers" for r in pts]
    x = list(range(len(pts)))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    finals = [r.answers["final_score"].one()["final_pass_rate"] for r in pts]
    bars = ax1.bar(x, [100 * f if f is not None else 0 for f in finals], color="#4c72b0", width=0.6)
    ax1.bar_label(bars, labels=["–" if f is None else f"{100 * f:.0f}%" for f in finals], fontsize=7)
    ax1.set_ylim(0, 110)
    ax1.set_ylabel("final score (%)")
    ax1.set_title("Final score")
    levels = sorted({m["milestone"] for r in pts for m in r.answers["score_milestones"].dicts()})
    width = 0.8 / max(1, len(levels))
    for j, level in enumerate(levels):
        ys = [next((m["time_to_s"] for m in r.answers["score_milestones"].dicts() if m["milestone"] == level), None)
              for r in pts]
        xs = [i - 0.4 + width * (j + 0.5) for i in x]
        b = ax2.bar(xs, [y / 3600 if y is not None else 0 for y in ys], width=width * 0.95, label=f"{100 * level:g}%")
        ax2.bar_label(b, labels=["never" if y is None else "" for y in ys], fontsize=6, rotation=90)
    ax2.set_ylabel("schedule hours")
    ax2.set_title("Time to reach each milestone")
    if levels:
        ax2.legend(fontsize=7, title="milestone", title_fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1),
                   borderaxespad=0)
    for ax in (ax1, ax2):
        ax.set_xticks(x, names, fontsize=7)
        ax.set_xlabel("run (ordered by worker count)")
    return _png(fig)


def _short(label: str, n: int = 18) -> str:
    return label if len(label) <= n else label[: n - 1] + "…"
