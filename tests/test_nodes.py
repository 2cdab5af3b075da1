"""Real multi-node behaviour (marker `cluster`): a run across 3 Ray nodes of this machine
(`tests/multinode.py`, the `local_cluster` fixture), its driver the real CLI (`python -m agensh_ray.run
--address ...`) in a process of its own. Where Ray put the actors (the services on their node, the hosts
spread by `agent_slot`), then every process of one worker node SIGKILLed mid-run: the run finishes with the
score of the undisturbed run of the same seed, the board's log is in the trace exactly once, and `lifecycle`
shows the lost hosts' workers and the node they came back on. The kill matrix's helpers (tests/test_faults.py)
compare logs and traces."""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agensh_ray.analysis.views import connect
from tests.multinode import QUIET_ENV
from tests.support import wait_for
from tests.test_faults import KILL_AT_BOARD_SEQ, SEED, _logged_seqs, _traced

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(900)]

WORKERS, PER_HOST = 12, 2
SERVICES = ("board", "chat", "forge", "router r0", "router r1")


class DriverRun:
    """`python -m agensh_ray.run` against the cluster, in a session of its own (killed with it if the test fails)."""

    def __init__(self, cluster, run_dir: Path, run_id: str, *extra: str):
        self.run_dir, self.dir = run_dir, run_dir / run_id
        cmd = [sys.executable, "-m", "agensh_ray.run", "--address", cluster.address, "--no-ship-code",
               "--workers", str(WORKERS), "--workers-per-actor", str(PER_HOST), "--seed", str(SEED),
               "--time-scale", "240", "--minutes", "1800", "--checkpoint-every", "1000000",
               "--run-dir", str(run_dir), "--run-id", run_id, *extra]
        self.log = run_dir / f"{run_id}.out"
        run_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env={**os.environ, **QUIET_ENV}, start_new_session=True)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def board_entries(self) -> int:
        if self.proc.poll() is not None:
            raise AssertionError("the run ended early:\n" + self.output())
        log = self.dir / "board" / "board.jsonl"
        return len(_logged_seqs(log)) if log.exists() else 0

    def finish(self, timeout: float = 600) -> dict:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError("the run did not finish in time:\n" + self.output())
        assert self.proc.returncode == 0, self.output()
        return json.loads((self.dir / "summary.json").read_text())

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@pytest.fixture(scope="module")
def runs(local_cluster, tmp_path_factory):
    """Runs started by this module's tests; any still going at the end is killed."""
    started: list[DriverRun] = []

    def start(run_id: str, *extra: str) -> DriverRun:
        started.append(DriverRun(local_cluster, tmp_path_factory.mktemp("nodes"), run_id, *extra))
        return started[-1]

    yield start
    for r in started:
        r.kill()


@pytest.fixture(scope="module")
def calm(runs):
    """The undisturbed run: its summary and run folder."""
    t0 = time.monotonic()
    r = runs("calm")
    summary = r.finish()
    print(f"\ncalm run: {time.monotonic() - t0:.1f}s wall, score {summary['score']}")
    return summary, r.dir


def _placed(run_dir: Path) -> dict[str, str]:
    """Each actor's first node, from the driver's actor_placed rows (each actor reported its own node)."""
    rows = connect(run_dir).execute(
        "SELECT host, node FROM lifecycle WHERE event = 'actor_placed' ORDER BY ts").fetchall()
    return {host: node for host, node in reversed(rows)}


def test_services_on_the_driver_node_and_hosts_spread_by_agent_slot(local_cluster, calm):
    summary, run_dir = calm
    ids = local_cluster.node_ids()
    placed = _placed(run_dir)
    hosts = {a: n for a, n in placed.items() if a.startswith("host ")}
    assert len(hosts) == WORKERS // PER_HOST, placed
    assert set(hosts.values()) == set(ids.values()), f"the hosts are not on every node: {placed} {ids}"
    # the driver attaches to the head's raylet (one machine, one address): the services are pinned there
    assert {placed[s] for s in SERVICES} == {ids["head"]}, (placed, ids)
    assert summary["score"] > 0
    # Ray's own record (the GCS's actor table) agrees with where each actor said it ran
    gcs = {name: a["node"] for name, a in local_cluster.gcs_actors("-calm").items()}
    expected = {_ray_name(actor, "calm"): node for actor, node in placed.items()}
    assert {n: gcs.get(n) for n in expected} == expected, (gcs, placed)


def _ray_name(actor: str, run_id: str) -> str:
    """The Ray name of an actor as lifecycle names it ("host h000", "router r1", "board")."""
    kind, _, which = actor.partition(" ")
    return f"{kind}-{run_id}" + (f"-{which.lstrip('r')}" if kind == "router" else f"-{which}" if which else "")


RECOVERY_RUNS = int(os.environ.get("AGENSH_RECOVERY_RUNS", "1"))
"""Kill runs for the recovery figure (its median is printed); 1 in CI, 3 for the figure in the docs."""


def test_a_lost_worker_node_loses_nothing_and_its_workers_come_back_elsewhere(local_cluster, calm, runs):
    times = []
    for i in range(RECOVERY_RUNS):
        times.append(_kill_worker_node(local_cluster, calm[0], runs, "kill-node" + (f"-{i}" if i else "")))
        local_cluster.restart_node("n1")  # 3 nodes again, for the next run
        local_cluster.wait_for_nodes()
    print(f"\nrecovery after a node loss (kill -> every lost worker in a turn again): median "
          f"{statistics.median(times):.1f}s of {len(times)} ({', '.join(f'{t:.1f}' for t in times)})")


def _kill_worker_node(local_cluster, calm_summary: dict, runs, run_id: str) -> float:
    """One run with every process of n1 SIGKILLed mid-run, checked; the recovery time in seconds."""
    ids = local_cluster.node_ids()
    t0 = time.monotonic()
    r = runs(run_id)
    wait_for(lambda: r.board_entries() >= KILL_AT_BOARD_SEQ, 300, f"{KILL_AT_BOARD_SEQ} board entries")
    killed_at = time.time()
    pids = local_cluster.kill_node("n1")
    summary = r.finish()
    wall = time.monotonic() - t0
    out = r.output()
    assert pids and summary["score"] == calm_summary["score"], out

    log = r.dir / "board" / "board.jsonl"
    logged, traced = _logged_seqs(log), _traced(r.dir, "board")
    assert logged and len(set(logged)) == len(logged)
    assert sorted(traced) == sorted(logged), "the board's trace is not its log exactly once\n" + out

    con = connect(r.dir)
    lost_hosts = {a for a, n in _placed(r.dir).items() if n == ids["n1"]}
    assert lost_hosts and all(a.startswith("host ") for a in lost_hosts), _placed(r.dir)
    rows = con.execute("SELECT event, host, worker_id, node FROM lifecycle ORDER BY ts").fetchall()
    for a in lost_hosts:
        assert any(e == "actor_died" and h == a and n == ids["n1"] for e, h, _, n in rows), (a, rows)
        back = [n for e, h, _, n in rows if e == "actor_resumed" and h == a]
        assert back and back[-1] in {ids["head"], ids["n2"]}, (a, rows)
    lost = {w for e, h, w, n in rows if w and n == ids["n1"]}
    assert len(lost) == PER_HOST * len(lost_hosts), rows
    resumed = {w: n for e, _, w, n in rows if e == "resumed" and w in lost}
    assert set(resumed) == lost and ids["n1"] not in resumed.values(), rows

    # recovery: from the kill to every lost worker starting a turn again
    kill_us = int(killed_at * 1e6)
    firsts = dict(con.execute(
        "SELECT worker_id, min(epoch_us(ts)) FROM turns WHERE phase = 'start' AND epoch_us(ts) > ? "
        "GROUP BY worker_id", [kill_us]).fetchall())
    assert lost <= set(firsts), f"lost workers without a turn after the kill: {lost - set(firsts)}"
    recovery = (max(firsts[w] for w in lost) - kill_us) / 1e6
    steps = dict(con.execute(  # when the driver saw the lost hosts die, come back, and started them again
        "SELECT event, (max(epoch_us(ts)) - ?) / 1e6 FROM lifecycle "
        "WHERE list_contains(?, host) AND epoch_us(ts) > ? GROUP BY event",
        [kill_us, sorted(lost_hosts), kill_us]).fetchall())
    print(f"\n{run_id}: node n1 killed ({len(pids)} processes, {len(lost)} workers): every lost worker in a turn "
          f"again {recovery:.1f}s after the kill (the driver saw them die at {steps.get('actor_died', 0):.1f}s, "
          f"back at {steps.get('actor_restarted', 0):.1f}s, started again at {steps.get('actor_resumed', 0):.1f}s); "
          f"run {wall:.1f}s wall")
    return recovery


def test_the_board_node_lost_the_board_comes_back_elsewhere_from_its_log(local_cluster, calm, runs):
    """`--services-resource services`: the board, chat, forge and routers on n1 or n2 (the nodes declaring it);
    the node holding the board is SIGKILLed mid-run; they come back on the other from their durable logs."""
    calm_summary, _ = calm
    ids = local_cluster.node_ids()
    r = runs("kill-board-node", "--services-resource", "services")

    def board_node():
        if r.board_entries() < KILL_AT_BOARD_SEQ:
            return None
        return _placed(r.dir).get("board")

    node = wait_for(board_node, 300, f"{KILL_AT_BOARD_SEQ} board entries and the board's placement")
    name = {v: k for k, v in ids.items()}[node]
    placed = _placed(r.dir)
    assert name in ("n1", "n2") and {placed[s] for s in SERVICES if s in placed} <= {ids["n1"], ids["n2"]}, placed
    pids = local_cluster.kill_node(name)
    try:
        summary = r.finish()
    finally:
        local_cluster.restart_node(name)  # 3 nodes again, whatever runs next
        local_cluster.wait_for_nodes()
    out = r.output()
    assert pids and summary["score"] == calm_summary["score"], out
    for table, log in (("board", r.dir / "board" / "board.jsonl"), ("messages", r.dir / "chat" / "chat.jsonl"),
                       ("forge", r.dir / "forge" / "events.jsonl")):
        logged, traced = _logged_seqs(log), _traced(r.dir, table)
        assert logged and len(set(logged)) == len(logged), f"{table}: the log"
        assert sorted(traced) == sorted(logged), f"{table}: the trace is not the log exactly once\n{out}"
    rows = connect(r.dir).execute("SELECT event, host, node FROM lifecycle WHERE host = 'board' ORDER BY ts").fetchall()
    assert ("actor_died", "board", node) in rows, rows
    back = [n for e, _, n in rows if e == "actor_restarted"]
    other = ids["n2" if name == "n1" else "n1"]
    assert back == [other], f"the board did not come back on {other}: {rows}\n{out}"
    print(f"\nnode {name} (the board's) killed: {len(pids)} processes; the board came back on the other node")
