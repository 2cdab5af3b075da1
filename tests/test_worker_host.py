"""The worker host drives each worker's TurnClock: the prompts the host makes
itself (share-findings, idle nudge, wind-down) reach a real ACP agent process
(the scripted agent, agensh_ray.fakes.acp_agent) when the clock says so, in the
words of prompts/, and a worker launched late gets only the latest notice due."""

from __future__ import annotations

import json
import sys

from agensh_ray import prompts
from agensh_ray.analysis.views import connect
from agensh_ray.config import RoutingConfig
from agensh_ray.lag import SERVER
from tests.support import LocalServices, await_for

WORKERS = ["w001", "w002"]


def _prompts(run_dir, worker: str) -> list[str]:
    """The prompts the worker's agent got, from the log it keeps in its HOME (all it may write besides its clone)."""
    log = run_dir / "workers" / worker / "home" / "agent.jsonl"
    if not log.exists():
        return []
    out = []
    for line in log.read_text().splitlines():
        rec = json.loads(line)
        if rec["event"] == "prompt" and f"worker id: {worker}" in rec["text"]:
            out.append(rec["text"])
    return out


async def test_host_prompts_follow_the_turn_clock(tmp_path):
    services = LocalServices(tmp_path, WORKERS)
    run_dir = tmp_path / "run"
    # 4 schedule minutes at x15 = 16 wall seconds: idle nudge after 30 schedule s (2 s),
    # wind-down notices at T-120 s (wall 8 s) and T-60 s (wall 12 s). The late starter is launched
    # at schedule second 150 and must be up (a sandboxed agent process) within the next 2 wall s.
    host = services.host(
        run_dir, WORKERS, harness=f"cmd:{sys.executable} -m agensh_ray.fakes.acp_agent --log ~/agent.jsonl",
        minutes=4, time_scale=15, routing=RoutingConfig(idle_nudge_s=30, wind_down_s=[120, 60]),
    )
    await host.start()
    try:
        await host.launch("w001")
        await await_for(lambda: host.schedule_s() >= 150, 30, "schedule second 150")
        await host.launch("w002")  # after the first notice, before the last
        last = prompts.wind_down(1, last=True)
        await await_for(lambda: any(last in p for p in _prompts(run_dir, "w002")), 60, "the last notice at w002")
        await await_for(lambda: any(last in p for p in _prompts(run_dir, "w001")), 60, "the last notice at w001")
    finally:
        await host.stop()
        services.close()
    early = prompts.wind_down(2, last=False)
    w1 = _prompts(run_dir, "w001")
    assert w1[0].startswith(prompts.worker("w001", 2)[:200])  # the worker prompt first
    assert prompts.share_findings() in w1[1]  # the first turn wrote nothing to the board
    assert all(prompts.share_findings() not in p for p in w1[2:]), "a host prompt never answers a host prompt"
    assert any(prompts.nudge() in p for p in w1[2:]), "idle: nudged"
    assert sum(early in p for p in w1) == 1 and sum(last in p for p in w1) == 1, "each notice once"
    w2 = _prompts(run_dir, "w002")
    assert early in w2[0], "a late starter gets the notice already due with its first prompt"
    assert sum(early in p for p in w2) == 1 and sum(last in p for p in w2) == 1


async def test_tool_calls_name_the_turn_s_life_across_a_host_restart(tmp_path):
    """Turn numbers start at 1 again in a worker's new life (a resumed driver or a restarted host launches it again):
    each tool call names its turn's life, so (worker, life, turn) finds the one turn it ran in (issue 31)."""
    services = LocalServices(tmp_path, WORKERS[:1])
    run_dir = tmp_path / "run"

    def served(host) -> int:
        return sum(v for k, v in host.status().items() if k.startswith(SERVER))

    try:
        for _ in range(2):  # two lives of w001, each in its own host on the same run folder
            host = services.host(run_dir, WORKERS[:1], minutes=600, time_scale=120, seed=1)
            await host.start()
            try:
                await host.launch("w001")
                await await_for(lambda: served(host) >= 3, 120, "three tool calls served")
            finally:
                await host.stop()
    finally:
        services.close()
    con = connect(run_dir)
    calls = con.sql("SELECT worker_id, life, turn FROM tool_calls WHERE source = 'mcp'").fetchall()
    assert len({life for _, life, _ in calls}) == 2 and all(life for _, life, _ in calls), calls
    starts = {e for (e,) in con.sql("SELECT event_id FROM turns WHERE phase = 'start'").fetchall()}
    assert all(f"turn:{w}:{life}:{turn}:start" in starts for w, life, turn in calls), (calls, starts)
