"""The kill matrix (marker `faults`): each kind of actor (and an agent process, and the board with a
router at once) SIGKILLed mid-run on the shared Ray instance. Each run must finish with a summary and
the score of an undisturbed run of the same seed, its trace must hold every board seq, chat seq and
forge event of the durable logs exactly once, and `lifecycle` must record the death and the restart."""

from __future__ import annotations

import io
import json
import os
import signal
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import ray

from agensh_ray.analysis.views import connect
from agensh_ray.config import RunConfig
from agensh_ray.driver import Run
from agensh_ray.task import Task
from tests.support import wait_for

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.faults, pytest.mark.timeout(900)]

SEED = 11
KILL_AT_BOARD_SEQ = 8
"""Kill once the board has this many entries: the workers are mid-work, PRs open, claims held."""


def _config(run_dir: Path, run_id: str) -> RunConfig:
    # 4 workers on 2 hosts; the run ends when the organization is done (the deadline only bounds a
    # machine too loaded to finish the 17 features). Only the final checkpoint is scored (the one the
    # cells compare): a periodic one every few wall seconds would take most of the CPU.
    return RunConfig(workers=4, workers_per_actor=2, time_scale=240, minutes=1800, run_dir=run_dir, run_id=run_id,
                     seed=SEED, score_every_s=10**7)


def _run(run_dir: Path, run_id: str, kill=None) -> tuple[dict, str, list]:
    out = io.StringIO()
    run = Run(_config(run_dir, run_id), Task.load("textkit"), out=out)
    result: dict = {}

    def go():
        try:
            result["summary"] = run.execute()
        except BaseException as exc:  # the test reports it with the progress lines
            result["error"] = exc

    t = threading.Thread(target=go, daemon=True)
    t.start()
    killed: list = []
    if kill is not None:
        def board_seq():
            if not t.is_alive():
                raise AssertionError("the run ended before the kill:\n" + out.getvalue())
            try:
                return ray.get(ray.get_actor(f"board-{run_id}").last_seq.remote(), timeout=5) >= KILL_AT_BOARD_SEQ
            except Exception:
                return False

        wait_for(board_seq, 180, f"{KILL_AT_BOARD_SEQ} board entries")
        killed = kill(run_id)
    t.join(timeout=600)
    assert not t.is_alive(), "the run did not finish in time:\n" + out.getvalue()
    assert "error" not in result, f"{result.get('error')!r}\n{out.getvalue()}"
    return result["summary"], out.getvalue(), killed


def _pid(name: str, method: str = "pid") -> int:
    return ray.get(getattr(ray.get_actor(name), method).remote(), timeout=30)


def _kill_actors(*names: str):
    def kill(run_id: str) -> list:
        done = []
        for name in names:
            actor = {"board": f"board-{run_id}", "router": f"router-{run_id}-0", "host": f"host-{run_id}-h000",
                     "forge": f"forge-{run_id}", "chat": f"chat-{run_id}"}[name]
            pid = _pid(actor, "ensure_started" if name == "router" else "pid")
            os.kill(pid, signal.SIGKILL)
            done.append((name, pid))
        return done
    return kill


def _kill_agent(run_id: str) -> list:
    def in_turn():
        st = ray.get(ray.get_actor(f"host-{run_id}-h000").status.remote(), timeout=30)
        pids = ray.get(ray.get_actor(f"host-{run_id}-h000").agent_pids.remote(), timeout=30)
        return st["in_turn"] and pids.get("w001")

    pid = wait_for(in_turn, 120, "w001's agent in a turn")
    os.kill(pid, signal.SIGKILL)
    return [("agent", pid)]


KILLS = {
    "board": _kill_actors("board"),
    "router": _kill_actors("router"),
    "host": _kill_actors("host"),
    "forge": _kill_actors("forge"),
    "chat": _kill_actors("chat"),
    "agent": _kill_agent,
    "board+router": _kill_actors("board", "router"),
}
WATCHED = {"board": "board", "router": "router r0", "host": "host h000", "forge": "forge", "chat": "chat"}
"""The killed actor's name in the driver's lifecycle rows (column `host`)."""


def _logged_seqs(path: Path) -> list[int]:
    """The seqs of a durable JSON-lines log (a torn last line, if any, is not an acknowledged entry)."""
    seqs = []
    for line in path.read_text().splitlines():
        try:
            seqs.append(json.loads(line)["seq"])
        except (ValueError, KeyError):
            continue
    return seqs


CONCURRENT = 2
"""Runs of the matrix at once (each has 7 actors: board, chat, forge, 2 hosts, 2 routers): a run spends
much of its wall time waiting (think time, the done rule's quiet period, restarts); more than two at once
only slow each other down on 2 cores."""


@pytest.fixture(scope="module")
def matrix(ray_session, tmp_path_factory):
    """Every cell's (summary, progress lines, what was killed, run folder), the undisturbed run's under
    "calm"; a cell that failed holds its exception."""
    root = tmp_path_factory.mktemp("faults")

    def cell(kind: str):
        run_id = "calm" if kind == "calm" else f"kill-{kind.replace('+', '-')}"
        try:
            return (*_run(root, run_id, KILLS.get(kind)), root / run_id)
        except BaseException as exc:  # reported by that cell's test
            return exc

    with ThreadPoolExecutor(CONCURRENT) as pool:
        futures = {kind: pool.submit(cell, kind) for kind in ["calm", *KILLS]}
        return {kind: f.result() for kind, f in futures.items()}


def _cell(matrix, kind):
    got = matrix[kind]
    if isinstance(got, BaseException):
        raise got
    return got


@pytest.mark.parametrize("kind", list(KILLS))
def test_a_kill_mid_run_changes_nothing_that_was_acknowledged(kind, matrix):
    calm = _cell(matrix, "calm")[0]
    summary, out, killed, run_dir = _cell(matrix, kind)
    assert killed, "nothing was killed"
    assert json.loads((run_dir / "summary.json").read_text()) == summary
    assert summary["score"] == calm["score"], out

    con = connect(run_dir)
    for table, log in (("board", run_dir / "board" / "board.jsonl"), ("messages", run_dir / "chat" / "chat.jsonl"),
                       ("forge", run_dir / "forge" / "events.jsonl")):
        logged, traced = _logged_seqs(log), _traced(run_dir, table)
        assert len(set(logged)) == len(logged) and logged, f"{table}: the log"
        assert sorted(traced) == sorted(logged), f"{table}: the trace is not the log exactly once\n{out}"

    rows = con.execute("SELECT event, host, worker_id, pid FROM lifecycle ORDER BY ts").fetchall()
    for name, pid in killed:
        if name == "agent":
            events = [e for e, _, w, _ in rows if w == "w001"]
            assert "crashed" in events and "restarted" in events, rows
            continue
        events = [(e, p) for e, h, _, p in rows if h == WATCHED[name]]
        assert any(e == "actor_died" for e, _ in events), (name, rows)
        assert any(e == "actor_restarted" and p != pid for e, p in events), (name, rows)
    if kind == "host":  # its workers resumed in the restarted host with a hand-off
        resumed = {w for e, _, w, _ in rows if e == "resumed"}
        assert resumed == {"w001", "w002"}, rows
    if kind != "agent":
        assert f"{len(killed)} actors restarted" in out, out


def _traced(run_dir: Path, table: str) -> list[int]:
    """Every seq of the table's Parquet files, duplicates kept (the views would hide them)."""
    import pyarrow.parquet as pq

    seqs: list[int] = []
    for path in sorted((run_dir / "trace" / table).glob("*.parquet")):
        seqs += pq.read_table(path, columns=["seq"]).column("seq").to_pylist()
    return seqs
