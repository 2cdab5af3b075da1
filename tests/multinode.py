"""A real multi-node Ray cluster on this one machine, for tests and for trying the cluster path on one box.

`LocalCluster` runs `ray start --head --block` and `ray start --address HEAD --block` per worker node, each
node a process of its own in a session (process group) of its own, with its own temp dir, ports and
resources: `agent_slot: N` (what the driver's WorkerActors ask for), a node-type resource of the caller's
choosing (e.g. `services: 1`, what `--services-resource services` places the board, chat, forge and routers
on) and `agensh_node_<name>: 1`, which names the node. It stops every process of a node by its own pids:
the `ray start` process and everything under it (raylet, its agents, the workers and what they started,
found by walking the children, by the node's process group and by the node's temp dir in a command line),
frozen first (SIGSTOP, so none forks or restarts meanwhile), then killed (SIGKILL). It never runs `ray
stop` (which stops every Ray process on the machine, other people's included).

The head's node-death detection is tuned: Ray's default (a missed health check every 3 s, 5 in a row) takes
about 15-30 s to call a node dead; `HEALTH_ENV` asks every 0.5 s and gives up after 4 misses of 1 s, so a
killed node is declared dead in ~2-5 s and its actors restarted elsewhere at once.

    python tests/multinode.py up --worker-nodes 2     # a head and 2 worker nodes; prints the address; Ctrl-C stops them
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from agensh_ray.services.fakes import free_port

HEALTH_ENV = {
    "RAY_health_check_initial_delay_ms": "1000",
    "RAY_health_check_period_ms": "500",
    "RAY_health_check_timeout_ms": "1000",
    "RAY_health_check_failure_threshold": "4",
}
"""The head's (GCS's) node health checks: a killed node is declared dead in ~2-5 s (Ray's default ~15-30 s)."""

QUIET_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    # `ray start --head` turns token authentication on by itself (Ray 2.60); a driver or node that is not
    # given the token is refused. Every process here is on this machine, on 127.0.0.1.
    "RAY_AUTH_MODE": "disabled",
    # No idle Python workers started ahead of need (each ~50 MiB): every process a run needs is an actor.
    "RAY_enable_worker_prestart": "0",
    "RAY_prestart_worker_first_driver": "0",
}


def node_resource(name: str) -> str:
    """The resource that names one node of a LocalCluster (1 on that node, absent elsewhere)."""
    return f"agensh_node_{name}"


@dataclass
class Node:
    name: str
    resources: dict
    temp_dir: Path
    num_cpus: int
    proc: subprocess.Popen | None = None
    log: Path | None = None
    ports: dict = field(default_factory=dict)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class LocalCluster:
    """A head and worker nodes, each `ray start --block` in its own session; `stop()` ends them all."""

    def __init__(self, root: Path | None = None, python: str = sys.executable, head_env: dict | None = None):
        # Short: Ray's Unix sockets live under each node's temp dir (107 bytes at most for a socket path).
        self.root = Path(root) if root else Path(tempfile.mkdtemp(prefix="agmn-", dir="/tmp"))
        self._made_root = root is None
        self.python = python
        self.head_env = {**HEALTH_ENV, **(head_env or {})}
        self.nodes: dict[str, Node] = {}
        self.address = ""
        self._taken: set[int] = set()
        """Every port handed to a node of this cluster, the workers' ranges included: none is handed twice."""

    # -- starting -----------------------------------------------------------------------------------
    def start_head(self, resources: dict | None = None, num_cpus: int = 2) -> Node:
        node = Node("head", {**(resources or {}), node_resource("head"): 1}, self.root / "head", num_cpus)
        port = self._port()
        self.address = f"127.0.0.1:{port}"
        self._start(node, ["--head", f"--port={port}", "--include-dashboard=false"], self.head_env)
        return node

    def add_node(self, name: str, resources: dict | None = None, num_cpus: int = 2) -> Node:
        assert self.address, "start the head first"
        node = Node(name, {**(resources or {}), node_resource(name): 1}, self.root / name, num_cpus)
        self._start(node, [f"--address={self.address}"], {})
        return node

    def restart_node(self, name: str) -> Node:
        """Start a killed worker node again (a new Ray node: a new node id) with its resources."""
        old = self.nodes[name]
        assert not old.alive, f"{name} is running"
        return self.add_node(name, {k: v for k, v in old.resources.items() if k != node_resource(name)}, old.num_cpus)

    def _start(self, node: Node, args: list[str], env: dict) -> None:
        node.temp_dir.mkdir(parents=True, exist_ok=True)
        while True:  # this node's workers' ports: a range no port of the cluster falls in
            lo = 10000 + free_port() % 40000
            workers = range(lo, lo + 200)
            if not self._taken & set(workers):
                break
        self._taken |= set(workers)
        node.ports = {k: self._port() for k in ("node-manager", "object-manager", "metrics-export",
                                                "dashboard-agent-listen", "dashboard-agent-grpc",
                                                "runtime-env-agent", "ray-client-server")}
        cmd = [self.python, "-m", "ray.scripts.scripts", "start", "--block", *args,
               f"--num-cpus={node.num_cpus}", f"--resources={json.dumps(node.resources)}",
               f"--temp-dir={node.temp_dir}", "--disable-usage-stats", "--node-ip-address=127.0.0.1",
               *(f"--{k}-port={v}" for k, v in node.ports.items()),
               # workers' ports: a range of this node's own, away from every other port of the cluster
               f"--min-worker-port={workers[0]}", f"--max-worker-port={workers[-1]}"]
        node.log = self.root / f"{node.name}.log"
        with open(node.log, "ab") as out:
            node.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env={**os.environ, **QUIET_ENV, **env}, start_new_session=True)
        self.nodes[node.name] = node

    def _port(self) -> int:
        """A free port no node of this cluster was given (nor falls in a node's workers' range)."""
        while (p := free_port()) in self._taken:
            pass
        self._taken.add(p)
        return p

    def wait_for_nodes(self, timeout: float = 120.0) -> dict[str, str]:
        """Wait until every running node is alive in the GCS; its name -> Ray node id."""
        deadline = time.monotonic() + timeout
        want = {n.name for n in self.nodes.values() if n.alive}
        while True:
            for n in self.nodes.values():
                if n.proc is not None and n.proc.poll() is not None and n.name in want:
                    raise RuntimeError(f"node {n.name} exited ({n.proc.returncode}):\n{self.tail(n.name)}")
            try:
                ids = self.node_ids()
            except Exception:  # the GCS is not up yet
                ids = {}
            if want <= set(ids):
                return ids
            if time.monotonic() > deadline:
                raise TimeoutError(f"nodes {sorted(want - set(ids))} not up after {timeout:g}s\n"
                                   + "\n".join(self.tail(n) for n in sorted(want - set(ids))))
            time.sleep(0.5)

    def tail(self, name: str, lines: int = 20) -> str:
        log = self.nodes[name].log
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:]) if log and log.exists() else ""

    # -- what the GCS knows -------------------------------------------------------------------------
    def _ask(self, expr: str):
        """`expr` evaluated by a driver of this cluster in a process of its own (this process may be a
        driver of another Ray instance), as JSON."""
        code = ("import json, ray; ray.init(address=%r, logging_level='ERROR', log_to_driver=False); "
                "print(json.dumps(%s))" % (self.address, expr))
        out = subprocess.run([self.python, "-c", code], capture_output=True, text=True, timeout=60,
                             env={**os.environ, **QUIET_ENV})
        if out.returncode:
            raise RuntimeError(out.stderr[-2000:])
        return json.loads(out.stdout.strip().splitlines()[-1])

    def gcs_nodes(self) -> list[dict]:
        """Every node the GCS knows (alive or dead) as `ray.nodes()` gives them."""
        return self._ask("[{k: n[k] for k in ('NodeID', 'Alive', 'Resources')} for n in ray.nodes()]")

    def gcs_actors(self, name_contains: str) -> dict[str, dict]:
        """The named actors the GCS knows (dead ones too: their last node) whose name contains
        `name_contains`: name -> {"node": Ray node id, "state": ALIVE | DEAD | RESTARTING | ...}."""
        return self._ask("{a['Name']: {'node': a['Address']['NodeID'], 'state': a['State']} "
                         "for a in __import__('ray._private.state', fromlist=['actors']).actors().values() "
                         "if %r in (a.get('Name') or '')}" % name_contains)

    def node_ids(self) -> dict[str, str]:
        """Each running node's name -> its Ray node id (alive nodes only)."""
        ids = {}
        for n in self.gcs_nodes():
            if not n["Alive"]:
                continue
            for name in self.nodes:
                if n["Resources"].get(node_resource(name)):
                    ids[name] = n["NodeID"]
        return ids

    # -- stopping -----------------------------------------------------------------------------------
    def processes(self, name: str) -> list[psutil.Process]:
        """Every process of a node: the `ray start` process, its descendants, its process group, and
        whatever names the node's temp dir in its command line."""
        node = self.nodes[name]
        found: dict[int, psutil.Process] = {}
        # Its pid (and process group id) only while `ray start` is not reaped: once it is, the number may
        # belong to someone else's process on this shared machine.
        leader = node.proc.pid if node.proc is not None and node.proc.poll() is None else None
        if leader is not None:
            try:
                top = psutil.Process(leader)
                for p in [top, *top.children(recursive=True)]:
                    found[p.pid] = p
            except psutil.Error:
                pass
        for p in psutil.process_iter(["pid", "cmdline"]):
            try:
                line = " ".join(p.info["cmdline"] or ()) + " "
                if leader is not None and os.getpgid(p.pid) == leader:
                    found[p.pid] = p
                elif f"{node.temp_dir}/" in line or f"{node.temp_dir} " in line:  # n1, not n10
                    found[p.pid] = p
            except (psutil.Error, OSError):
                continue
        found.pop(os.getpid(), None)
        return list(found.values())

    def kill_node(self, name: str) -> list[int]:
        """SIGKILL every process of the node (frozen first, until no new one appears); their pids."""
        frozen: dict[int, psutil.Process] = {}
        for _ in range(20):
            new = [p for p in self.processes(name) if p.pid not in frozen]
            if not new:
                break
            for p in new:
                try:
                    p.send_signal(signal.SIGSTOP)
                    frozen[p.pid] = p
                except psutil.Error:
                    pass
        for p in frozen.values():
            try:
                p.send_signal(signal.SIGKILL)
            except psutil.Error:
                pass
        psutil.wait_procs(list(frozen.values()), timeout=10)
        node = self.nodes[name]
        if node.proc is not None:
            try:
                node.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        return sorted(frozen)

    def stop(self) -> None:
        """Kill every node, worker nodes first, then the head."""
        for name in [n for n in self.nodes if n != "head"] + (["head"] if "head" in self.nodes else []):
            self.kill_node(name)

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, exc_type, *exc) -> None:
        """Stop every node; the temp dirs (the nodes' logs) are removed unless something failed."""
        self.stop()
        if exc_type is None and self._made_root:
            shutil.rmtree(self.root, ignore_errors=True)


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cmd", choices=["up"])
    ap.add_argument("--worker-nodes", type=int, default=2)
    ap.add_argument("--slots", type=int, default=8, help="agent_slot per node (head included)")
    ap.add_argument("--services-on", default="head",
                    help="the nodes (comma-separated names: head, n1, n2, ...) that get the `services` resource")
    args = ap.parse_args()
    on = set(args.services_on.split(","))
    with LocalCluster() as cluster:
        cluster.start_head({"agent_slot": args.slots, **({"services": 1} if "head" in on else {})})
        for i in range(1, args.worker_nodes + 1):
            name = f"n{i}"
            cluster.add_node(name, {"agent_slot": args.slots, **({"services": 1} if name in on else {})})
        ids = cluster.wait_for_nodes()
        print(f"cluster up at {cluster.address} (temp dirs under {cluster.root}):")
        for name, nid in ids.items():
            print(f"  {name:5s} node {nid}  pid {cluster.nodes[name].proc.pid}  {cluster.nodes[name].resources}")
        print(f"run: python -m agensh_ray.run --address {cluster.address} --no-ship-code ...; Ctrl-C stops the nodes",
              flush=True)
        try:
            while all(n.alive for n in cluster.nodes.values()):
                time.sleep(1)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
