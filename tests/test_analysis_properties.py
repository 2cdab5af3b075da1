"""Property tests: the analysis stays true on messy traces. Hypothesis builds small runs whose true
story is known (tests/messy_trace.py) and writes them the way real traces look: rows written twice,
nulls in every nullable column, workers with no rows, Unicode and quotes everywhere, rows out of
order across files, older schema files, missing tables. Whatever the mess, the answers must agree
with the story and with each other (merges by role add up to the merged PRs, cost totals to the
usage rows, every worker appears once). Sized to run in well under a minute."""

from __future__ import annotations

import random
import tempfile
from collections import defaultdict
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from agensh_ray.analysis.views import connect, query_names, run_query
from tests.messy_trace import PRICES, MessyRun, runs

CHECKS = settings(max_examples=30, deadline=None, derandomize=True, print_blob=True,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
"""30 runs, each written, opened and asked every question once (about 1.5 s each on a quiet 2-core box)."""


def answers(r: MessyRun) -> dict[str, list[dict]]:
    with tempfile.TemporaryDirectory(prefix="agensh-messy-") as tmp:
        run = Path(tmp) / "messy"
        r.write(run, random.Random(r.seed))
        con = connect(run)
        out = {}
        for q in query_names():
            cols, rows = run_query(con, q)
            out[q] = [dict(zip(cols, row)) for row in rows]
        out["_events"] = [{"forge": con.execute("SELECT count(*) FROM forge").fetchone()[0],
                           "forge_rows": con.execute("SELECT count(*) FROM forge_rows").fetchone()[0]}]
        con.close()
    return out


@CHECKS
@given(runs())
def test_the_answers_are_true_whatever_the_mess(r: MessyRun):
    a = answers(r)
    workers_and_merges_add_up(r, a)
    cost_totals_are_the_usage_rows(r, a)
    claims_diffs_and_scores_are_true(r, a)


def workers_and_merges_add_up(r: MessyRun, a: dict) -> None:
    roles = {w["worker_id"]: w for w in a["roles"]}
    # every worker of the run exactly once, whether it did anything or not
    assert sorted(w["worker_id"] for w in a["roles"]) == sorted(r.workers)
    assert sorted(w["worker_id"] for w in a["idle"]) == sorted(r.workers)
    assert a["run"][0]["workers"] == len(r.workers) == a["role_thresholds"][0]["workers"]
    # one row per event, however often written
    assert a["_events"][0]["forge"] == len(r.rows["forge"]) <= a["_events"][0]["forge_rows"]
    # the PR funnel is the story's
    m = a["merges"][0]
    merged = [p for p in r.prs if p.state == "merged"]
    assert (m["opened"], m["merged"]) == (len(r.prs), len(merged))
    assert m["closed_unmerged"] == sum(p.state == "closed" for p in r.prs)
    by_author = sum(1 for p in merged if r.merger(p) is not None and r.merger(p) == r.author(p))
    by_peer = sum(1 for p in merged if None not in (r.merger(p), r.author(p)) and r.merger(p) != r.author(p))
    assert (m["merged_by_author"], m["merged_by_peer"]) == (by_author, by_peer)
    assert m["merged_by_author"] + m["merged_by_peer"] + m["merged_unattributed"] == m["merged"]
    # merges by role add up to the merged PRs (the run's workers do every merge that has an actor)
    own = sum(w["merged_own"] for w in roles.values())
    peer = sum(w["merged_for_others"] for w in roles.values())
    assert (own, peer) == (by_author, by_peer)
    assert own + peer + m["merged_unattributed"] == m["merged"]
    assert a["role_thresholds"][0]["peer_merges"] == peer
    # per worker: distinct PRs, judged by the real author
    authored, reviewed = defaultdict(int), defaultdict(set)
    for p in r.prs:
        if r.author(p) is not None:
            authored[r.author(p)] += 1
        for reviewer, _ in p.reviews:
            if reviewer is not None and reviewer != r.author(p):
                reviewed[reviewer].add(p.number)
    for w, row in roles.items():
        assert row["prs_authored"] == authored[w], w
        assert row["reviews_given"] == len(reviewed[w]), w
        assert row["role"] in {"integrator", "reviewer", "builder", "scout", "idle"}
        did_nothing = not any(row[k] for k in ("prs_authored", "merged_for_others", "reviews_given", "board_entries",
                                               "dms_sent", "channel_posts"))
        assert (row["role"] == "idle") == did_nothing, row
    # DMs: one per event; the workers without any
    dms = [x for x in r.messages if x[1] == "dm"]
    touched = {x[0] for x in dms} | {x[2] for x in dms}
    assert a["messages"][0]["dms"] == len(dms)
    assert a["messages"][0]["workers_without_dm"] == len(set(r.workers) - touched)


def cost_totals_are_the_usage_rows(r: MessyRun, a: dict) -> None:
    cost = a["cost"]
    run = next(c for c in cost if c["level"] == "run")
    assert run["input_tokens"] == sum(u[1] for u in r.usage)
    assert run["output_tokens"] == sum(u[2] for u in r.usage)
    priced = r.configured is not None and r.harness in PRICES  # no config.json: no harness to price by
    if priced:
        pin, pout = PRICES[r.harness]
        want = sum(u[1] * pin + u[2] * pout for u in r.usage) / 1e6
    else:
        want = sum(u[3] for u in r.usage)
    assert run["cost_usd"] == pytest.approx(want, rel=1e-9, abs=1e-9)
    assert run["cost_basis"] == ("none" if not r.usage else "price table" if priced else "agent-reported")
    for level in ("role", "worker"):
        rows = [c for c in cost if c["level"] == level]
        assert sum(c["cost_usd"] for c in rows) == pytest.approx(run["cost_usd"], rel=1e-9, abs=1e-9)
        assert sum(c["input_tokens"] for c in rows) == run["input_tokens"]
        assert sum(c["workers"] for c in rows) == len(r.workers)
    workers = [c["worker_id"] for c in cost if c["level"] == "worker" and c["role"] != "unattributed"]
    assert sorted(workers) == sorted(r.workers)
    assert run["merged_prs"] == sum(p.state == "merged" for p in r.prs)
    if run["merged_prs"]:  # a cost per merged PR only where a cost is known
        assert (run["cost_per_merged_pr"] is None) == (run["cost_basis"] == "none")
        if run["cost_per_merged_pr"] is not None:
            assert run["cost_per_merged_pr"] == pytest.approx(run["cost_usd"] / run["merged_prs"], rel=1e-9, abs=1e-12)


def claims_diffs_and_scores_are_true(r: MessyRun, a: dict) -> None:
    # claims collide on a shared path (whatever the script and punctuation), between two known workers
    want = []
    for i, (w, path) in enumerate(r.claims):
        earlier = [j for j, (v, q) in enumerate(r.claims[:i]) if q == path and None not in (v, w) and v != w]
        if earlier:
            want.append((i + 1, max(earlier) + 1, path))
    assert [(c["seq"], c["earlier_seq"], c["shared"]) for c in a["claims"]] == want
    # hotspots: each PR's latest snapshot once, lines as its blocks say
    added, removed = defaultdict(int), defaultdict(int)
    for p in r.prs:
        if p.blocks:
            snap = max(p.blocks, key=lambda k: next(x.ts for x in r.rows["pr_changes"]
                                                    if x.pr == p.number and x.snapshot == k))
            for path, _, _, ol, _, nl, _ in p.blocks[snap]:
                added[path] += nl or 0
                removed[path] += ol or 0
    hot = {h["path"]: h for h in a["hotspots"]}
    for path in set(added) | set(hot):
        assert (hot[path]["lines_added"], hot[path]["lines_removed"]) == (added[path], removed[path]), path
    # duplicated work is between two different, known authors: the PRs' real ones
    truth = {p.number: r.author(p) for p in r.prs}
    for d in a["duplicated_work"]:
        assert d["author_a"] == truth[d["pr_a"]] and d["author_b"] == truth[d["pr_b"]]
        assert None not in (d["author_a"], d["author_b"]) and d["author_a"] != d["author_b"]
    # milestones: reached when the best score reaches them, in order
    best = max(r.scores, default=None)
    times = []
    for m in a["score_milestones"]:
        reached = best is not None and best / 20 >= m["milestone"] - 1e-9
        assert (m["time_to_s"] is not None) == reached, m
        if reached:
            times.append(m["time_to_s"])
    assert times == sorted(times)
    assert a["final_score"][0]["checkpoints"] == len(r.scores)
