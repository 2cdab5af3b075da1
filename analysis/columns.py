"""How the report shows the question files' columns: a human name for each, and the format of its
cells (durations in hours/minutes, money in one format, shares as percentages). A test checks that
every column of every question file has a name here, so no snake_case reaches a reader.
"""

from __future__ import annotations

import datetime as dt
import math

LABELS: dict[str, str] = {
    # the run
    "run_id": "run", "harness": "harness", "workers": "workers", "time_scale": "time scale",
    "started": "started (UTC)", "ended": "ended (UTC)", "wall_s": "wall time", "duration_s": "schedule time",
    "configured_s": "configured schedule", "ended_early": "ended early", "ended_how": "how it ended",
    "setup_wall_s": "set-up (wall)", "schedule_wall_s": "schedule (wall)", "after_wall_s": "after the schedule (wall)",
    # roles
    "worker_id": "worker", "role": "role", "labels": "labels", "prs_authored": "PRs authored",
    "prs_merged": "of them merged", "merged_own": "own PRs merged", "merged_for_others": "peers' PRs merged",
    "reviews_given": "peers' PRs reviewed", "approvals_given": "approved", "claims": "claims", "fails": "FAILs",
    "board_entries": "board entries", "dms_sent": "DMs sent", "dms_received": "DMs received",
    "channel_posts": "channel posts", "turns": "turns",
    # role thresholds
    "peer_merges": "peer merges in the run", "peer_reviews": "peer reviews in the run",
    "integrator_floor": "integrator floor", "reviewer_floor": "reviewer floor",
    "even_share_multiple": "multiple of an even share", "integrator_min_merges": "integrator: peer merges ≥",
    "reviewer_min_reviews": "reviewer: reviews ≥", "builder_min_prs": "builder: PRs ≥",
    # merges
    "opened": "PRs opened", "merged": "merged", "closed_unmerged": "closed unmerged", "open_at_end": "open at the end",
    "merged_by_author": "merged by their author", "merged_by_peer": "merged by a peer",
    "merged_unattributed": "merged, merger or author unknown", "merged_without_review": "merged without review",
    "merged_without_approval": "merged without approval", "merge_conflicts": "merge conflicts",
    "prs_with_conflicts": "PRs that hit a conflict", "conflicted_then_merged": "of them merged later",
    "time_to_merge_p50_s": "time to merge (median)", "time_to_merge_p90_s": "time to merge (p90)",
    # claims and duplicated work
    "seq": "claim #", "claimed_s": "claimed at", "text": "claim", "earlier_seq": "earlier claim #",
    "earlier_worker": "earlier worker", "gap_s": "after", "shared": "shared subject",
    "settled_by_dm": "DM between them", "pr_a": "PR", "author_a": "author", "pr_b": "other PR",
    "author_b": "its author", "path": "file", "reason": "overlap", "overlap_lines": "lines both change",
    "functions": "functions",
    # hotspots
    "prs": "PRs", "authors": "authors", "conflicts": "conflicts", "conflict_prs": "PRs in conflict",
    "lines_added": "lines added", "lines_removed": "lines removed",
    # messages
    "dms": "DMs", "dm_senders": "DM senders", "dm_recipients": "DM recipients", "dm_edges": "sender → recipient pairs",
    "reciprocal_pairs": "pairs writing both ways", "max_out_degree": "most peers one wrote to",
    "max_in_degree": "most peers one heard from", "workers_without_dm": "workers with no DM",
    "sender": "sender", "recipient": "recipient", "first_s": "first", "last_s": "last",
    # cost
    "level": "level", "input_tokens": "input tokens", "output_tokens": "output tokens",
    "reported_cost_usd": "agent-reported cost", "cost_usd": "cost", "cost_basis": "cost from",
    "merged_prs": "merged PRs", "cost_per_merged_pr": "cost per merged PR", "known_cost_usd": "known cost",
    "calls": "model calls", "unpriced_calls": "calls with no price", "model": "model",
    "cached_tokens": "cached input tokens", "share_of_known_cost": "share of the known cost",
    # scores
    "t_s": "time", "checkpoint": "checkpoint", "passed": "tests passed", "total": "tests", "pass_rate": "score",
    "commit": "commit", "milestone": "milestone", "time_to_s": "reached after", "checkpoints": "scorings",
    "final_pass_rate": "final score", "final_passed": "tests passed at the end", "best_pass_rate": "best score",
    "strict_pass_rate": "strict score", "runner_files": "test-runner files shipped",
    "final_strict_pass_rate": "final strict score", "final_runner_files": "test-runner files shipped at the end",
    # idle
    "up_s": "up", "busy_s": "in turns", "idle_s": "idle", "idle_share": "idle share", "longest_idle_s": "longest idle",
    "nudges": "nudges", "share_findings_prompts": "share-findings prompts", "nudged_turns": "turns after a nudge",
    # clock (clock.sql)
    "scope": "over", "agent_tool_median_ms": "tool call at the agent (median ms)",
    "server_tool_median_ms": "tool call at the server (median ms)", "tool_latency_ratio": "tool latency, agent / server",
    "cpu_wait_share": "CPU wait share", "machine_bound": "machine-bound", "why": "why",
    "ticks": "progress ticks", "ticks_machine_bound": "machine-bound ticks",
    # organizational efficiency (efficiency.sql, pr_work.sql)
    "features_merged": "features merged", "last_merge_s": "last merge at", "worker_hours": "worker-hours until then",
    "features_per_worker_hour": "features per worker-hour", "time_to_50_s": "time to 50%",
    "time_to_90_s": "time to 90%", "time_to_100_s": "time to 100%", "pr_work_hours": "worker-hours on PRs",
    "duplicate_work_hours": "of them on features a peer merged", "duplicate_work_share": "duplicate-work share",
    "conflicts_per_merged_pr": "conflicts per merged PR", "messages": "messages (DMs and channel)",
    "messages_per_feature": "messages per feature", "board_entries_per_feature": "board entries per feature",
    "work_start_s": "work started", "work_end_s": "work ended", "work_s": "work", "duplicate_of": "duplicates PR",
    "pr": "PR", "author": "author", "state": "state",
}

TEXT = {"run_id", "harness", "worker_id", "role", "labels", "earlier_worker", "author_a", "author_b", "reason",
        "sender", "recipient", "level", "cost_basis", "checkpoint", "commit", "scope", "author", "state", "model",
        "ended_how"}
"""Short text: left-aligned, kept on one line."""
PROSE = {"text", "shared", "path", "functions", "runner_files", "final_runner_files", "why"}
"""Free text: left-aligned, wrapped."""
PERCENT = {"share_of_known_cost", "pass_rate", "final_pass_rate", "best_pass_rate", "milestone", "idle_share",
           "strict_pass_rate", "final_strict_pass_rate", "cpu_wait_share", "duplicate_work_share"}


def label(col: str) -> str:
    return LABELS.get(col, col.replace("_", " "))


def kind(col: str) -> str:
    """text | prose | duration | money | percent | number (how a column's cells look)."""
    if col in TEXT:
        return "text"
    if col in PROSE:
        return "prose"
    if col in PERCENT:
        return "percent"
    if col.endswith("_usd") or col == "cost_per_merged_pr":
        return "money"
    if col.endswith("_s"):
        return "duration"
    return "number"


def fmt(v) -> str:
    """A value as a reader sees it: thousands separators, '–' for none."""
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


def duration(s) -> str:
    """Schedule seconds as a reader reads them: 45 s, 12 min, 3.25 h."""
    if s is None or (isinstance(s, float) and math.isnan(s)):
        return "–"
    a = abs(s)
    if a < 90:
        return f"{s:.0f} s"
    if a < 90 * 60:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.2f} h"


def pct(x) -> str:
    return "–" if x is None else f"{100 * x:.1f}%".replace(".0%", "%")


def money(x) -> str:
    """The report's one money format: $1,234.56 (below a cent but above nothing: <$0.01)."""
    if x is None:
        return "–"
    if 0 < abs(x) < 0.005:
        return "<$0.01"
    return f"${x:,.2f}"


def cell(col: str, v) -> str:
    k = kind(col)
    if v is None:
        return "unknown" if col == "cost_usd" else "–"  # a cost is null only when some call has no price
    if k == "duration":
        return duration(v)
    if k == "money":
        return money(v)
    if k == "percent":
        return pct(v)
    return fmt(v)
