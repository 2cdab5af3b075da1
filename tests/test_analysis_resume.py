"""Row ids across a resume (issue 31): a resumed driver starts a new gateway on the same node, under the same
name, whose call counter starts again at 0. Every call of both drivers must stay in `llm_calls` (the view
collapses copies by identity, so a repeated id would drop the later calls as copies), in new run folders
(the ids carry the gateway's life) and in old ones (ids `<gateway>:<n>` that did repeat)."""

from __future__ import annotations

import pytest

from agensh_ray.analysis.views import connect, run_query
from agensh_ray.config import GatewayConfig, RunConfig
from agensh_ray.trace import LifecycleRow, LlmCallRow, TraceWriter, write_schema_files
from tests.fixtures.make_runs import t
from tests.test_gateway import FAST, SAY, Rig, chat, openai_fake  # noqa: F401  (openai_fake: a fixture)


def run_folder(tmp_path):
    write_schema_files(tmp_path)
    (tmp_path / "config.json").write_text(RunConfig(harness="copilot", workers=2).model_dump_json())
    life = TraceWriter(tmp_path, "host-h000", tmp_path.name, flush_interval_s=0)
    for w in ("w001", "w002"):
        life.write(LifecycleRow(worker_id=w, event="started", host="h000"))
    life.close()
    return tmp_path


async def test_a_resumed_runs_llm_calls_keep_every_call_of_both_drivers(openai_fake, tmp_path):
    """Two drivers, one after the other, each with its node's gateway `n1` (the same name: the same node),
    each carrying 3 calls: 6 calls in llm_calls, and the run's cost is all of them."""
    fake = openai_fake(SAY)
    run = run_folder(tmp_path)
    per_driver = []
    for driver in range(2):
        rig = Rig(run, fake, GatewayConfig(retry=FAST))
        async with rig:
            for w in ("w001", "w002", "w001"):
                assert (await rig.post(w, chat(w))).status_code == 200
        per_driver.append(rig.gw.life)
    assert per_driver[0] != per_driver[1]
    con = connect(run)
    rows = con.execute("SELECT event_id, worker_id, cost_usd FROM llm_calls ORDER BY ts").fetchall()
    assert len(rows) == 6 == con.execute("SELECT count(*) FROM llm_calls_rows").fetchone()[0]
    assert len({r[0] for r in rows}) == 6  # no id repeats
    assert [r[0].rsplit(":", 1)[1] for r in rows] == ["1", "2", "3", "1", "2", "3"]  # each counter from 1
    cols, cost = run_query(con, "cost")
    run_row = dict(zip(cols, cost[0]))
    assert run_row["calls"] == 6 and run_row["cost_basis"] == "gateway"
    assert run_row["cost_usd"] == pytest.approx(sum(r[2] for r in rows))


def test_an_old_run_folder_with_repeated_call_ids_keeps_every_call(tmp_path):
    """Files written before the ids carried the gateway's life: the second driver's `n1:1`.. repeat the
    first's. A copy of one call has its ts; two calls never share both: all 5 calls are kept, and a copy
    written twice is still one call."""
    run = run_folder(tmp_path)
    w = TraceWriter(run, "gateway-n1", run.name, flush_interval_s=0)
    calls = [LlmCallRow(ts=t(10 + i), worker_id="w001", event_id=f"n1:{i + 1}", gateway="n1", provider="openai",
                        api="chat", model="gpt-4.1", status="ok", input_tokens=100, output_tokens=10, cost_usd=0.5,
                        latency_ms=1.0, schema_version=6) for i in range(3)]
    calls += [c.model_copy(update={"ts": t(500 + i)}) for i, c in enumerate(calls[:2])]  # the resumed driver's
    for c in calls:
        w.write(c)
    w.write(calls[0].model_copy())  # one call written twice: one event
    w.close()
    con = connect(run)
    assert con.execute("SELECT count(*) FROM llm_calls").fetchone()[0] == 5
    assert con.execute("SELECT count(*) FROM llm_calls_rows").fetchone()[0] == 6
    cols, cost = run_query(con, "cost")
    assert dict(zip(cols, cost[0]))["cost_usd"] == pytest.approx(2.5)
