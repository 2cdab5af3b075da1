"""Organizational efficiency (issue 30): analysis/efficiency.sql and pr_work.sql give the answers planted in
small synthetic runs of one task and seed at 1, 2 and 4 workers, agensh_ray.analysis.efficiency reads the
run's clock from summary.json when it has one, and the speedup and efficiency across runs are T_1 / T_N and
S(N) / N. (The golden answers on tests/fixtures are in test_analysis.py.)

The planted organization: F = 8 features; every worker builds F / N of them one after another, each a CLAIM,
a turn of `BUILD` schedule seconds that opens the PR 10 s before its end and merges it at its end, after `GAP`
idle seconds. So the k-th merge of a worker is at k x (GAP + BUILD), main's score is the merged share, and
up to the last merge a worker is idle GAP / (GAP + BUILD) of the time.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from agensh_ray.analysis import efficiency
from agensh_ray.analysis.efficiency import run_efficiency, scaling
from agensh_ray.analysis.report import write_report
from agensh_ray.config import worker_ids
from agensh_ray.trace import (
    SCHEMAS,
    BoardRow,
    ForgeRow,
    LifecycleRow,
    MessageRow,
    PrChangeRow,
    ScoreRow,
    ToolCallRow,
    TurnRow,
)

T0 = 1_767_225_600_000_000  # µs
F, BUILD, GAP = 8, 540.0, 60.0
STRAGGLE = 600.0  # the 4-worker run: w004's last feature takes this much longer


def write(run: Path, table: str, rows: list) -> None:
    folder = run / "trace" / table
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist([dict(r.model_dump(), run_id=run.name) for r in rows], schema=SCHEMAS[table]),
                   folder / "t-00000.parquet")


def org_run(root: Path, workers: int, scale: float = 1.0, extras: bool = False, clock: dict | None = None) -> Path:
    """The planted organization (module docstring) at `workers`, times in schedule seconds, written at `scale`.
    extras (the 4-worker run): a straggler, a duplicate PR, two merge conflicts, four messages, timed tool calls."""
    run = root / f"w{workers}"
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"workers": workers, "harness": "sim", "time_scale": scale,
                                                 "task": "/tmp/tasks/genkit-f8", "seed": 3}))
    if clock is not None:
        (run / "summary.json").write_text(json.dumps({"run_id": run.name, "clock": clock}))
    t = lambda s: T0 + int(s / scale * 1e6)  # noqa: E731
    ids = worker_ids(workers)
    forge, board, turns, changes, merges = [], [], [], [], []
    seq = iter(range(1, 10_000))
    pr = 1
    for i, w in enumerate(ids):
        at = 0.0
        for j in range(F // workers):
            k = i * (F // workers) + j  # feature f<k>
            build = BUILD + (STRAGGLE if extras and w == ids[-1] and j == F // workers - 1 else 0)
            start, end = at + GAP, at + GAP + build
            board.append(BoardRow(ts=t(start), worker_id=w, seq=next(seq), type="CLAIM", text=f"claim f{k}: genkit"))
            turns += [TurnRow(ts=t(start), worker_id=w, turn=j + 1, phase="start", trigger="events"),
                      TurnRow(ts=t(end), worker_id=w, turn=j + 1, phase="end", trigger="events")]
            s = next(seq)
            forge += [ForgeRow(ts=t(end - 10), worker_id=w, seq=s, event_id=f"forge:{s}", kind="pr_opened", pr=pr),
                      ForgeRow(ts=t(end), worker_id=w, seq=next(seq), kind="pr_merged", pr=pr)]
            changes.append(PrChangeRow(ts=t(end - 10), worker_id=w, event_id=f"forge:{s}", pr=pr, snapshot="pr_opened",
                                       path=f"genkit/commands/f{k}.py", status="added", old_start=0, old_lines=0,
                                       new_start=1, new_lines=30))
            merges.append(end)
            pr, at = pr + 1, end
    end_of_run = max(merges) + 600
    if extras:  # w003 builds f0 again after its own last merge (1,200 s): claim 1,210, opened 1,300, closed 1,400
        board.append(BoardRow(ts=t(1210), worker_id="w003", seq=next(seq), type="CLAIM", text="claim f0: genkit"))
        s = next(seq)
        forge += [ForgeRow(ts=t(1300), worker_id="w003", seq=s, event_id=f"forge:{s}", kind="pr_opened", pr=100),
                  ForgeRow(ts=t(1400), worker_id="w003", seq=next(seq), kind="pr_closed", pr=100)]
        changes.append(PrChangeRow(ts=t(1300), worker_id="w003", event_id=f"forge:{s}", pr=100, snapshot="pr_opened",
                                   path="genkit/commands/f0.py", status="added", old_start=0, old_lines=0,
                                   new_start=1, new_lines=28))
        forge += [ForgeRow(ts=t(595), worker_id="w001", seq=next(seq), kind="merge_conflict", pr=1),
                  ForgeRow(ts=t(596), worker_id="w002", seq=next(seq), kind="merge_conflict", pr=3)]
        write(run, "messages", [MessageRow(ts=t(100 + m), worker_id="w001", seq=m, kind="dm", sender="w001",
                                           recipient="w002", text="hi") for m in range(3)]
              + [MessageRow(ts=t(200), worker_id="w002", seq=4, kind="channel", sender="w002", text="all")])
        calls = [("agensh/board_read", "agent", ms) for ms in (10.0, 20.0, 30.0)]
        calls += [("git fetch -q origin", "agent", 1000.0)] * 5  # the agent's own tools: not ours, not counted
        calls += [("board_read", "mcp", ms) for ms in (1.0, 2.0, 3.0)]
        write(run, "tool_calls", [ToolCallRow(ts=t(300), worker_id="w001", tool=n, source=src, duration_ms=ms)
                                  for n, src, ms in calls])
    for r in forge:
        r.event_id = r.event_id or f"forge:{r.seq}"
    for r in board:
        r.event_id = f"board:{r.seq}"
    write(run, "forge", forge)
    write(run, "board", board)
    write(run, "turns", turns)
    write(run, "pr_changes", changes)
    write(run, "lifecycle", [LifecycleRow(ts=t(0), worker_id=w, event="started") for w in ids]
          + [LifecycleRow(ts=t(end_of_run), worker_id=w, event="stopped") for w in ids])
    merged = sorted(merges)
    write(run, "scores", [ScoreRow(ts=t(m + 5), checkpoint="periodic", passed=n, total=F, pass_rate=n / F, schedule_s=m)
                          for n, m in enumerate(merged, 1)])
    return run


CLOCK = {"time_scale": 2.0, "agent_tool_median_ms": 3.0, "server_tool_median_ms": 2.0, "tool_latency_ratio": 1.5,
         "cpu_wait_share": 0.1, "machine_bound": False, "why": "keeps up: ..."}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("org")
    return {1: org_run(root, 1), 2: org_run(root, 2, scale=2.0, clock=CLOCK), 4: org_run(root, 4, scale=3.0, extras=True)}


@pytest.fixture(scope="module")
def effs(runs):
    return {n: run_efficiency(d) for n, d in runs.items()}


def close(a, b) -> bool:
    return a is not None and math.isclose(a, b, rel_tol=1e-6)  # timestamps are whole µs: x3 rounds


def test_the_planted_answers_of_a_plain_run(effs):
    e = effs[1]
    span = F * (GAP + BUILD)  # 4,800 s: one worker builds all 8
    assert (e["workers"], e["merged_prs"], e["features_merged"]) == (1, 8, 8)
    assert close(e["last_merge_s"], span) and close(e["time_to_100_s"], span)
    assert close(e["time_to_50_s"], 4 * (GAP + BUILD)) and close(e["time_to_90_s"], span)  # 90% needs the 8th
    assert close(e["features_per_worker_hour"], 3600 / (GAP + BUILD))
    assert close(e["idle_share"], GAP / (GAP + BUILD))
    assert e["duplicate_work_share"] == 0 and e["merge_conflicts"] == 0 and e["conflicts_per_merged_pr"] == 0
    assert e["messages_per_feature"] == 0
    assert (e["task"], e["seed"]) == ("genkit-f8", 3)
    assert e["tool_latency_ratio"] is None and e["machine_bound"] is None and e["lag_source"] == "unknown"


def test_the_planted_answers_of_a_run_with_a_straggler_a_duplicate_and_conflicts(effs):
    e = effs[4]  # written at x3: schedule seconds come back as planted
    last = 2 * (GAP + BUILD) + STRAGGLE  # 1,800 s: w004's second feature
    assert (e["workers"], e["merged_prs"], e["features_merged"]) == (4, 8, 8)
    assert close(e["last_merge_s"], last) and close(e["time_to_100_s"], last)
    assert close(e["time_to_50_s"], GAP + BUILD)  # four merges at 600 s
    assert close(e["worker_hours"], 4 * last / 3600)
    assert close(e["features_per_worker_hour"], F / (4 * last / 3600))
    busy = 7 * BUILD + BUILD + STRAGGLE
    assert close(e["idle_share"], (4 * last - busy) / (4 * last))
    # PR work: each feature's claim -> merge; the duplicate (w003's f0 again, a peer's merged feature) 1,210 -> 1,400
    dup = 1400 - 1210
    assert close(e["duplicate_work_hours"], dup / 3600)
    assert close(e["duplicate_work_share"], dup / (busy + dup))
    assert close(e["conflicts_per_merged_pr"], 2 / 8)
    assert close(e["messages_per_feature"], 4 / 8)
    # the lag from the trace: our tools only (agensh/board_read at the agent, board_read at the server)
    assert (e["agent_tool_median_ms"], e["server_tool_median_ms"]) == (20.0, 2.0)
    assert close(e["tool_latency_ratio"], 10.0) and e["lag_source"] == "trace tool_calls"
    assert e["machine_bound"] is None


def test_worker_time_is_idle_sql_s_across_a_host_killed_while_hung(tmp_path):
    """w001's host hangs and is killed at 1,000 s mid-turn (an actor_killed row: no actor_died follows a kill of a
    hung actor); the worker starts again at 3,000 s in a new life whose turn 1 runs 3,100-3,200 s. Its up time is
    0-1,000 and 3,000 s on, its busy time 100-1,000 (the killed turn ends with its host) and 3,100-3,200: the same
    in efficiency.sql (until the last merge, 7,900 s) as in idle.sql (until the schedule's end, 8,000 s)."""
    from agensh_ray.analysis.views import connect, run_query

    run = tmp_path / "hung"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"workers": 1, "harness": "sim", "time_scale": 1.0}))
    t = lambda s: T0 + int(s * 1e6)  # noqa: E731
    write(run, "lifecycle", [LifecycleRow(ts=t(0), worker_id="w001", event="started", host="h000"),
                             LifecycleRow(ts=t(990), event="actor_hung", host="host h000"),
                             LifecycleRow(ts=t(1000), event="actor_killed", host="host h000"),
                             LifecycleRow(ts=t(3000), worker_id="w001", event="started", host="h000"),
                             LifecycleRow(ts=t(8000), worker_id="w001", event="stopped", host="h000")])
    write(run, "turns", [TurnRow(ts=t(100), worker_id="w001", turn=1, phase="start", trigger="first",
                                 event_id="turn:w001:aaa:1:start"),
                         TurnRow(ts=t(3100), worker_id="w001", turn=1, phase="start", trigger="first",
                                 event_id="turn:w001:bbb:1:start"),
                         TurnRow(ts=t(3200), worker_id="w001", turn=1, phase="end", trigger="first",
                                 event_id="turn:w001:bbb:1:end")])
    write(run, "forge", [ForgeRow(ts=t(7800), worker_id="w001", seq=1, event_id="forge:1", kind="pr_opened", pr=1),
                         ForgeRow(ts=t(7900), worker_id="w001", seq=2, event_id="forge:2", kind="pr_merged", pr=1)])
    e = run_efficiency(run)
    up, busy = 1000 + (7900 - 3000), 900 + 100
    assert close(e["worker_hours"], up / 3600) and close(e["idle_share"], (up - busy) / up)
    cols, (row,) = run_query(connect(run), "idle")
    idle = dict(zip(cols, row))
    assert (idle["up_s"], idle["busy_s"], idle["idle_s"]) == pytest.approx((6000.0, 1000.0, 5000.0))


def test_pr_work_names_the_duplicate(runs):
    from agensh_ray.analysis.views import connect, run_query

    cols, rows = run_query(connect(runs[4]), "pr_work")
    by_pr = {r[0]: dict(zip(cols, r)) for r in rows}
    assert by_pr[100]["duplicate_of"] == 1 and by_pr[100]["state"] == "closed"
    assert close(by_pr[100]["work_s"], 190.0) and close(by_pr[100]["work_start_s"], 1210.0)
    assert all(r["duplicate_of"] is None for p, r in by_pr.items() if p != 100)


def test_the_clock_in_summary_json_is_the_runs_own_lag(effs):
    e = effs[2]
    assert e["lag_source"] == "summary.json clock"
    assert (e["tool_latency_ratio"], e["machine_bound"], e["cpu_wait_share"]) == (1.5, False, 0.1)
    assert close(e["time_to_100_s"], F / 2 * (GAP + BUILD))  # written at x2


def test_speedup_and_efficiency_across_runs(effs):
    rows = {r["workers"]: r for r in scaling(list(effs.values()))}
    t1 = F * (GAP + BUILD)
    assert rows[1]["speedup_100"] == 1.0 and rows[1]["efficiency_100"] == 1.0
    assert close(rows[2]["speedup_100"], 2.0) and close(rows[2]["efficiency_100"], 1.0)
    t4 = 2 * (GAP + BUILD) + STRAGGLE
    assert close(rows[4]["speedup_90"], t1 / t4) and close(rows[4]["efficiency_90"], t1 / t4 / 4)
    assert close(rows[4]["speedup_50"], 4.0) and close(rows[4]["efficiency_50"], 1.0)


def test_speedup_math_by_task_and_seed():
    def run(task, seed, n, t50, t90, t100):
        return {"run_id": f"{task}-{seed}-{n}", "task": task, "seed": seed, "workers": n,
                "time_to_50_s": t50, "time_to_90_s": t90, "time_to_100_s": t100}

    rows = scaling([
        run("a", 0, 1, 1000, 3000, 4000), run("a", 0, 1, 1200, 3000, 4000),  # two 1-worker runs: T_1 their mean
        run("a", 0, 8, 100, 600, None),  # never reached 100%
        run("a", 1, 8, 100, 600, 700),  # seed 1 has no 1-worker run
        run("b", 0, 8, 100, 600, 700),  # another task
    ])
    a8 = next(r for r in rows if (r["task"], r["seed"], r["workers"]) == ("a", 0, 8))
    assert (a8["t1_50_s"], a8["speedup_50"], a8["efficiency_50"]) == (1100, 11.0, 11.0 / 8)
    assert (a8["speedup_90"], a8["efficiency_90"]) == (5.0, 5.0 / 8)
    assert a8["speedup_100"] is None and a8["efficiency_100"] is None
    for r in rows:
        if r["task"] == "b" or r["seed"] == 1:
            assert r["speedup_90"] is None and r["efficiency_90"] is None
    assert efficiency.curve(rows, "speedup_90") == {"a": {1: 1.0, 8: 5.0}, "b": {8: None}}


def test_the_command_draws_the_curve_and_the_report_shows_it(runs, tmp_path, capsys):
    efficiency.main([str(d) for d in runs.values()] + ["--out", str(tmp_path / "curve")])
    printed = capsys.readouterr().out
    assert "speedup_90" in printed and "genkit-f8" in printed
    assert (tmp_path / "curve" / "scaling.png").read_bytes()[:4] == b"\x89PNG"
    assert "speedup_100" in (tmp_path / "curve" / "scaling.csv").read_text().splitlines()[0]
    write_report([runs[1], runs[4]], tmp_path / "report")
    md = (tmp_path / "report" / "report.md").read_text()
    assert "### Organizational efficiency" in md and "img/scaling.png" in md
    assert "| genkit-f8 | 3 | 4 |" in md


def test_org_scale_from_runs_ends_with_issue_30s_figures(runs):
    """bench/org_scale.py --from-runs over the planted runs: its last line is one JSON object with the acceptance's
    keys, the planted figures in it, and the goals judged (null where the runs cannot say)."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, str(root / "bench" / "org_scale.py"), "--from-runs", *map(str, runs.values())],
                          capture_output=True, text=True, timeout=240, cwd=root)
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["workers"] == [1, 2, 4] and res["max_workers"] == 4
    t4 = 2 * (GAP + BUILD) + STRAGGLE
    assert close(res["speedup_90"]["4"], F * (GAP + BUILD) / t4) and close(res["efficiency_90"]["2"], 1.0)
    assert close(res["time_to_90_s"]["4"], t4)
    assert close(res["conflicts_per_merged_pr"]["4"], 0.25) and res["duplicate_work_share"]["1"] == 0
    assert close(res["agent_vs_server_tool_latency"], 10.0)  # the largest N's, from its trace
    assert res["machine_bound"] == {"w1": None, "w2": False, "w4": None}
    goals = res["goals"]
    assert goals["efficiency_90 >= 0.7 up to 64 workers"] is False  # 0.667 at 4 workers
    assert goals["efficiency_90 >= 0.5 at 256 workers"] is None and goals["agent_vs_server_tool_latency <= 2"] is False
    assert goals["conflicts_per_merged_pr < 1.5"] is True and goals["idle_share < 0.2"] is False


def test_org_scale_time_scale_rule_and_cpu_per_step(tmp_path):
    """The per-N time scale: N workers' steps within the CPU budget, never above the cap; CPU per step from the sim
    agents' last `sim stats` line per process."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("org_scale", Path(__file__).resolve().parents[1] / "bench" / "org_scale.py")
    org = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(org)
    assert org.choose_time_scale(1, 45, 0.45, 2, 0.5, 30) == 30  # one worker: the cap
    slow = org.choose_time_scale(1024, 45, 0.45, 2, 0.5, 30)
    assert slow < 1 and math.isclose(slow * 1024 * 0.45 / (45 * org.STEP_MEAN), 2 * 0.5, rel_tol=1e-2)
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "w001.agent.stderr").write_text(
        "sim stats: pid 7 steps 10 cpu_self 3.000 cpu_children 1.000 cpu_start 1.000\n"
        "sim stats: pid 7 steps 20 cpu_self 5.000 cpu_children 2.000 cpu_start 1.000\n")  # cumulative: the last counts
    (logs / "w002.agent.stderr").write_text("sim stats: pid 9 steps 20 cpu_self 2.500 cpu_children 0.500 cpu_start 1.000\n")
    assert math.isclose(org.cpu_per_step(tmp_path), (6.0 + 2.0) / 40)
    assert org.cpu_per_step(tmp_path / "none") is None
