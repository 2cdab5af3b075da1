"""The clock that measures the organization, not the machine (issue 30; agensh_ray/lag.py): the rule
`machine_bound` and its figures, and the acceptance test: a run throttled with a CPU hog is flagged.

The acceptance test drives a real WorkerHost (2 sim workers on textkit, real sim agent process, real MCP tool
server, the in-process board, chat and forge of tests/support.py) at the demo's time scale while busy-loop
processes the test starts compete for the one CPU it pins itself (and so the sim process it spawns) to; the figures
come from the host's own counters, turned into the clock by the driver's code (`Clock`, a real TraceWriter, the
`clock` view and analysis/clock.sql). Only the flagged direction is asserted: the machine is shared, so a calm run
is not guaranteed calm here."""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys

import pytest

from agensh_ray.analysis.answers import analyse
from agensh_ray.analysis.doc import Doc
from agensh_ray.analysis.report import clock_warning
from agensh_ray.analysis.views import connect, run_query
from agensh_ray.driver.clock import Clock, clock_lines
from agensh_ray.lag import (
    AGENT,
    CPU_WAIT_LIMIT,
    MIN_CALLS,
    MIN_READY_S,
    RATIO_LIMIT,
    SERVER,
    ClockFigures,
    CpuWait,
    HostLives,
    LagWindow,
    ToolLag,
    figures,
    judge,
    median_ms,
    progress_part,
    tool_name,
)
from agensh_ray.trace import TraceWriter
from tests.readme_sample import progress_core, shape
from tests.support import LocalServices, await_for

KEYS = {"time_scale", "agent_tool_median_ms", "server_tool_median_ms", "tool_latency_ratio", "cpu_wait_share",
        "machine_bound", "why"}


SCHEDSTAT = pytest.mark.skipif(not os.path.exists("/proc/self/schedstat"),
                               reason="this kernel keeps no schedstat (CONFIG_SCHED_INFO): CPU wait is unknown here")


# -- the rule ---------------------------------------------------------------------------------------------------
def test_tool_calls_late_at_the_agent_make_the_run_machine_bound():
    f = judge(120, agent_ms=40.0, server_ms=4.0, cpu_wait_share=0.1)
    assert f.machine_bound is True and f.tool_latency_ratio == 10.0
    assert "x10.0" in f.why and "4.3 schedule s late" in f.why  # (40 - 4) ms x 120


def test_a_large_ratio_without_schedule_lag_is_transport_not_the_machine():
    """3 ms against 1 ms is x3, but at time scale 1 it is 2 schedule ms per call: no lag worth the name."""
    f = judge(1, agent_ms=3.0, server_ms=1.0, cpu_wait_share=0.1)
    assert f.tool_latency_ratio == 3.0 > RATIO_LIMIT and f.machine_bound is False


def test_cpu_wait_over_the_limit_makes_the_run_machine_bound_whatever_the_tools_say():
    f = judge(120, agent_ms=4.0, server_ms=4.0, cpu_wait_share=CPU_WAIT_LIMIT + 0.01)
    assert f.machine_bound is True and "waited for a CPU 51%" in f.why


def test_keeping_up_needs_both_measures_known():
    assert judge(120, 4.0, 4.0, 0.2).machine_bound is False
    partly = judge(120, 4.0, 4.0, None)
    assert partly.machine_bound is None and partly.why.startswith("unknown: CPU wait")
    nothing = judge(120, None, None, None)
    assert nothing.machine_bound is None and set(nothing.model_dump()) == KEYS
    assert judge(120, None, None, 0.9).machine_bound is True  # one measure over its limit is enough


def test_histogram_median_is_within_its_bucket_of_the_true_median():
    rng = random.Random(3)
    for _ in range(20):
        values = [rng.lognormvariate(2, 1.5) for _ in range(rng.randint(MIN_CALLS, 400))]
        lag = ToolLag()
        for v in values:
            lag.record(SERVER, v)
        got = median_ms({int(k[len(SERVER):]): n for k, n in lag.counts.items()})
        lo, hi = sorted(values)[(len(values) - 1) // 2], sorted(values)[len(values) // 2]
        assert lo / 1.045 <= got <= hi * 1.045, (got, statistics.median(values))
    assert median_ms({0: MIN_CALLS - 1}) is None, "too few calls: unknown"


def test_figures_over_a_window_and_a_restarted_host_never_go_negative():
    lag = ToolLag()
    for _ in range(20):
        lag.record(SERVER, 2.0)
        lag.record(AGENT, 50.0)
    before = {**lag.counts, "cpu_run_ns": 10**9, "cpu_wait_ns": 0, "cpu_sampled": 1}
    for _ in range(20):
        lag.record(SERVER, 2.0)
        lag.record(AGENT, 2.2)
    after = {**lag.counts, "cpu_run_ns": 2 * 10**9, "cpu_wait_ns": 3 * 10**9, "cpu_sampled": 1}
    window = figures(60, after, before)
    assert window.agent_tool_median_ms == pytest.approx(2.2, rel=0.03) and window.cpu_wait_share == 0.75
    whole = figures(60, after)
    assert whole.cpu_wait_share == 0.6 and whole.machine_bound is True
    restarted = figures(60, {"cpu_run_ns": 5, "cpu_wait_ns": 5, "cpu_sampled": 1}, after)
    assert restarted.cpu_wait_share is None and restarted.machine_bound is None


def test_a_host_restarted_mid_window_neither_fakes_a_wait_nor_loses_its_earlier_life():
    """Two hosts summed, as the driver does; host a restarts (a new pid, its counters from 0). Without the carry the
    sum falls: run time clamps to 0 while wait grows, a false "waited 100%", and the whole run forgets a's first life."""
    lives = HostLives()

    def total(answers: dict[str, tuple[int, int, int]]) -> dict:  # host: (pid, run s, wait s)
        out: dict = {}
        for host, (pid, run, wait) in answers.items():
            st = lives.add(host, {"cpu_run_ns": run * 10**9, "cpu_wait_ns": wait * 10**9, "cpu_sampled": 1}, pid)
            for k, v in st.items():
                out[k] = out.get(k, 0) + v
        return out

    before = total({"a": (10, 60, 1), "b": (20, 40, 1)})
    after = total({"a": (11, 1, 1), "b": (20, 50, 4)})  # a: a new life, 1 s run and 1 s wait so far
    window = figures(60, after, before)
    assert window.cpu_wait_share == pytest.approx(4 / 15, abs=5e-4)  # b: 10 s run + 3 s wait; a's new life: 1 + 1
    assert figures(60, after).cpu_wait_share == pytest.approx(6 / 117, abs=5e-4)  # a's first life kept: 61 + 50 run, 2 + 4 wait
    again = total({"a": (11, 2, 1), "b": (20, 50, 4)})  # the same life going on: no second carry
    assert figures(60, again, after).cpu_wait_share == 0.0


def test_the_window_keeps_the_last_30_seconds():
    w = LagWindow(120, window_s=30)
    for t in range(0, 100, 5):
        w.tick(float(t), {"cpu_run_ns": t * 10**9, "cpu_wait_ns": 0, "cpu_sampled": 1})
    assert w.ticks[0][0] == 65.0 and w.ticks[-1][0] == 95.0
    assert w.whole_run().cpu_wait_share == 0.0


def test_only_our_tools_count_at_the_agent():
    ours = frozenset({"board_read", "read_messages"})
    assert tool_name("agensh/board_read", ours) == "board_read"
    assert tool_name("mcp__agensh__read_messages", ours) == "read_messages"
    assert tool_name("board_read", ours) == "board_read"
    assert tool_name("xboard_read", ours) is None and tool_name("write src/board_read.c", ours) is None


@SCHEDSTAT
def test_cpu_wait_sees_the_descendants_it_samples():
    cpu = CpuWait(rescan_s=0)  # the tree walked at every sample (a host walks it every 20 s)
    before = cpu.counters()
    child = subprocess.Popen([sys.executable, "-c", "import sys, time\nt = time.process_time()\n"
                              "while time.process_time() - t < 0.3: pass\nprint('ran', flush=True)\nsys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "ran\n"  # 0.3 CPU seconds spent; alive until its stdin closes
        after = cpu.counters()
    finally:
        child.stdin.close()
        child.wait(timeout=60)
    assert after["cpu_sampled"] == 1
    assert after["cpu_run_ns"] - before["cpu_run_ns"] >= 0.3e9, "the child's CPU time is the tree's"


def test_the_progress_line_says_machine_bound_and_the_readme_format_allows_it():
    assert progress_part(judge(120, 4.0, 4.0, 0.1)) == ""
    part = progress_part(judge(120, 40.0, 4.0, 0.7))
    assert part == " | machine-bound (tool calls x10.0 at the agent, CPU wait 70%)"
    line = ("[  12.0s] workers 2/2 up, 2 in a turn, 0 idle, 0 crashed, 0 turn errors, 0 model errors | board 3 "
            "(CLAIM 3) | PRs 0 merged, 0 open | score -")
    assert progress_core(shape(line + part)) == progress_core(shape(line))


# -- acceptance: a run throttled with a CPU hog ----------------------------------------------------------------
HOGS = 3
"""Busy loops on the CPU the test pins itself to: the run's processes get at most about a quarter of it."""


def start_hogs(cpu: int, n: int, life_s: float) -> list[int]:
    """n busy loops pinned to `cpu`, started through a shell that exits at once, so they are not descendants of this
    process (the host's CPU sample must see the run's processes waiting, not the hogs)."""
    loop = (f"{sys.executable} -c 'import os, time; os.sched_setaffinity(0, {{{cpu}}}); end = time.time() + {life_s}\n"
            "while time.time() < end: pass'")  # ends by itself should whoever started it die first
    out = subprocess.run(["sh", "-c", "; ".join([f"{loop} >/dev/null 2>&1 & echo $!"] * n)],
                         capture_output=True, text=True, check=True, timeout=30).stdout
    return [int(p) for p in out.split()]


@SCHEDSTAT
@pytest.mark.timeout(240)
async def test_the_lag_measure_flags_a_run_throttled_with_a_cpu_hog(tmp_path):
    cpu = max(os.sched_getaffinity(0))
    mask = os.sched_getaffinity(0)
    ws = ["w001", "w002"]
    os.sched_setaffinity(0, {cpu})  # this thread, and so every process it starts from now on (the sim agent)
    hogs = start_hogs(cpu, HOGS, life_s=300)
    try:
        services = LocalServices(tmp_path / "svc", ws)
        host = services.host(tmp_path / "run", ws, minutes=600, time_scale=120, seed=1)  # the demo's time scale
        await host.start()
        try:
            for w in ws:
                await host.launch(w)

            def calls(st: dict, side: str) -> int:
                return sum(v for k, v in st.items() if k.startswith(side))

            await await_for(lambda: calls(host.status(), SERVER) >= 2, 120, "the first tool calls", step=1.0)
            first = host.status()
            def ready_s(st: dict) -> float:  # CPU seconds the run's processes were ready to run
                return (st["cpu_run_ns"] + st["cpu_wait_ns"]) / 1e9

            await await_for(lambda: min(calls(st := host.status(), SERVER) - calls(first, SERVER),
                                        calls(st, AGENT) - calls(first, AGENT)) >= MIN_CALLS + 2
                            and ready_s(st) - ready_s(first) >= 2 * MIN_READY_S,
                            150, f"{MIN_CALLS + 2} more tool calls timed on each side and {2 * MIN_READY_S} CPU s "
                            "ready", step=1.0)
            last = host.status()
        finally:
            await host.stop()
            services.close()
    finally:
        for pid in hogs:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:  # it ended by itself
                pass
        os.sched_setaffinity(0, mask)

    # The driver's side, as the run's loop calls it: a tick per status, the trace, the summary's key.
    driver = Clock()
    driver.cfg, driver.driver_trace = host.cfg, TraceWriter(tmp_path / "run", "driver", "test-run")
    driver._clock_tick(first)
    progress = driver._clock_tick(last)
    clock = driver._clock_summary()
    driver.driver_trace.close()
    window = figures(120, last, first)
    print("hog window:", window.model_dump_json())  # the figures measured (pytest -s shows them)
    assert window.machine_bound is True, window.why
    assert window.cpu_wait_share is not None and window.cpu_wait_share > CPU_WAIT_LIMIT, window.why
    assert progress.startswith(" | machine-bound (") and f"CPU wait {window.cpu_wait_share:.0%}" in progress
    assert set(clock) == KEYS and clock["machine_bound"] is True and clock["time_scale"] == 120
    assert clock["agent_tool_median_ms"] is not None and clock["server_tool_median_ms"] is not None
    assert ClockFigures(**json.loads(json.dumps(clock))).model_dump() == clock  # as summary.json holds it
    assert clock_lines({"clock": clock})[0].startswith("  clock          MACHINE-BOUND: ")
    con = connect(tmp_path / "run")
    rows = con.sql("SELECT scope, machine_bound, cpu_wait_share FROM clock ORDER BY ts").fetchall()
    assert [r[0] for r in rows] == ["window", "window", "run"] and rows[1][1] is True
    cols, (answer,) = run_query(con, "clock")
    a = dict(zip(cols, answer))
    assert a["scope"] == "run" and a["machine_bound"] is True and a["ticks"] == 2 and a["ticks_machine_bound"] >= 1
    doc = Doc()
    clock_warning(doc, analyse(tmp_path / "run"))  # the report's run section starts with it
    assert "**Machine-bound run**: the agents' median tool call took" in doc.markdown()
