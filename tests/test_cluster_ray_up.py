"""`ray up` as docs/cluster.md says, for real: cluster-local.yaml on two hosts (head and
one worker), each with its own address, sshd, home, /tmp and process table, on this machine
(tests/cluster/sandbox.py). Every step runs as docs/cluster.md writes it: the token, `ray up` (no secrets
file: a sim run needs none), `ray exec` of a sim run with `--address auto`, `ray rsync-down` of the run folder, DuckDB
over it, `ray down`. The hosts run the file's setup commands as written (venv, pip install, the
pinned agent CLIs from npm), so they need the package registries.

Skips, saying why, where the sandbox cannot run (not root, no sshd, no namespaces).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agensh_ray.analysis.views import connect
from tests.cluster.sandbox import LoopbackCluster, unavailable

ROOT = Path(__file__).resolve().parent.parent
RUN_ID = "ray-up-test"
SHARED_RUNS = "/mnt/agensh/runs"  # the hosts' shared folder (an NFS mount on real hosts)

pytestmark = [pytest.mark.cluster, pytest.mark.ray_up, pytest.mark.slow, pytest.mark.timeout(600)]  # its steps bound themselves; cleanup of two hosts is slow on a loaded machine


def test_ray_up_exec_rsync_down_and_down_on_two_hosts(tmp_path):
    why = unavailable()
    if why:
        pytest.skip(f"cannot run sshd hosts in a sandbox on this machine: {why}")
    t0 = time.time()
    with LoopbackCluster(tmp_path, hosts=2) as cluster:
        cfg = cluster.inside(cluster.cluster_file(ROOT / "cluster-local.yaml"))

        def step(name, command, timeout):
            s = cluster.sh(command, name=name, timeout=timeout)
            assert s.ok, f"{name} failed ({s.rc} after {s.seconds}s):\n{s.output[-6000:]}\n{timings(cluster)}"
            return s

        # Once, on the machine you run `ray up` from (docs/cluster.md).
        step("token", "ray get-auth-token --generate", 60)
        step("ray up", f"ray up -y {cfg}", 200)
        # The checkout's secrets/ folder went to the head, owner-only; with no agents.env in it nothing is named.
        secrets = step("secrets", f"ray exec {cfg} 'stat -c mode=%a ~/agensh-secrets && ls ~/agensh-secrets && "
                                  f"echo secrets=${{AGENSH_SECRETS_FILE:-none}}'", 60)
        assert "mode=700" in secrets.output and "README.md" in secrets.output, secrets.output[-2000:]
        assert "secrets=none" in secrets.output, secrets.output[-2000:]
        # docs/cluster.md: ray exec ... 'until ray status | grep -q " 16 local.cluster.node"; do sleep 5; done'
        step("workers join", f"ray exec {cfg} 'until ray status | grep -q \" 2 local.cluster.node\"; do sleep 5; done'",
             200)
        run = step(
            "the run",
            f"ray exec {cfg} 'cd agensh-ray && python -m agensh_ray.run --address auto --workers 16 "
            f"--workers-per-actor 8 --minutes 60 --run-dir {SHARED_RUNS} --run-id {RUN_ID}'",
            200,
        )
        assert "ray ready (2 node(s), 128 agent slots)" in run.output, run.output[-3000:]
        where = "cd agensh-ray && python tests/cluster/on_head.py placement"
        placed = step("placement", f"ray exec {cfg} '{where} {RUN_ID}'", 60)
        # docs/cluster.md: ray rsync-down cluster-local.yaml /mnt/shared/runs/<run_id> ./runs/
        fetched = tmp_path / "runs" / RUN_ID
        step("ray rsync-down", f"ray rsync-down {cfg} {SHARED_RUNS}/{RUN_ID} {cluster.inside(fetched.parent)}/", 60)
        step("ray down", f"ray down -y {cfg}", 90)
        head_left = ray_processes(cluster, cluster.names[0])
        # The local provider's `ray down` stops Ray on the head only: docs/cluster.md stops the workers by ssh, as the file's `auth` says.
        # The loop as docs/cluster.md has it: user, key and hosts read from the cluster file.
        doc = (ROOT / "docs" / "cluster.md").read_text()
        loop = re.search(r"\n    (python -c 'import sys, yaml.*?'~/venv/bin/ray stop'; done)\n", doc, re.S).group(1)
        loop = loop.replace("\n      ", " ").replace("cluster-local.yaml", cfg)
        step("ray stop on workers", loop, 60)
        left = ray_processes(cluster)
    report = timings(cluster) + f"\n  {'in all':20s} {time.time() - t0:6.1f} s"
    print(report)
    (tmp_path / "timings.txt").write_text(report)

    # `ray down` stopped Ray on the head, the ssh loop on the worker, and nothing outside the sandbox.
    assert not head_left, f"Ray processes left on the head after ray down: {head_left}"
    assert not left, f"Ray processes left after ray stop on the workers: {left}"
    assert cluster.decoy_survived, "a process outside the sandbox named like a Ray process was killed"

    # The workers spread over both hosts; the board, chat, forge and routers stayed on the head.
    m = re.search(r"PLACEMENT (\{.*\})", placed.output)
    assert m, placed.output
    placement = json.loads(m.group(1))
    head, actors = placement["head"], placement["actors"]
    hosts = {name: ip for name, ip in actors.items() if name.startswith("host-")}
    assert len(hosts) == 2 and set(hosts.values()) == set(cluster.addresses), placement
    services = {name: ip for name, ip in actors.items() if not name.startswith("host-")}
    assert {n.split("-")[0] for n in services} >= {"board", "chat", "forge", "router"}, placement
    assert head == cluster.addresses[0] and set(services.values()) == {head}, placement

    # The whole run folder came down, and DuckDB answers over it.
    summary = json.loads((fetched / "summary.json").read_text())
    assert summary["workers"] == 16 and summary["prs_merged"] > 0, summary
    # Each WorkerActor writes its own trace files where it runs: both hosts' came down.
    turns = sorted(p.name for p in (fetched / "trace" / "turns").glob("*.parquet"))
    writers = {m.group(1) for name in turns if (m := re.match(r"host-(h\d+)-", name))}
    assert writers == {"h000", "h001"}, turns
    # docs/cluster.md: python -m agensh_ray.analysis.query runs/<run_id> merges
    query = subprocess.run([sys.executable, "-m", "agensh_ray.analysis.query", str(fetched), "merges"],
                           check=False, capture_output=True, text=True, timeout=120)
    assert query.returncode == 0 and "-- merges" in query.stdout, query.stderr
    con = connect(fetched)
    turns_by_worker = con.execute("SELECT worker_id, count(*) FROM turns GROUP BY ALL").fetchall()
    assert len(turns_by_worker) == 16, turns_by_worker
    merged = con.execute("SELECT count(DISTINCT pr) FROM forge WHERE kind = 'pr_merged'").fetchone()[0]
    assert merged == summary["prs_merged"]


def ray_processes(cluster, host: str | None = None) -> list[dict]:
    """The Ray processes on the hosts (on one host, if named): raylet, gcs_server, workers, and
    Ray's Python processes (dashboard, monitors, agents) from the hosts' ~/venv."""
    return [p for p in cluster.processes() if (host is None or p.get("host") == host)
            and (p["name"] in ("raylet", "gcs_server") or p["name"].startswith("ray::")
                 or "/venv/lib/python3.11/site-packages/ray/" in p["cmdline"])]


def timings(cluster) -> str:
    return "cluster steps:\n" + "\n".join(f"  {s.name:20s} {s.seconds:6.1f} s  (exit {s.rc})" for s in cluster.steps)
