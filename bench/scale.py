"""1,024 sim workers on a simulated 16-node cluster on this machine.

Starts 16 Ray nodes on this host (ray.cluster_utils.Cluster), each declaring
`agent_slot: 64` like cluster.yaml, then runs the real driver with
`--workers 1024 --workers-per-actor 64`: 16 WorkerActors (one per node, placed
by the agent_slot resource), each serving its 64 workers' ACP sessions from
one sim agent process, the board, the router pool, the embedded forge and
chat. No launch stagger, so `launch_s` measures bringing every worker up.

Prints the machine facts, progress, and as its last line one JSON object:
workers, nodes, launch_s, first_turn_all_s, peak_rss_mib, fanout_p99_ms,
board_post_p99_ms, deliveries_per_s, prs_merged, score, turn_errors, the median board_read as
the agent waited for it and as the tool server served it, clock (summary.json's: machine-bound?),
wall_s, sandbox (whether the hosts' sim agent processes ran in their bubblewrap sandbox: on by default, as in a
run; `--no-sandbox` for the figures without it), and two memory cross-checks (see
bench/common.py MemorySampler: peak_rss_mib is the process tree's summed PSS;
peak_rss_sum_mib the naive RSS sum; peak_used_delta_mib the machine's).

    python bench/scale.py                      # 1,024 workers, 16 nodes
    python bench/scale.py --workers 128 --nodes 2 --minutes 60
    python bench/scale.py --no-sandbox          # the same without the workers' sandbox
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import threading
import time
from pathlib import Path

import ray
from ray.cluster_utils import Cluster

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agensh_ray.agent import sandbox  # noqa: E402
from agensh_ray.analysis.views import connect  # noqa: E402
from agensh_ray.config import RoutingConfig, RunConfig, SandboxConfig, SimConfig  # noqa: E402
from agensh_ray.driver import Run  # noqa: E402
from agensh_ray.task import Task  # noqa: E402
from bench.common import MemorySampler, descendants, machine_facts, percentile, print_result, reap  # noqa: E402


class Watch:
    """Polls the hosts for the moments every worker is launched and has taken a turn."""

    def __init__(self, run: Run, t0: float):
        self.run, self.t0 = run, t0
        self.launch_s = self.first_turn_all_s = None
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        n = len(self.run.workers)
        while not self._stop.wait(1.0):
            hosts = getattr(self.run, "hosts", None)
            if not hosts:
                continue
            try:
                st = [ray.get(h.status.remote(), timeout=30) for h, _ in hosts.values()]
            except Exception:
                continue
            now = time.time() - self.t0
            if self.launch_s is None and sum(s["launched"] for s in st) == n:
                self.launch_s = now
            if self.first_turn_all_s is None and sum(s["took_turn"] for s in st) == n:
                self.first_turn_all_s = now
                return

    def start(self):
        self._t.start()

    def stop(self):
        self._stop.set()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=1024)
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--minutes", type=float, default=360, help="schedule minutes (the paper's runs: 6 hours)")
    ap.add_argument("--time-scale", type=float, default=60, help="schedule seconds per wall second")
    ap.add_argument("--routers", type=int, default=4)
    ap.add_argument("--run-dir", type=Path, default=Path("/tmp/agensh-bench"))
    ap.add_argument("--no-sandbox", action="store_true", help="run the workers without their bubblewrap sandbox")
    args = ap.parse_args()
    if not args.no_sandbox and sandbox.unavailable():
        sys.exit(f"bench/scale.py: cannot sandbox the workers here: {sandbox.unavailable()} (or pass --no-sandbox)")

    per_node = -(-args.workers // args.nodes)
    print("machine:", json.dumps(machine_facts(ray=ray.__version__)), flush=True)
    print(f"starting a {args.nodes}-node cluster on this host ({per_node} agent slots per node)", flush=True)
    t_cluster = time.time()
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 2, "resources": {"agent_slot": per_node}, "include_dashboard": False,
            # No idle Python workers started ahead of need (2 per node x 16 nodes, ~50 MiB each):
            # every process this run needs is an actor, started when it is placed.
            "_system_config": {"prestart_worker_first_driver": False, "enable_worker_prestart": False},
        },
    )
    for _ in range(args.nodes - 1):
        # A real node runs a raylet, its agents and a log monitor; the simulated ones skip the log
        # monitor (~50 MiB each): nothing here reads their actors' logs through the driver.
        cluster.add_node(num_cpus=2, resources={"agent_slot": per_node}, include_log_monitor=False)
    cluster.wait_for_nodes()
    print(f"cluster up in {time.time() - t_cluster:.1f}s", flush=True)

    cfg = RunConfig(
        workers=args.workers,
        workers_per_actor=per_node,
        address=cluster.address,
        ship_code=False,  # the simulated nodes share this host's checkout (and one session folder)
        minutes=args.minutes,
        time_scale=args.time_scale,
        launch_interval_s=0.0,
        launch_fast_interval_s=0.0,
        run_dir=args.run_dir,
        run_id=f"scale-{args.workers}-{int(time.time())}",
        stop_when_done=True,
        score_every_s=1800,
        routing=RoutingConfig(routers=args.routers, idle_nudge_s=1800),
        sim=SimConfig(think_s=20, verify_main_rate=8 / args.workers),
        sandbox=SandboxConfig(enabled=not args.no_sandbox),
    )
    out = io.StringIO()

    class Tee(io.TextIOBase):
        def write(self, s):
            sys.stdout.write(s)
            sys.stdout.flush()
            return out.write(s)

    run = Run(cfg, Task.load("textkit"), out=Tee())
    t0 = time.time()
    watch = Watch(run, t0)
    watch.start()
    with MemorySampler() as mem:
        summary = run.execute()
    watch.stop()
    wall = time.time() - t0

    con = connect(summary["run_dir"])
    deliveries, span = con.execute(
        "SELECT count(*), epoch(max(ts)) - epoch(min(ts)) FROM deliveries"
    ).fetchone()
    fanout = [r[0] for r in con.execute(
        # One board entry reaching all workers' queues: from the entry's commit to the moment the
        # last host accepted it (recorded by the hosts in the lifecycle-free `deliveries` enqueue ts).
        "SELECT (epoch_us(max(d.enqueue_ts)) - epoch_us(b.ts)) / 1000.0 FROM board b "
        "JOIN deliveries d ON d.event_id = 'board:' || b.seq GROUP BY b.seq, b.ts"
    ).fetchall()]
    posts = [r[0] for r in con.execute(
        "SELECT duration_ms FROM tool_calls WHERE source = 'mcp' AND tool = 'board_write'"
    ).fetchall()]
    def median_call(source: str) -> float | None:
        v = con.execute("SELECT median(duration_ms) FROM tool_calls WHERE source = ? AND tool LIKE '%board_read'",
                        [source]).fetchone()[0]
        return round(v, 1) if v is not None else None

    result = {
        "workers": args.workers,
        "nodes": args.nodes,
        "launch_s": round(watch.launch_s, 1) if watch.launch_s else None,
        "first_turn_all_s": round(watch.first_turn_all_s, 1) if watch.first_turn_all_s else None,
        "peak_rss_mib": round(mem.peak_pss / 2**20),
        "fanout_p99_ms": round(percentile(fanout, 0.99), 1) if fanout else None,
        "board_post_p99_ms": round(percentile(posts, 0.99), 1) if posts else None,
        "deliveries_per_s": round(deliveries / span, 1) if span else None,
        "prs_merged": summary["prs_merged"],
        "score": summary.get("score"),
        "turn_errors": summary.get("turn_errors"),
        # One tool call as the agent waited for it and as the tool server served it: the gap is the
        # transport (the MCP client, the sandbox's relay, the host's loop), not the board.
        "board_read_agent_ms": median_call("agent"),
        "board_read_server_ms": median_call("mcp"),
        # The run's own clock (agensh_ray/lag.py): every tool call's median at the agent and at the server, the
        # CPU wait share of the hosts' process trees, and whether the run was machine-bound.
        "clock": summary.get("clock"),
        "wall_s": round(wall, 1),
        "sandbox": not args.no_sandbox,
        "peak_rss_sum_mib": round(mem.peak_rss_sum / 2**20),
        "peak_used_delta_mib": round(mem.peak_used / 2**20),
    }
    ours = descendants([os.getpid()])
    ray.shutdown()
    cluster.shutdown()
    reap(ours)
    print_result(result)


if __name__ == "__main__":
    main()
