"""Liveness without Ray (agensh_ray/liveness.py): the judgement of one actor's heartbeats (hung after the first
bound, killed at the second, again while it stays silent; a healthy answer ends it), the probe that sees an event
loop stuck behind a process that still answers, and the append-only log's fencing (agensh_ray/applog.py): a
replaced writer that comes back to life writes nothing."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from agensh_ray.applog import AppendLog, Fenced
from agensh_ray.config import LivenessConfig, RunConfig
from agensh_ray.liveness import Liveness, LoopProbe


def test_an_unanswered_heartbeat_is_hung_at_the_first_bound_and_killed_at_the_second():
    live = Liveness(hung_after_s=10, kill_after_s=60)
    live.asked(100.0)
    assert live.step(105.0) == []
    assert live.step(110.0) == ["hung"]
    assert live.step(150.0) == []  # reported once
    assert live.step(160.0) == ["kill"]
    assert live.step(200.0) == []  # Ray is restarting it
    assert live.step(220.0) == ["kill"]  # still silent one more bound after the kill: killed again
    assert live.kills == 2
    assert live.answered(225.0) is True  # the answer ends the hang
    assert live.silent_since is None and not live.hung and live.step(400.0) == []


def test_a_driver_that_looks_late_gets_both_verdicts_at_once():
    live = Liveness(hung_after_s=3, kill_after_s=8)
    live.asked(0.0)
    live.asked(5.0)  # asking again while silent does not move the start of the silence
    assert live.step(9.0) == ["hung", "kill"]


def test_an_answer_from_a_stalled_event_loop_counts_as_silence_from_when_the_loop_last_ran():
    live = Liveness(hung_after_s=10, kill_after_s=60)
    live.asked(100.0)
    assert live.answered(101.0, stall_s=0.5) is False and live.silent_since is None  # a short stall is fine
    live.asked(200.0)
    assert live.answered(201.0, stall_s=30.0) is False
    assert live.silent_since == pytest.approx(171.0)
    assert live.step(201.0) == ["hung"]
    assert live.step(231.0) == ["kill"]


def test_a_failed_call_is_a_death_not_a_hang():
    live = Liveness(hung_after_s=1, kill_after_s=2)
    live.asked(0.0)
    live.reset()
    assert live.step(10.0) == []


def test_the_loop_probe_sees_a_blocked_loop_from_another_thread():
    loop = asyncio.new_event_loop()
    ready, release = threading.Event(), threading.Event()

    def run():
        asyncio.set_event_loop(loop)
        loop.call_soon(ready.set)
        loop.run_forever()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    ready.wait(10)
    probe = LoopProbe(loop)
    try:
        assert probe.stall_s() == 0.0
        deadline = time.monotonic() + 10
        while probe.stall_s() != 0.0 and time.monotonic() < deadline:  # the loop ran: the next poke is fresh
            time.sleep(0.01)
        loop.call_soon_threadsafe(release.wait)  # the loop's thread blocks
        time.sleep(0.05)
        probe.stall_s()
        time.sleep(0.3)
        assert probe.stall_s() >= 0.3
        release.set()
        while probe.stall_s() != 0.0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert time.monotonic() < deadline, "the probe never saw the loop run again"
    finally:
        release.set()
        loop.call_soon_threadsafe(loop.stop)
        t.join(10)
        loop.close()
    assert LoopProbe().stall_s() == 0.0  # no running loop here: nothing to probe


def test_the_bounds_are_checked_and_the_turn_deadline_has_a_wall_floor():
    with pytest.raises(ValueError, match="hung_kill_s .* must be at least liveness.heartbeat_s"):
        LivenessConfig(heartbeat_s=30, hung_kill_s=10)
    cfg = RunConfig(time_scale=120, liveness=LivenessConfig(turn_deadline_min=30, turn_floor_wall_s=600))
    assert cfg.turn_deadline_wall_s == 600  # 30 schedule minutes are 15 wall seconds at 120x: the floor wins
    cfg = RunConfig(time_scale=1, liveness=LivenessConfig(turn_deadline_min=30, turn_floor_wall_s=600))
    assert cfg.turn_deadline_wall_s == 1800


def test_a_newer_writer_fences_off_the_older_one(tmp_path):
    p = tmp_path / "log.jsonl"
    old = AppendLog(p)
    old.append({"seq": 1})
    new = AppendLog(p)  # the restarted actor's
    assert new.incarnation == old.incarnation + 1
    with pytest.raises(Fenced, match="replaced by incarnation"):
        old.append({"seq": 2})
    new.append({"seq": 2})
    old.close()
    new.close()
    assert [json.loads(line)["seq"] for line in p.read_bytes().splitlines()] == [1, 2]


OLD_WRITER = textwrap.dedent("""
    import sys
    from agensh_ray.applog import AppendLog, Fenced
    log = AppendLog(sys.argv[1])
    log.append({"seq": 1, "by": "old"})
    print("ready", flush=True)
    sys.stdin.readline()  # stopped (SIGSTOP) and replaced meanwhile, then continued
    try:
        log.append({"seq": 2, "by": "old"})
        print("wrote", flush=True)
    except Fenced as exc:
        print("fenced", flush=True)
""")


def test_a_stopped_writer_continued_after_its_replacement_writes_nothing(tmp_path):
    """The gray failure itself: a writer process SIGSTOPped, replaced by a new one, then SIGCONTed."""
    p = tmp_path / "board.jsonl"
    proc = subprocess.Popen([sys.executable, "-c", OLD_WRITER, str(p)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        os.kill(proc.pid, signal.SIGSTOP)
        with AppendLog(p) as new:
            assert [r["seq"] for r in new.records()] == [1]
            new.append({"seq": 2, "by": "new"})
            os.kill(proc.pid, signal.SIGCONT)
            proc.stdin.write("go\n")
            proc.stdin.flush()
            assert proc.stdout.readline().strip() == "fenced"
            new.append({"seq": 3, "by": "new"})
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        proc.kill()
        proc.wait(10)
    rows = [json.loads(line) for line in p.read_bytes().splitlines()]
    assert [(r["seq"], r["by"]) for r in rows] == [(1, "old"), (2, "new"), (3, "new")]


def scripted_session(tmp_path, turns: list):
    """A real ACP agent process (the scripted fake, agensh_ray.fakes.acp_agent) playing `turns`, not yet started."""
    from agensh_ray.agent.client import SessionObserver
    from agensh_ray.agent.harness import get_harness
    from agensh_ray.agent.session import ProcessSession

    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": turns}))
    h = get_harness(f"cmd:{sys.executable} -m agensh_ray.fakes.acp_agent --script {script} --log {tmp_path / 'a.jsonl'}")
    (tmp_path / "w").mkdir()
    return ProcessSession(h, "w001", tmp_path / "w", tmp_path / "home", "http://127.0.0.1:9/w/w001/tok123456/mcp",
                          SessionObserver(), log_dir=tmp_path / "logs")


async def test_a_stopped_agent_is_killed_at_its_turn_deadline_and_comes_back(tmp_path):
    """A real ACP agent process (the scripted fake), SIGSTOPped mid-turn: the turn ends at its deadline with
    TurnDeadline, the whole process group killed (a stopped process included); the session restarts and the next
    turn is answered."""
    from agensh_ray.errors import TurnDeadline

    first = tmp_path / "first-turn-taken"  # the restarted process counts its turns from 0 again
    code = f"import pathlib, time\np = pathlib.Path({str(first)!r})\nwait = not p.exists()\np.touch()\ntime.sleep(30 if wait else 0)"
    s = scripted_session(tmp_path, [[{"do": "exec", "text": code}, {"do": "say", "text": "back"}]])
    stopped = None
    try:
        await asyncio.wait_for(s.start(timeout_s=60), 90)
        stopped = s.pid
        turn = asyncio.create_task(s.prompt("work", deadline_s=3.0))
        await asyncio.sleep(0.5)
        os.kill(stopped, signal.SIGSTOP)
        with pytest.raises(TurnDeadline, match="turn deadline passed.*process group .* killed"):
            await asyncio.wait_for(turn, 60)
        await asyncio.wait_for(s.process.proc.wait(), 10)  # SIGKILL ends a stopped process too
        assert s.process.proc.returncode == -signal.SIGKILL
        await asyncio.wait_for(s.restart(), 90)
        assert s.alive and s.pid != stopped
        reason, text = await asyncio.wait_for(s.prompt("go on", deadline_s=60), 90)
        assert reason == "end_turn" and "back" in text
    finally:
        if stopped is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(stopped, signal.SIGCONT)
        await s.close()


async def test_a_stopped_agent_is_killed_without_waiting_for_its_deadline(tmp_path):
    """The same agent SIGSTOPped mid-turn, with a far deadline: seen stopped for `stopped_s`, it is killed then."""
    from agensh_ray.errors import TurnDeadline

    s = scripted_session(tmp_path, [[{"do": "sleep", "seconds": 30}]])
    stopped = None
    try:
        await asyncio.wait_for(s.start(timeout_s=60), 90)
        stopped = s.pid
        turn = asyncio.create_task(s.prompt("work", deadline_s=600.0, stopped_s=1.0))
        await asyncio.sleep(0.3)
        os.kill(stopped, signal.SIGSTOP)
        with pytest.raises(TurnDeadline, match=r"stopped \(SIGSTOP or a debugger\) for \d+ s mid-turn"):
            await asyncio.wait_for(turn, 60)
        await asyncio.wait_for(s.process.proc.wait(), 10)
        assert s.process.proc.returncode == -signal.SIGKILL
    finally:
        if stopped is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(stopped, signal.SIGCONT)
        await s.close()
