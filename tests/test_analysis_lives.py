"""Property tests of the life, turn and idle rules (analysis/idle.sql, issue 31): hypothesis builds workers whose
true story is known, lives one after another (a first launch, then resumes or host restarts that start the turn
numbers at 1 again), crashes and restarts inside a life, turns that end and turns killed with their agent, host
or driver, lives ended by a `stopped` row, by their host's death or by nothing at all (a driver killed: the next
life's start is the end the trace shows), and a schedule that ends before the last of it. The trace is written as
the writers write it (turn ids with the life, or an older trace without ids); up, busy and idle time must be the
story's, per worker."""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agensh_ray.analysis.views import connect, run_query
from agensh_ray.trace import LifecycleRow, TurnRow, write_schema_files
from tests.fixtures.make_runs import t, write

DEADLINE = 8000  # schedule seconds (time scale 1): the schedule ends before some stories do

CHECKS = settings(max_examples=15, deadline=None, derandomize=True, print_blob=True,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
"""15 runs of 3 workers, each written, opened and asked once."""


@dataclass
class Story:
    """One worker's truth (what happened) and its trace rows (what was written)."""

    worker: str
    up: list[tuple[int, int]] = field(default_factory=list)  # true up intervals [a, b)
    busy: list[tuple[int, int, int]] = field(default_factory=list)  # true turns (start, end, up interval's index)
    lifecycle: list[LifecycleRow] = field(default_factory=list)
    driver: list[LifecycleRow] = field(default_factory=list)
    turns: list[TurnRow] = field(default_factory=list)

    def truth(self) -> tuple[float, int, float, float, float]:
        """(up, turns, busy, idle, longest idle) within the schedule."""
        clip = lambda a, b: (a, min(b, DEADLINE))
        ups = [clip(a, b) for a, b in self.up if a < DEADLINE]
        turns = [(s, min(e, DEADLINE), i) for s, e, i in self.busy if s <= DEADLINE]
        up = sum(b - a for a, b in ups)
        busy = sum(e - s for s, e, _ in turns)
        gaps = []
        for i, (a, b) in enumerate(ups):
            cursor = a
            for s, e, _ in sorted(x for x in turns if x[2] == i):
                gaps.append(s - cursor)
                cursor = e
            gaps.append(b - cursor)
        gaps = [g for g in gaps if g > 0]
        return up, len(turns), busy, up - busy, max(gaps, default=0)


@st.composite
def stories(draw, worker: str) -> Story:
    s = Story(worker)
    new_ids = draw(st.booleans())
    host = f"h-{worker}"  # a host's death ends the lives of every worker on it: one host per worker here
    L = lambda ts, ev, **kw: LifecycleRow(ts=t(ts), worker_id=worker, event=ev, host=host, **kw)
    c = 0
    lives = draw(st.integers(1, 3))
    for life in range(lives):
        s.lifecycle.append(L(c, "started"))
        n = 0  # turn numbers start at 1 in each life
        segments = draw(st.integers(1, 2))
        for seg in range(segments):
            s.up.append((c, None))
            open_turn = None
            for k in range(draw(st.integers(0, 3))):
                start = c + draw(st.integers(1, 600))
                n += 1
                tid = f"turn:{worker}:L{life}:{n}"
                s.turns.append(TurnRow(ts=t(start), worker_id=worker, event_id=f"{tid}:start" if new_ids else "",
                                       turn=n, phase="start", trigger="events"))
                if k < 2 and draw(st.integers(0, 3)) == 0:  # killed: its end is where the agent's life ends
                    open_turn = (start, n, tid)
                    c = start
                    break
                end = start + draw(st.integers(1, 900))
                s.turns.append(TurnRow(ts=t(end), worker_id=worker, event_id=f"{tid}:end" if new_ids else "",
                                       turn=n, phase="end", trigger="events"))
                s.busy.append((start, end, len(s.up) - 1))
                c = end
            stop = c + draw(st.integers(1, 400))
            if seg < segments - 1:  # a crash and a restart within the life (turn numbers go on)
                how = "crash"
            else:
                how = draw(st.sampled_from(["stopped", "host", "none"] if life < lives - 1 else ["stopped", "none"]))
            s.up[-1] = (s.up[-1][0], stop if how != "none" or life < lives - 1 else 10**6)
            if open_turn is not None:
                s.busy.append((open_turn[0], s.up[-1][1], len(s.up) - 1))
            if how == "crash":
                s.lifecycle.append(L(stop, "crashed", detail="exit -9"))
                c = stop + draw(st.integers(1, 200))
                s.lifecycle.append(L(c, "restarted"))
                if open_turn is not None:  # the killed turn's end row comes after the restart (turns.py)
                    s.turns.append(TurnRow(ts=t(c + 1), worker_id=worker, turn=open_turn[1], phase="end",
                                           event_id=f"{open_turn[2]}:end" if new_ids else "", trigger="events"))
                continue
            if how == "stopped":
                s.lifecycle.append(L(stop, "stopped"))
            elif how == "host":
                s.driver.append(LifecycleRow(ts=t(stop), event="actor_died", host=f"host {host}"))
            c = stop if how == "none" else stop + draw(st.integers(1, 300))
            if life < lives - 1:
                s.lifecycle.append(L(max(c - 1, stop), "resumed"))
    return s


@CHECKS
@given(st.lists(st.integers(0, 0), min_size=3, max_size=3).flatmap(
    lambda _: st.tuples(stories("w001"), stories("w002"), stories("w003"))))
def test_up_busy_and_idle_time_are_the_story_s_per_life(ss):
    with tempfile.TemporaryDirectory(prefix="agensh-lives-") as tmp:
        run = Path(tmp) / "lives"
        run.mkdir()
        write_schema_files(run)
        (run / "config.json").write_text(json.dumps({"workers": 3, "harness": "sim", "time_scale": 1.0,
                                                     "minutes": DEADLINE / 60}))
        (run / "driver.json").write_text(json.dumps({"start_wall": t(0) / 1e6}))
        (run / "summary.json").write_text(json.dumps({"ended": "deadline"}))
        write(run, "lifecycle", [r for s in ss for r in s.lifecycle], "hosts")
        driver = [r for s in ss for r in s.driver]
        if driver:
            write(run, "lifecycle", driver, "driver")
        turns = [r for s in ss for r in s.turns]
        if turns:
            write(run, "turns", turns)
        cols, rows = run_query(connect(run), "idle")
    got = {r[0]: dict(zip(cols, r)) for r in rows}
    for s in ss:
        want = s.truth()
        g = got[s.worker]
        have = (g["up_s"], g["turns"], g["busy_s"], g["idle_s"], g["longest_idle_s"])
        assert tuple(round(x, 6) for x in have) == want, (s.worker, s.lifecycle, s.driver, s.turns)
        assert g["busy_s"] <= g["up_s"] + 1e-6
