"""The kill matrix (marker `faults`): each kind of actor (and an agent process, and the board with a
router at once) SIGKILLed mid-run on the shared Ray instance. Each run must finish with a summary and
the score of an undisturbed run of the same seed, its trace must hold every board seq, chat seq and
forge event of the durable logs exactly once, and `lifecycle` must record the death and the restart.

Gray failures, in one more run (`hang`, small liveness bounds): the BoardActor, the ForgeActor, a RouterActor
and a WorkerActor SIGSTOPped in turn, each until it is replaced (reported hung, killed past the bound, restarted
by Ray), and an agent process SIGSTOPped until its turn is killed (stopped past `agent_stopped_s`); every stopped process SIGCONTed
once replaced (no harm: it is gone, and an old writer would be fenced off), and SIGCONTed or killed in a
`finally` whatever happens."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import ray

from agensh_ray.analysis.views import connect
from agensh_ray.config import LivenessConfig, RunConfig
from agensh_ray.driver import Run
from agensh_ray.task import Task
from tests.support import wait_for

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.faults, pytest.mark.timeout(1500)]
"""The first test runs the whole matrix (its module fixture): 9 runs, 2 at a time (~18 min at load 38)."""

SEED = 11
KILL_AT_BOARD_SEQ = 8
"""Kill once the board has this many entries: the workers are mid-work, PRs open, claims held."""


HANG_LIVENESS = LivenessConfig(heartbeat_s=3, hung_kill_s=8, turn_deadline_min=1, turn_floor_wall_s=300,
                               agent_stopped_s=8)
"""The `hang` cell's bounds: an actor silent 3 s is hung, 8 s killed; an agent stopped 8 s mid-turn is killed. The turn
deadline stays long (300 wall s): a sim turn here took ~30 wall s at load 12 but over 60 at load 80, and a deadline
that cuts normal turns would only measure the machine. tests/test_liveness.py kills a stopped agent at its turn
deadline."""


def _config(run_dir: Path, run_id: str) -> RunConfig:
    # 4 workers on 2 hosts; the run ends when the organization is done (the deadline only bounds a
    # machine too loaded to finish the 17 features). Only the final checkpoint is scored (the one the
    # cells compare): a periodic one every few wall seconds would take most of the CPU.
    return RunConfig(workers=4, workers_per_actor=2, time_scale=240, minutes=1800, run_dir=run_dir, run_id=run_id,
                     seed=SEED, score_every_s=10**7,
                     **({"liveness": HANG_LIVENESS} if run_id.startswith("hang") else {}))


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


def _agent_in_turn(run_id: str) -> int:
    """The pid of w001's agent CLI itself (inside its sandbox: not bwrap, not the relay), once it is in a turn."""
    def in_turn():
        st = ray.get(ray.get_actor(f"host-{run_id}-h000").status.remote(), timeout=30)
        pids = ray.get(ray.get_actor(f"host-{run_id}-h000").agent_pids.remote(), timeout=30)
        return st["in_turn"] and pids.get("w001")

    pid = wait_for(in_turn, 120, "w001's agent in a turn")
    comm = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    assert b"bwrap" not in comm.split(b" ")[0] and b"relay.py" not in comm, f"not the agent: {comm!r}"
    return pid


def _kill_agent(run_id: str) -> list:
    pid = _agent_in_turn(run_id)
    os.kill(pid, signal.SIGKILL)
    return [("agent", pid)]


HUNG = {"board": "board-{}", "forge": "forge-{}", "router": "router-{}-0", "host": "host-{}-h001"}
"""The actors the `hang` cell stops in turn, by their Ray names."""
WATCHED_HUNG = {"board": "board", "forge": "forge", "router": "router r0", "host": "host h001"}


def _hang(run_id: str) -> list:
    """SIGSTOP w001's agent until its turn is ended (stopped past `agent_stopped_s`), then each actor of HUNG in turn until Ray runs a new
    process for it; SIGCONT each old process once replaced. Whatever happens, nothing stays stopped."""
    stopped: list[tuple[str, int]] = []
    try:
        agent = _agent_in_turn(run_id)
        os.kill(agent, signal.SIGSTOP)
        stopped.append(("agent", agent))
        # first the agent alone: while the services are stopped below, every turn takes longer
        wait_for(lambda: not _alive(agent), 240, "w001's stopped agent killed")
        for name, ray_name in HUNG.items():
            actor = ray.get_actor(ray_name.format(run_id))
            old = ray.get(actor.heartbeat.remote(), timeout=30)["pid"]
            os.kill(old, signal.SIGSTOP)
            stopped.append((name, old))

            def replaced(actor=actor, old=old):
                try:
                    return ray.get(actor.heartbeat.remote(), timeout=2)["pid"] != old
                except Exception:
                    return False

            wait_for(replaced, 180, f"the {name} actor replaced after its SIGSTOP")
            os.kill(old, signal.SIGCONT) if _alive(old) else None  # a replaced part continued: no harm
    finally:
        for _, pid in stopped:
            if _alive(pid):
                os.kill(pid, signal.SIGCONT)
    return stopped


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


HANGS = {"hang": _hang}
"""The gray-failure cells (tested apart from the kill matrix: their rows differ)."""


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
        run_id = kind if kind in ("calm", *HANGS) else f"kill-{kind.replace('+', '-')}"
        try:
            return (*_run(root, run_id, KILLS.get(kind) or HANGS.get(kind)), root / run_id)
        except BaseException as exc:  # reported by that cell's test
            return exc

    with ThreadPoolExecutor(CONCURRENT) as pool:
        futures = {kind: pool.submit(cell, kind) for kind in ["calm", *HANGS, *KILLS]}
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
    _traces_are_the_logs(run_dir, out)

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


def _traces_are_the_logs(run_dir: Path, out: str) -> None:
    for table, log in (("board", run_dir / "board" / "board.jsonl"), ("messages", run_dir / "chat" / "chat.jsonl"),
                       ("forge", run_dir / "forge" / "events.jsonl")):
        logged, traced = _logged_seqs(log), _traced(run_dir, table)
        assert len(set(logged)) == len(logged) and logged, f"{table}: the log"
        assert sorted(traced) == sorted(logged), f"{table}: the trace is not the log exactly once\n{out}"


def test_hung_parts_are_found_killed_and_replaced_and_the_old_ones_do_no_harm(matrix):
    """The `hang` cell: each stopped actor reported hung, killed and restarted by the driver (no death for Ray to
    see: it was stopped, not killed), the stopped agent's turn ended (killed) and the worker resumed; the
    run's score is the undisturbed one's and its traces are its logs exactly once (no double writer)."""
    calm = _cell(matrix, "calm")[0]
    summary, out, stopped, run_dir = _cell(matrix, "hang")
    assert [name for name, _ in stopped] == ["agent", *HUNG], stopped
    assert json.loads((run_dir / "summary.json").read_text()) == summary
    assert summary["score"] == calm["score"], out
    _traces_are_the_logs(run_dir, out)

    rows = connect(run_dir).execute("SELECT event, host, worker_id, pid, detail FROM lifecycle ORDER BY ts").fetchall()
    for name, pid in stopped[1:]:
        events = [(e, p) for e, h, _, p, _ in rows if h == WATCHED_HUNG[name]]
        seen = [e for e, _ in events]
        assert "actor_hung" in seen and "actor_killed" in seen, (name, rows)
        assert seen.index("actor_hung") < seen.index("actor_killed"), (name, events)
        assert any(e == "actor_restarted" and p not in (pid, None) for e, p in events), (name, events)
        assert f"{WATCHED_HUNG[name]} hung" in out and f"{WATCHED_HUNG[name]} killed" in out, out
    hung = [d for e, h, _, _, d in rows if e == "actor_hung"]
    assert all("no heartbeat for" in d for d in hung), hung
    resumed = {w for e, _, w, _, _ in rows if e == "resumed"}
    assert {"w003", "w004"} <= resumed, rows  # the stopped host's workers, launched again in its new process
    # The stopped agent is h000's shared sim process (w001's and w002's): a turn of one of them is ended, the agent
    # seen stopped (a turn of another worker held up by the stopped services may pass its deadline, and resume the
    # same way)
    cut = {w for e, _, w, _, _ in rows if e == "turn_deadline"}
    assert cut & {"w001", "w002"}, rows
    assert any("stopped (SIGSTOP" in d for e, _, w, _, d in rows if e == "turn_deadline" and w in ("w001", "w002")), rows
    for w in cut:
        kinds = [e for e, _, x, _, _ in rows if x == w]
        assert "restarted" in kinds[kinds.index("turn_deadline"):], (w, kinds)  # it went on, with a hand-off
    restarts = [int(m) for m in re.findall(r"\| (\d+) actors restarted", out)]
    assert restarts and max(restarts) >= len(HUNG), out


def _traced(run_dir: Path, table: str) -> list[int]:
    """Every seq of the table's Parquet files, duplicates kept (the views would hide them)."""
    import pyarrow.parquet as pq

    seqs: list[int] = []
    for path in sorted((run_dir / "trace" / table).glob("*.parquet")):
        seqs += pq.read_table(path, columns=["seq"]).column("seq").to_pylist()
    return seqs
