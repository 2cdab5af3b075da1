"""Real multi-node behaviour (marker `cluster`): runs across 3 Ray nodes of this machine
(`tests/multinode.py`, the `local_cluster` fixture), each driver the real CLI (`python -m agensh_ray.run
--address ...`) in a process of its own. Two runs, one after another (the cluster tests must fit in 5
minutes): the calm one (where Ray put the actors: the services on the driver's node, the hosts spread by
`agent_slot` in the run's placement group), and the disturbed one, with the services on the worker nodes
declaring `services`: its driver is SIGKILLed early and started again with `--resume`, then every process of
the board's node (a worker node: it has hosts too) is SIGKILLed. It finishes with the calm run's score, the
board, chat and forge logs are in the trace exactly once, nothing is delivered twice across the driver's
restart, and `lifecycle` shows every worker resumed, the lost hosts' workers and the board on the node they
came back on. The kill matrix's helpers (tests/test_faults.py) compare logs and traces."""

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
from agensh_ray.config import worker_ids
from agensh_ray.worker.workdir import Workdirs
from tests.multinode import QUIET_ENV
from tests.support import wait_for
from tests.test_faults import KILL_AT_BOARD_SEQ, SEED, _logged_seqs, _traced

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(900)]

WORKERS, PER_HOST = 12, 2
SERVICES = ("board", "chat", "forge", "router r0", "router r1")


class DriverRun:
    """`python -m agensh_ray.run` against the cluster, in a session of its own (killed with it if the test fails)."""

    def __init__(self, cluster, run_dir: Path, run_id: str, *extra: str, resume: bool = False):
        self.run_dir, self.dir = run_dir, run_dir / run_id
        cmd = [sys.executable, "-m", "agensh_ray.run", "--address", cluster.address, "--no-ship-code",
               "--run-dir", str(run_dir)]
        cmd += ["--resume", run_id] if resume else [
            "--workers", str(WORKERS), "--workers-per-actor", str(PER_HOST), "--seed", str(SEED),
            "--time-scale", "360", "--minutes", "2700", "--checkpoint-every", "1000000", "--run-id", run_id, *extra]
        self.log = run_dir / f"{run_id}{'.resumed' if resume else ''}.out"
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

    def start(run_id: str, *extra: str, resume: DriverRun | None = None) -> DriverRun:
        """A run, or (`resume`: a run whose driver was killed) its driver started again with --resume."""
        if resume is not None:
            started.append(DriverRun(local_cluster, resume.run_dir, run_id, resume=True))
        else:
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


def _placed(run_dir: Path, since_us: int = 0) -> dict[str, str]:
    """Each actor's node as placed (its actor_placed row: each actor reports its own node) by the drivers that
    started after `since_us`; the latest placement wins (a resumed driver places its hosts anew)."""
    rows = connect(run_dir).execute(
        "SELECT host, node FROM lifecycle WHERE event = 'actor_placed' AND epoch_us(ts) >= ? ORDER BY ts",
        [since_us]).fetchall()
    return dict(rows)


def _resumed(run_dir: Path, since_us: int) -> set[str]:
    """The workers that went on from their clones (a `resumed` lifecycle row) since `since_us`."""
    rows = connect(run_dir).execute("SELECT DISTINCT worker_id FROM lifecycle WHERE event = 'resumed' "
                                    "AND epoch_us(ts) >= ?", [since_us]).fetchall()
    return {w for (w,) in rows}


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
    # the hosts' slots were one placement group (a bundle per host), reserved whole and removed at the end
    groups = local_cluster._ask("[[p['name'], p['state'], len(p['bundles'])] "
                                "for p in ray.util.placement_group_table().values()]")
    assert ["slots-calm", "REMOVED", WORKERS // PER_HOST] in groups, groups


def _ray_name(actor: str, run_id: str) -> str:
    """The Ray name of an actor as lifecycle names it ("host h000", "router r1", "board")."""
    kind, _, which = actor.partition(" ")
    return f"{kind}-{run_id}" + (f"-{which.lstrip('r')}" if kind == "router" else f"-{which}" if which else "")


RECOVERY_RUNS = int(os.environ.get("AGENSH_RECOVERY_RUNS", "1"))
"""Node-loss runs for the recovery figure (its median is printed); 1 in CI, 3 for the figure in the docs."""


DRIVER_KILL_AT_BOARD_SEQ = 4
"""The disturbed run's driver is SIGKILLed at this many board entries, the board's node at KILL_AT_BOARD_SEQ."""


def _kill_services_node(local_cluster, runs, run_id: str, restart: bool, kill_driver: bool = False) -> dict:
    """A run with `--services-resource services` (board, chat, forge and routers on n1 or n2, the nodes declaring
    it; hosts spread over all three), every process of the board's node SIGKILLed mid-run: that node's hosts
    and services are lost at once. With `kill_driver`, first its driver is SIGKILLed early and started again
    with `--resume`, and the node is killed in the resumed run (both failures in one run: the cluster tests must
    fit in 5 minutes). With `restart`, the node is started again after the run (3 nodes for another run)."""
    ids = local_cluster.node_ids()
    r = first = runs(run_id, "--services-resource", "services")
    acknowledged, since_us = set(), 0
    if kill_driver:
        wait_for(lambda: first.board_entries() >= DRIVER_KILL_AT_BOARD_SEQ and all(
            Workdirs.kept(first.dir / "workers" / w / "repo")
            for w in worker_ids(WORKERS)), 300, f"{DRIVER_KILL_AT_BOARD_SEQ} board entries and every worker's clone")
        first.kill()
        acknowledged = set(_logged_seqs(first.dir / "board" / "board.jsonl"))
        assert not (first.dir / "summary.json").exists()
        since_us = int(time.time() * 1e6)
        r = runs(run_id, resume=first)
        wait_for(lambda: "launching workers" in r.output() or r.proc.poll() is not None, 300,
                 "the resumed driver's hosts")

    def board_node():
        if r.board_entries() < KILL_AT_BOARD_SEQ:
            return None
        placed = _placed(r.dir, since_us)
        if sum(a.startswith("host ") for a in placed) < WORKERS // PER_HOST:
            return None  # the (resumed) driver's placements not in its trace yet
        if kill_driver and len(_resumed(r.dir, since_us)) < WORKERS:
            return None  # a worker not yet gone on from its clone: the node is killed once every one has
        return _placed(r.dir).get("board")

    node = wait_for(board_node, 300, f"{KILL_AT_BOARD_SEQ} board entries, the actors' placement and (resumed) "
                    "every worker gone on from its clone")
    name = {v: k for k, v in ids.items()}[node]
    placed = _placed(r.dir)  # the latest placement of each actor: the resumed driver's
    killed_at = time.time()
    pids = local_cluster.kill_node(name)
    try:
        summary = r.finish()
    finally:
        if restart:
            local_cluster.restart_node(name)
            local_cluster.wait_for_nodes()
    return {"run": r, "first": first, "summary": summary, "ids": ids, "name": name, "node": node,
            "placed": placed, "killed_at": killed_at, "pids": pids, "since_us": since_us,
            "acknowledged": acknowledged}


@pytest.fixture(scope="module")
def node_lost(local_cluster, runs):
    """The disturbed run the node-loss and driver-loss tests check: its driver SIGKILLed and resumed, then the
    node holding the board (and hosts: a worker node too) SIGKILLed in the resumed run."""
    return _kill_services_node(local_cluster, runs, "disturbed", restart=RECOVERY_RUNS > 1, kill_driver=True)


def test_a_lost_worker_node_loses_nothing_and_its_workers_come_back_elsewhere(local_cluster, calm, runs, node_lost):
    times = [_check_worker_node_loss(calm[0], node_lost)]
    for i in range(1, RECOVERY_RUNS):
        again = _kill_services_node(local_cluster, runs, f"kill-node-{i}", restart=i < RECOVERY_RUNS - 1)
        times.append(_check_worker_node_loss(calm[0], again))
    print(f"\nrecovery after a node loss (kill -> every lost worker in a turn again): median "
          f"{statistics.median(times):.1f}s of {len(times)} ({', '.join(f'{t:.1f}' for t in times)})")


def _check_worker_node_loss(calm_summary: dict, lost: dict) -> float:
    """The lost node's hosts came back elsewhere with nothing lost; the recovery time in seconds."""
    r, ids, dead = lost["run"], lost["ids"], lost["node"]
    out = r.output()
    assert lost["pids"] and lost["summary"]["score"] == calm_summary["score"], out

    log = r.dir / "board" / "board.jsonl"
    logged, traced = _logged_seqs(log), _traced(r.dir, "board")
    assert logged and len(set(logged)) == len(logged)
    assert sorted(traced) == sorted(logged), "the board's trace is not its log exactly once\n" + out

    con = connect(r.dir)
    lost_hosts = {a for a, n in lost["placed"].items() if n == dead and a.startswith("host ")}
    assert lost_hosts, lost["placed"]
    rows = con.execute("SELECT event, host, worker_id, node FROM lifecycle WHERE epoch_us(ts) >= ? ORDER BY ts",
                       [lost["since_us"]]).fetchall()  # the driver that saw the node die
    for a in lost_hosts:
        assert any(e == "actor_died" and h == a and n == dead for e, h, _, n in rows), (a, rows)
        back = [n for e, h, _, n in rows if e == "actor_resumed" and h == a]
        assert back and back[-1] in set(ids.values()) - {dead}, (a, rows)
    gone = {w for e, h, w, n in rows if w and n == dead}
    assert len(gone) == PER_HOST * len(lost_hosts), rows
    resumed = {w: n for e, _, w, n in rows if e == "resumed" and w in gone}
    assert set(resumed) == gone and dead not in resumed.values(), rows

    # recovery: from the kill to every lost worker starting a turn again
    kill_us = int(lost["killed_at"] * 1e6)
    firsts = dict(con.execute(
        "SELECT worker_id, min(epoch_us(ts)) FROM turns WHERE phase = 'start' AND epoch_us(ts) > ? "
        "GROUP BY worker_id", [kill_us]).fetchall())
    assert gone <= set(firsts), f"lost workers without a turn after the kill: {gone - set(firsts)}"
    recovery = (max(firsts[w] for w in gone) - kill_us) / 1e6
    steps = dict(con.execute(  # when the driver saw the lost hosts die, come back, and started them again
        "SELECT event, (max(epoch_us(ts)) - ?) / 1e6 FROM lifecycle "
        "WHERE list_contains(?, host) AND epoch_us(ts) > ? GROUP BY event",
        [kill_us, sorted(lost_hosts), kill_us]).fetchall())
    print(f"\n{r.dir.name}: node {lost['name']} killed ({len(lost['pids'])} processes, {len(gone)} workers and the "
          f"services): every lost worker in a turn again {recovery:.1f}s after the kill (the driver saw them die at "
          f"{steps.get('actor_died', 0):.1f}s, back at {steps.get('actor_restarted', 0):.1f}s, started again at "
          f"{steps.get('actor_resumed', 0):.1f}s)")
    return recovery


def test_the_board_node_lost_the_board_comes_back_elsewhere_from_its_log(local_cluster, calm, node_lost):
    """The node the board (and chat, forge, routers) ran on is lost: they come back on the other node declaring
    `services`, from their durable logs, with every logged entry in the trace exactly once."""
    r, ids, node, name, placed = (node_lost[k] for k in ("run", "ids", "node", "name", "placed"))
    out = r.output()
    assert name in ("n1", "n2") and {placed[s] for s in SERVICES if s in placed} <= {ids["n1"], ids["n2"]}, placed
    assert node_lost["summary"]["score"] == calm[0]["score"], out
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
    print(f"\nnode {name} (the board's) killed: {len(node_lost['pids'])} processes; the board came back on the other node")

def test_the_driver_killed_mid_run_resume_goes_on_and_the_run_finishes(calm, node_lost):
    """The disturbed run's driver SIGKILLed (its whole process group) early: `--resume RUN_ID` reattached to the
    detached board, started the chat and forge from their logs and the hosts with their clones, kept the schedule,
    and the run (a node lost later too) finished with the undisturbed run's score; every acknowledged board entry
    is in the log and the trace once; nothing was delivered twice before the node was lost."""
    calm_summary, _ = calm
    r, again = node_lost["first"], node_lost["run"]
    summary = node_lost["summary"]
    out = again.output()
    assert "reattached" in out and "resuming" in out, out
    assert summary["driver_resumes"] == 1 and summary["score"] == calm_summary["score"], out
    log = r.dir / "board" / "board.jsonl"
    assert node_lost["acknowledged"] and node_lost["acknowledged"] <= set(_logged_seqs(log))
    for table, log in (("board", log), ("messages", r.dir / "chat" / "chat.jsonl"),
                       ("forge", r.dir / "forge" / "events.jsonl")):
        logged, traced = _logged_seqs(log), _traced(r.dir, table)
        assert logged and len(set(logged)) == len(logged), f"{table}: the log"
        assert sorted(traced) == sorted(logged), f"{table}: the trace is not the log exactly once\n{out}"
    (twice,), = connect(r.dir).execute(
        "SELECT count(*) FROM (SELECT worker_id, event_id FROM deliveries WHERE epoch_us(ts) < ? "
        "GROUP BY ALL HAVING count(*) > 1)", [int(node_lost["killed_at"] * 1e6)]).fetchall()
    assert twice == 0, f"{twice} events delivered twice to the same worker across the driver's restart\n{out}"
    rows = connect(r.dir).execute("SELECT DISTINCT worker_id FROM lifecycle WHERE event = 'resumed' "
                                  "AND epoch_us(ts) < ?", [int(node_lost["killed_at"] * 1e6)]).fetchall()
    assert len(rows) == WORKERS, f"not every worker went on from its clone after the resume: {rows}\n{out}"
    # a finished run is not resumed again
    done = subprocess.run([sys.executable, "-m", "agensh_ray.run", "--resume", r.dir.name, "--run-dir",
                           str(r.run_dir)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "has finished" in done.stderr, done.stderr
