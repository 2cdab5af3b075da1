"""Planted answers (issue 31, "analysis truth, round three"): small synthetic run folders with the edge cases
real runs have (a resumed run with a restarted board, host and gateway; prices partly unknown; a demo-like
run at x120 with late claimants who DM and back off; a run with one checkpoint), each answer worked out by
hand in the test, checked in every question file that answers it and in the report."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from agensh_ray.analysis import report
from agensh_ray.analysis.views import connect, run_query
from agensh_ray.trace import BoardRow, LifecycleRow, LlmCallRow, MessageRow, ScoreRow, TurnRow, write_schema_files
from tests.fixtures.make_runs import t, write


def make_run(tmp_path: Path, name: str, **cfg) -> Path:
    run = tmp_path / name
    run.mkdir()
    write_schema_files(run)
    (run / "config.json").write_text(json.dumps({"workers": 2, "harness": "copilot", "time_scale": 1.0,
                                                 "minutes": 60, **cfg}))
    return run


def answer(run: Path, query: str) -> list[dict]:
    cols, rows = run_query(connect(run), query)
    return [dict(zip(cols, r)) for r in rows]


def md_of(run: Path, tmp_path: Path) -> str:
    return Path(report.write_report([run], tmp_path / f"report-{run.name}")["markdown"]).read_text()


# -- prices partly unknown ------------------------------------------------------------------------------------

def call(n: int, s: float, worker: str | None, model: str, tin: int, tout: int, cost: float | None,
         status: str = "ok", retries: int = 0) -> LlmCallRow:
    return LlmCallRow(ts=t(s), worker_id=worker, event_id=f"n1:abc:{n}", gateway="n1", provider="openai", api="chat",
                      model=model, model_used=model, status=status, input_tokens=tin, output_tokens=tout,
                      cost_usd=cost, latency_ms=10.0, retries=retries)


def test_prices_partly_unknown_make_the_cost_unknown_with_its_known_part(tmp_path):
    """Four models; `mystery-1` has no price (4 calls, cost null); a failed call costs 0 (the provider charged
    nothing); a retried call is one call. Known: $0.10 + $0.20 + $0.05 + $0.05 = $0.40 (the issue's run showed
    this as "$0.40, basis gateway")."""
    run = make_run(tmp_path, "prices")
    write(run, "lifecycle", [LifecycleRow(ts=t(0), worker_id=w, event="started") for w in ("w001", "w002")])
    write(run, "llm_calls", [
        call(1, 10, "w001", "gpt-4.1", 1000, 100, 0.10),
        call(2, 20, "w001", "gpt-4.1-mini", 2000, 100, 0.20, retries=2),
        call(3, 30, "w002", "o3", 500, 50, 0.05),
        call(4, 40, "w002", "o3", 500, 50, 0.05),
        call(5, 50, "w002", "o3", 0, 0, 0.0, status="error"),
        *[call(6 + i, 60 + i, "w002" if i else "w001", "mystery-1", 300, 30, None) for i in range(4)],
    ])
    cost = {(c["level"], c["worker_id"]): c for c in answer(run, "cost")}
    r = cost[("run", None)]
    assert r["cost_usd"] is None and r["cost_basis"] == "partial"
    assert r["known_cost_usd"] == pytest.approx(0.40)
    assert (r["calls"], r["unpriced_calls"]) == (9, 4)
    assert r["cost_per_merged_pr"] is None
    w1, w2 = cost[("worker", "w001")], cost[("worker", "w002")]
    assert (w1["cost_usd"], w1["known_cost_usd"], w1["unpriced_calls"]) == (None, pytest.approx(0.30), 1)
    assert (w2["cost_usd"], w2["known_cost_usd"], w2["unpriced_calls"]) == (None, pytest.approx(0.10), 3)
    per_model = {m["model"]: m for m in answer(run, "cost_per_model")}
    assert set(per_model) == {"gpt-4.1", "gpt-4.1-mini", "o3", "mystery-1"}
    assert per_model["mystery-1"]["cost_usd"] is None and per_model["mystery-1"]["unpriced_calls"] == 4
    assert per_model["mystery-1"]["cost_basis"] == "partial" and per_model["mystery-1"]["input_tokens"] == 1200
    assert per_model["o3"]["cost_usd"] == pytest.approx(0.10) and per_model["o3"]["calls"] == 3
    assert per_model["gpt-4.1-mini"]["share_of_known_cost"] == pytest.approx(0.5)
    assert sum(m["known_cost_usd"] for m in per_model.values()) == pytest.approx(0.40)
    md = md_of(run, tmp_path)
    assert "unknown ($0.40 known; 4 of 9 calls have no price)" in md
    assert "$0.40 |" not in md.split("## Run")[0]  # the summary never shows the known part as the cost
    assert "mystery-1" in md and "Cost unknown for prices" in md


# -- the final score ------------------------------------------------------------------------------------------

def test_the_final_score_is_the_final_checkpoints_even_when_a_periodic_one_ends_after_it(tmp_path):
    """A periodic checkpoint still being scored when the run stopped writes its row after the final one's
    (the demo does on a loaded machine): the final score is the final checkpoint's, 100%, not its 40%."""
    run = make_run(tmp_path, "late-periodic")
    write(run, "scores", [
        ScoreRow(ts=t(120), event_id="checkpoint:2", checkpoint="final", passed=10, total=10, pass_rate=1.0,
                 schedule_s=3600),
        ScoreRow(ts=t(130), event_id="checkpoint:1", checkpoint="periodic", passed=4, total=10, pass_rate=0.4,
                 schedule_s=1800),
    ])
    f = answer(run, "final_score")[0]
    assert (f["final_pass_rate"], f["final_passed"], f["checkpoints"]) == (1.0, 10, 2)


# -- a resumed run: a restarted board, host and gateway -------------------------------------------------------

S0 = 100.0  # the schedule starts 100 wall s after the first event (the driver's set-up)


def at(s: float) -> int:
    """A schedule second of the resumed run (time scale 1) as a trace timestamp."""
    return t(S0 + s)


def resumed_run(tmp_path: Path) -> Path:
    """120 schedule minutes at x1, 3 workers. The first driver is killed (SIGKILL: no down rows) and a second
    one resumes at 4,000 s, relaunching every worker on host h000 (w001, w002) and h001 (w003); w003's host
    also died once before (actor_died `host h001` at 1,500 s, restarted, its worker resumed at 1,700 s). The
    board actor restarts at 3,500 s and replays its log (rows written twice); the gateway `n1` is started
    again by the second driver (its counter from 1 again). Deadline at 7,200 s; the workers are stopped at
    7,300 s, the final checkpoint ends at 7,500 s."""
    run = make_run(tmp_path, "resumed", workers=3, minutes=120)
    (run / "driver.json").write_text(json.dumps({"run_id": "resumed", "pid": 1, "hostname": "x", "t0": t(0) / 1e6,
                                                 "start_wall": at(0) / 1e6, "resumes": 1}))
    (run / "summary.json").write_text(json.dumps({"ended": "deadline"}))
    L = LifecycleRow
    driver = [L(ts=t(0), event="actor_placed", host="board"),
              L(ts=at(1500), event="actor_died", host="host h001"), L(ts=at(1600), event="actor_restarted",
                                                                        host="host h001"),
              L(ts=at(3500), event="actor_died", host="board"), L(ts=at(3510), event="actor_restarted", host="board")]
    hosts = []
    for w, h, second in (("w001", "h000", 4010), ("w002", "h000", 4020), ("w003", "h001", 4030)):
        hosts += [L(ts=at(0), worker_id=w, event="started", host=h),
                  L(ts=at(4000), worker_id=w, event="resumed", host=h),
                  L(ts=at(second), worker_id=w, event="started", host=h),
                  L(ts=at(7300), worker_id=w, event="stopped", host=h)]
    hosts += [L(ts=at(1650), worker_id="w003", event="resumed", host="h001"),
              L(ts=at(1700), worker_id="w003", event="started", host="h001")]
    write(run, "lifecycle", driver, "driver")
    write(run, "lifecycle", hosts, "hosts")
    turns = []

    def turn(w, life, n, s, e, new_ids):
        ids = (lambda ph: f"turn:{w}:{life}:{n}:{ph}") if new_ids else (lambda ph: "")
        turns.append(TurnRow(ts=at(s), worker_id=w, event_id=ids("start"), turn=n, phase="start", trigger="events"))
        if e is not None:
            turns.append(TurnRow(ts=at(e), worker_id=w, event_id=ids("end"), turn=n, phase="end", trigger="events"))

    # w001 (ids with their life): life a: turn 2 killed with the first driver, no end row; life b numbers
    # again from 1, and its turn 2 ends at 6,500 s (the old analysis ended life a's turn 2 there)
    for life, n, s, e in (("a", 1, 0, 1000), ("a", 2, 2000, None), ("b", 1, 4100, 5000), ("b", 2, 6000, 6500)):
        turn("w001", life, n, s, e, True)
    # w002 (an older trace: no ids): idle from 500 s to its resume, which wrote no down row
    for n, s, e in ((1, 0, 500), (1, 4020, 4500)):
        turn("w002", None, n, s, e, False)
    # w003: its host died at 1,500 s in turn 2; then the driver
    for n, s, e in ((1, 0, 300), (2, 1000, None), (1, 1700, 1800), (2, 2500, 2600), (1, 4030, 4100)):
        turn("w003", None, n, s, e, False)
    write(run, "turns", turns)
    board = [BoardRow(ts=at(100), worker_id="w001", event_id="board:1", seq=1, type="CLAIM", text="claim tac: a/tac.py"),
             BoardRow(ts=at(200), worker_id="w002", event_id="board:2", seq=2, type="CLAIM", text="claim tac: a/tac.py")]
    write(run, "board", board, "board-1")
    write(run, "board", board, "board-2-replayed")  # the restarted board's replay of its log
    write(run, "messages", [MessageRow(ts=at(250), worker_id="w002", event_id="chat:1", seq=1, kind="dm",
                                       sender="w002", recipient="w001", text="you first")])
    calls = [LlmCallRow(ts=at(s), worker_id=w, event_id=f"n1:{life}:{n}", gateway="n1", provider="openai", api="chat",
                        model="gpt-4.1", model_used="gpt-4.1", status="ok", input_tokens=1000, output_tokens=100,
                        cost_usd=0.5, latency_ms=5.0)
             for life, n, s, w in (("g1", 1, 100, "w001"), ("g1", 2, 200, "w002"), ("g1", 3, 300, "w003"),
                                   ("g2", 1, 4100, "w001"), ("g2", 2, 4200, "w003"))]
    write(run, "llm_calls", calls)
    write(run, "scores", [
        ScoreRow(ts=at(1850), event_id="checkpoint:1", checkpoint="periodic", passed=3, total=10, pass_rate=0.3,
                 schedule_s=1800),
        ScoreRow(ts=at(5450), event_id="checkpoint:2", checkpoint="periodic", passed=6, total=10, pass_rate=0.6,
                 schedule_s=5400),
        ScoreRow(ts=at(7500), event_id="checkpoint:3", checkpoint="final", passed=9, total=10, pass_rate=0.9,
                 schedule_s=7350),  # main taken after the workers were stopped
    ])
    return run


def test_a_resumed_run_with_restarted_board_host_and_gateway(tmp_path):
    run = resumed_run(tmp_path)
    r = answer(run, "run")[0]
    # one clock: the schedule from the first worker's launch (driver.json), its configured length
    assert (r["duration_s"], r["configured_s"], r["ended_early"], r["ended_how"]) == (7200, 7200, False, "deadline")
    assert (r["wall_s"], r["setup_wall_s"], r["schedule_wall_s"], r["after_wall_s"]) == (7600, 100, 7200, 300)
    idle = {w["worker_id"]: w for w in answer(run, "idle")}
    # w001: up [0, 4010) + [4010, 7200); busy 1000 + 2010 (life a's turn 2, open until the resume) + 900 + 500
    # w002: up 7200; busy 500 + 480; idle before the resume kept: 500 -> 4020
    # w003: up [0, 1500) (its host died) + [1700, 4030) + [4030, 7200) = 7000; busy 300 + 500 + 100 + 100 + 70
    want = {"w001": (7200, 4, 4410, 2790, 1000), "w002": (7200, 2, 980, 6220, 3520),
            "w003": (7000, 5, 1070, 5930, 3100)}
    got = {w: tuple(round(x[k], 6) for k in ("up_s", "turns", "busy_s", "idle_s", "longest_idle_s"))
           for w, x in idle.items()}
    assert got == want
    assert all(x["busy_s"] <= x["up_s"] for x in idle.values())
    # every model call of both gateways; the board's replayed rows once
    cost = answer(run, "cost")[0]
    assert (cost["calls"], cost["cost_usd"], cost["cost_basis"]) == (5, pytest.approx(2.5), "gateway")
    roles = {w["worker_id"]: w for w in answer(run, "roles")}
    assert (roles["w001"]["claims"], roles["w002"]["claims"]) == (1, 1)
    # claims and DMs on the schedule's clock, as the scores are
    claims = answer(run, "claims")
    assert [(c["seq"], c["claimed_s"], c["gap_s"], c["settled_by_dm"]) for c in claims] == [(2, 200, 100, True)]
    assert [(e["first_s"], e["last_s"]) for e in answer(run, "dm_edges")] == [(250, 250)]
    # scores: the final checkpoint scores main as the schedule left it, at most its end
    assert [s["t_s"] for s in answer(run, "scores")] == [1800, 5400, 7200]
    ms = {round(100 * m["milestone"]): m["time_to_s"] for m in answer(run, "score_milestones")}
    assert ms == {25: 1800, 50: 5400, 75: 7200, 90: 7200}
    md = md_of(run, tmp_path)
    assert "| resumed | copilot | 3 | 2.00 h | 90% | 30 min | 1.50 h | 2.00 h | 2.00 h |" in md, md[:3000]
    assert "Workers were idle 69.8% of their up time" in md


# -- a demo-like run at x120: late claimants who DM the holder and back off -----------------------------------

def test_a_demo_like_run_at_x120_shows_its_schedule_claims_with_their_dms_and_too_few_checkpoints(tmp_path):
    """240 schedule minutes at x120 (2 wall minutes), the `lease` claim rule (the board's: a claim lives at least
    600 wall s, renewed by its holder's activity). w001 claims tac; three late claimants claim it 88 schedule
    minutes (44 wall s) later, each DMs w001 and backs off: 3 colliding claims, all 3 followed by a DM (a
    3,600 schedule-second window said 0). Set-up 60 wall s before the schedule, final checkpoint 150 wall s
    after it; only the final checkpoint: no curve drawn."""
    run = make_run(tmp_path, "demo", workers=4, harness="sim", time_scale=120.0, minutes=240, claims="lease")
    (run / "summary.json").write_text(json.dumps({"ended": "deadline"}))
    w = lambda s: t(60 + s / 120)  # schedule seconds -> ts (the schedule starts 60 wall s in)
    write(run, "lifecycle", [LifecycleRow(ts=t(0), event="actor_placed", host="board")]
          + [LifecycleRow(ts=w(0), worker_id=f"w00{i}", event="started", host="h000") for i in range(1, 5)]
          + [LifecycleRow(ts=w(14_400 + 240), worker_id=f"w00{i}", event="stopped", host="h000") for i in range(1, 5)])
    board = [BoardRow(ts=w(600), worker_id="w001", event_id="board:1", seq=1, type="CLAIM", text="claim tac: tk/tac.py")]
    msgs = []
    for i, who in enumerate(("w002", "w003", "w004")):
        s = 600 + 88 * 60 + 300 * i  # each backs off (its release) before the next one claims
        board.append(BoardRow(ts=w(s), worker_id=who, event_id=f"board:{2 + 2 * i}", seq=2 + 2 * i, type="CLAIM",
                              text="claim tac: tk/tac.py"))
        board.append(BoardRow(ts=w(s + 240), worker_id=who, event_id=f"board:{3 + 2 * i}", seq=3 + 2 * i,
                              type="FAIL", text="release tac: w001 holds it"))
        msgs.append(MessageRow(ts=w(s + 120), worker_id=who, event_id=f"chat:{i + 1}", seq=i + 1, kind="dm",
                               sender=who, recipient="w001", text="you hold tac: I back off"))
    write(run, "board", board)
    write(run, "messages", msgs)
    write(run, "scores", [ScoreRow(ts=w(14_400) + 150_000_000, event_id="checkpoint:1", checkpoint="final", passed=6,
                                   total=10, pass_rate=0.6, schedule_s=14_400 + 2 * 120 * 60)])
    r = answer(run, "run")[0]
    assert (r["duration_s"], r["setup_wall_s"]) == (14_400, 60)
    assert r["schedule_wall_s"] == pytest.approx(120) and r["after_wall_s"] == pytest.approx(150)
    claims = answer(run, "claims")
    assert [(c["seq"], c["earlier_seq"], c["gap_s"], c["settled_by_dm"]) for c in claims] == [
        (2, 1, 5280, True), (4, 1, 5580, True), (6, 1, 5880, True)]
    assert all(m["time_to_s"] in (None, 14_400) for m in answer(run, "score_milestones"))
    md = md_of(run, tmp_path)
    assert "| demo | sim | 4 | 4.00 h | 60% | 4.00 h | 4.00 h | – | – |" in md, md[:2500]
    assert "3 colliding claims, 3 of them followed by a DM between the two" in md
    assert "Too few checkpoints to plot the score over time for demo (1 checkpoint)" in md
    assert "scores.png" not in md
