"""The nine defects of issue 15, one planted edge case each: a row written twice, a null author, a
null worker, a worker that never started, a non-ASCII path, absolute role thresholds, fixed
milestones. Each test builds a tiny run folder with the trace row models and checks the answer a
researcher would publish. Every one of them failed on the analysis as it was before the fix."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from agensh_ray.analysis.views import connect, run_query
from agensh_ray.trace import BoardRow, ForgeRow, LifecycleRow, PrChangeRow, ScoreRow, UsageRow
from tests.fixtures.make_runs import t, write


def make_run(tmp_path: Path, workers: int, harness: str = "claude", name: str = "run") -> Path:
    run = tmp_path / name
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"workers": workers, "harness": harness, "time_scale": 1.0,
                                                 "minutes": 60}))
    return run


def answer(run: Path, query: str) -> list[dict]:
    cols, rows = run_query(connect(run), query)
    return [dict(zip(cols, r)) for r in rows]


def by_worker(run: Path) -> dict[str, dict]:
    return {w["worker_id"]: w for w in answer(run, "roles")}


def F(seq: int, s: float, worker: str | None, kind: str, pr: int | None, author: str | None, **kw) -> ForgeRow:
    return ForgeRow(ts=t(s), worker_id=worker, event_id=f"forge:{seq}", seq=seq, kind=kind, pr=pr, pr_author=author, **kw)


def started(*workers: str) -> list[LifecycleRow]:
    return [LifecycleRow(ts=t(i), worker_id=w, event="started") for i, w in enumerate(workers)]


# 1. views.sql `workers`: rows counted instead of distinct PRs, the row's pr_author trusted.

def test_1_a_merge_row_written_twice_counts_once(tmp_path):
    run = make_run(tmp_path, 2)
    write(run, "lifecycle", started("w001", "w002"))
    rows = [F(1, 10, "w001", "pr_opened", 1, "w001"), F(2, 20, "w002", "pr_merged", 1, "w001")]
    write(run, "forge", rows, "forge-actor")
    write(run, "forge", rows[1:], "forge-reconciler")  # the same merge event, written by a second writer
    w = by_worker(run)
    assert w["w002"]["merged_for_others"] == 1
    m = answer(run, "merges")[0]
    assert (m["merged"], m["merged_by_peer"]) == (1, 1)


def test_1_a_second_merge_event_of_a_merged_pr_is_not_another_peer_merge(tmp_path):
    run = make_run(tmp_path, 3)
    write(run, "lifecycle", started("w001", "w002", "w003"))
    write(run, "forge", [F(1, 10, "w001", "pr_opened", 1, "w001"), F(2, 20, "w001", "pr_merged", 1, "w001"),
                         F(3, 30, "w003", "pr_merged", 1, "w001")])  # a late, second merge event
    w = by_worker(run)
    assert (w["w001"]["merged_own"], w["w003"]["merged_for_others"]) == (1, 0)


def test_1_a_self_merge_with_a_null_pr_author_is_an_own_merge(tmp_path):
    """The forge actor writes pr_author None when its author lookup fails; the PR's author is
    whoever opened it (view prs), and roles and merges must say the same."""
    run = make_run(tmp_path, 2)
    write(run, "lifecycle", started("w001", "w002"))
    write(run, "forge", [F(1, 10, "w001", "pr_opened", 1, "w001"), F(2, 20, "w001", "pr_merged", 1, None),
                         F(3, 30, "w002", "pr_opened", 2, None), F(4, 40, "w002", "pr_merged", 2, None),
                         F(5, 50, "w001", "pr_opened", 3, "w001"), F(6, 60, "w002", "pr_reviewed", 3, None,
                                                                       verdict="approve", detail="approve")])
    w = by_worker(run)
    assert (w["w001"]["merged_own"], w["w001"]["merged_for_others"]) == (1, 0)
    assert (w["w002"]["merged_own"], w["w002"]["merged_for_others"]) == (1, 0)
    assert (w["w001"]["reviews_given"], w["w002"]["reviews_given"]) == (0, 1)
    m = answer(run, "merges")[0]
    assert m["merged_by_author"] == sum(x["merged_own"] for x in w.values()) == 2


# 2. Workers come from the run's configuration, not from the rows.

def test_2_a_configured_worker_that_never_started_is_counted_everywhere(tmp_path):
    run = make_run(tmp_path, 4)
    write(run, "lifecycle", started("w001", "w002", "w003"))  # w004 never started
    write(run, "usage", [UsageRow(ts=t(5), worker_id="w001", turn=1, input_tokens=1_000_000, output_tokens=0)])
    roles = by_worker(run)
    assert sorted(roles) == ["w001", "w002", "w003", "w004"]
    assert roles["w004"]["role"] == "idle"
    assert answer(run, "run")[0]["workers"] == 4
    cost = answer(run, "cost")
    assert next(c for c in cost if c["level"] == "run")["workers"] == 4
    assert answer(run, "messages")[0]["workers_without_dm"] == 4
    assert [w["worker_id"] for w in answer(run, "idle")] == ["w001", "w002", "w003", "w004"]


# 3. cost.sql dropped usage rows with a null worker_id.

def test_3_usage_without_a_worker_still_costs(tmp_path):
    run = make_run(tmp_path, 2)
    write(run, "lifecycle", started("w001", "w002"))
    write(run, "usage", [UsageRow(ts=t(5), worker_id="w001", turn=1, input_tokens=1_000_000, output_tokens=0),
                         UsageRow(ts=t(6), worker_id=None, turn=1, input_tokens=1_000_000, output_tokens=100_000)])
    run_row = next(c for c in answer(run, "cost") if c["level"] == "run")
    assert run_row["input_tokens"] == 2_000_000
    assert run_row["cost_usd"] == pytest.approx(3.0 + 3.0 + 1.5)  # claude: $3 in, $15 out per million


# 4. claims.sql: ASCII-only paths broke non-ASCII names into fragments.

def test_4_non_ascii_paths_do_not_collide_through_fragments(tmp_path):
    run = make_run(tmp_path, 3)
    write(run, "board", [
        BoardRow(ts=t(10), worker_id="w001", event_id="board:1", seq=1, type="CLAIM", text="claim docs/naïve.md"),
        BoardRow(ts=t(20), worker_id="w002", event_id="board:2", seq=2, type="CLAIM", text="claim docs/naïf.md"),
        BoardRow(ts=t(30), worker_id="w003", event_id="board:3", seq=3, type="CLAIM", text="Claim DOCS/NAÏVE.md"),
    ])
    claims = answer(run, "claims")
    assert [(c["seq"], c["earlier_seq"], c["shared"]) for c in claims] == [(3, 1, "docs/naïve.md")]


# 5. duplicated_work.sql compared authors through pr_changes.pr_author.

def change(seq, s, pr, author, path, status="added", o0=0, ol=0, n0=1, nl=10, fn="") -> PrChangeRow:
    return PrChangeRow(ts=t(s), worker_id=author, event_id=f"forge:{seq}", pr=pr, pr_author=author,
                       snapshot="pr_opened", path=path, status=status, old_start=o0, old_lines=ol, new_start=n0,
                       new_lines=nl, function=fn)


def test_5_one_workers_two_prs_are_not_duplicated_work(tmp_path):
    run = make_run(tmp_path, 2)
    write(run, "forge", [F(1, 10, "w001", "pr_opened", 1, "w001"), F(2, 20, "w001", "pr_opened", 2, None)])
    c2 = change(2, 20, 2, "w001", "docs/x.md")
    c2.pr_author = None  # the author lookup failed when the snapshot was taken
    write(run, "pr_changes", [change(1, 10, 1, "w001", "docs/x.md"), c2])
    assert answer(run, "duplicated_work") == []


# 6. hotspots.sql / duplicated_work.sql: a snapshot written twice doubled the line counts.

def test_6_a_snapshot_written_twice_counts_once(tmp_path):
    run = make_run(tmp_path, 2)
    write(run, "forge", [F(1, 10, "w001", "pr_opened", 1, "w001"), F(2, 20, "w002", "pr_opened", 2, "w002")])
    a = change(1, 10, 1, "w001", "core.py", "modified", 10, 5, 10, 6, "def f():")
    b = change(2, 20, 2, "w002", "core.py", "modified", 12, 5, 12, 7, "def f():")
    write(run, "pr_changes", [a, b], "forge-actor")
    write(run, "pr_changes", [b], "forge-reconciler")
    hot = {h["path"]: h for h in answer(run, "hotspots")}
    assert (hot["core.py"]["lines_added"], hot["core.py"]["lines_removed"]) == (13, 10)
    dup = answer(run, "duplicated_work")
    assert [(d["pr_a"], d["pr_b"], d["overlap_lines"]) for d in dup] == [(1, 2, 3)]


# 7. report.py counted (pair, file) rows as "PR pairs".

def test_7_the_report_counts_pr_pairs_not_files(tmp_path):
    from agensh_ray.analysis import report

    run = make_run(tmp_path, 2)
    write(run, "forge", [F(1, 10, "w001", "pr_opened", 1, "w001"), F(2, 20, "w002", "pr_opened", 2, "w002")])
    write(run, "pr_changes", [change(1, 10, 1, "w001", "a.md"), change(1, 10, 1, "w001", "b.md"),
                              change(2, 20, 2, "w002", "a.md"), change(2, 20, 2, "w002", "b.md")])
    assert len(answer(run, "duplicated_work")) == 2  # one pair, two files
    res = report.write_report([run], tmp_path / "out")
    md = Path(res["markdown"]).read_text()
    m = re.search(r"([\d,]+) PR pairs? duplicating work", md)
    assert m and m.group(1) == "1", md


# 8. roles.sql: absolute thresholds.

def test_8_role_thresholds_are_relative_to_the_run(tmp_path):
    """10 workers: w001 merges 12 peers' PRs, w002 two; w003 reviews 15 PRs, w004 two. Labelling
    w002 an integrator next to w001 (or w004 a reviewer next to w003) says nothing."""
    run = make_run(tmp_path, 10)
    ids = [f"w{i:03d}" for i in range(1, 11)]
    write(run, "lifecycle", started(*ids))
    rows, seq = [], 0

    def ev(worker, kind, pr, author, **kw):
        nonlocal seq
        seq += 1
        rows.append(F(seq, seq, worker, kind, pr, author, **kw))

    for pr in range(1, 15):
        author = ids[4 + pr % 6]  # w005..w010 author every PR
        ev(author, "pr_opened", pr, author)
        ev("w001" if pr <= 12 else "w002", "pr_merged", pr, author)
    for pr in range(1, 16):
        author = ids[4 + pr % 6]
        if pr == 15:
            ev(author, "pr_opened", pr, author)
        ev("w003", "pr_reviewed", pr, author, verdict="approve", detail="approve")
    for pr in (1, 2):
        ev("w004", "pr_reviewed", pr, ids[4 + pr % 6], verdict="comment", detail="comment")
    write(run, "forge", rows)
    roles = by_worker(run)
    assert roles["w001"]["role"] == "integrator" and roles["w003"]["role"] == "reviewer"
    assert "integrator" not in roles["w002"]["labels"], roles["w002"]
    assert "reviewer" not in roles["w004"]["labels"], roles["w004"]


# 9. Milestones were fixed at 30% and 50%.

def milestones(run: Path) -> dict[int, float | None]:
    got = answer(run, "score_milestones")
    if got and "milestone" in got[0]:
        return {round(100 * m["milestone"]): m["time_to_s"] for m in got}
    return {}


def test_9_milestones_default_to_25_50_75_90_percent(tmp_path):
    run = make_run(tmp_path, 1)
    write(run, "lifecycle", started("w001"))
    write(run, "scores", [ScoreRow(ts=t(s), checkpoint="periodic", passed=p, total=20, pass_rate=p / 20)
                          for s, p in [(0, 0), (100, 5), (200, 9), (300, 15), (400, 17), (500, 18)]])
    assert milestones(run) == {25: 100, 50: 300, 75: 300, 90: 500}


def test_9_milestones_are_a_parameter(tmp_path):
    run = make_run(tmp_path, 1)
    write(run, "lifecycle", started("w001"))
    write(run, "scores", [ScoreRow(ts=t(s), checkpoint="periodic", passed=p, total=10, pass_rate=p / 10)
                          for s, p in [(0, 0), (100, 1), (200, 6)]])
    cols, rows = run_query(connect(run, milestones=[0.1, 0.6, 0.95]), "score_milestones")
    got = {round(100 * r[cols.index("milestone")]): r[cols.index("time_to_s")] for r in rows}
    assert got == {10: 100, 60: 200, 95: None}
