"""A worker that tries to take the machine, limited (issue 27). The scripted ACP agent
(agensh_ray/fakes/acp_agent.py, through the `cmd:` harness) runs on a real WorkerHost in its
bubblewrap sandbox with small limits (agensh_ray/agent/limits.py): a fork loop ends at its process
limit while another worker's turn completes; a 4 GiB allocation kills only that worker's agent,
which the host restarts with a hand-off, and a lifecycle row says why; filling the workdir stops
at the disk limit with a clear message; /tmp is bounded."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from agensh_ray.agent import limits, sandbox
from agensh_ray.config import LimitsConfig, SandboxConfig
from agensh_ray.fakes.acp_agent import AgentScript, Step
from tests.support import LocalServices, await_for

pytestmark = [
    pytest.mark.security,
    pytest.mark.skipif(sandbox.unavailable() is not None, reason=f"no sandbox here: {sandbox.unavailable()}"),
]

MIB = 1 << 20

BOMB = '''
import os, sys, time
me = os.path.basename(os.path.dirname(os.getcwd()))
if me != "w001":
    print("not the forking worker:", me)
    sys.exit(0)
kids, why = [], "no fork refused"
while len(kids) < 1000:
    try:
        pid = os.fork()
    except OSError as exc:
        why = str(exc)
        break
    if pid == 0:
        while not os.path.exists("release"):
            time.sleep(0.2)
        os._exit(0)
    kids.append(pid)
open("at_limit", "w").write(f"{len(kids)}: {why}")
for _ in range(600):  # until the test saw the other worker's turn (or 2 minutes)
    if os.path.exists("release"):
        break
    time.sleep(0.2)
for pid in kids:
    os.waitpid(pid, 0)
print(f"forked {len(kids)}: {why}")
'''

ALLOCATE = '''
import os
mark = os.path.expanduser("~/allocated")
result = "allocated before"
if os.path.basename(os.path.dirname(os.getcwd())) == "w001" and not os.path.exists(mark):
    open(mark, "w").close()
    result = len(b"x" * (4 << 30))
'''


def sh(text: str) -> Step:
    return Step(do="shell", text=text)


def start(tmp_path: Path, workers: list[str], turns: list[list[Step]], lim: LimitsConfig, files: dict[str, str]):
    run_dir = tmp_path / "run"
    services = LocalServices(run_dir, workers)
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    for name, text in files.items():
        (scripts / name).write_text(text)
    script = scripts / "agent.json"
    script.write_text(AgentScript(turns=turns).model_dump_json())
    harness = f"cmd:{sys.executable} -m agensh_ray.fakes.acp_agent --script {script} --log ~/agent.jsonl"
    host = services.host(run_dir, workers, harness=harness, sandbox=SandboxConfig(read_only=[scripts], limits=lim))
    return run_dir, services, host, scripts


def log_of(host, w: str) -> list[dict]:
    log = host.workers[w].home / "agent.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def results(host, w: str, turn: int) -> dict[int, dict]:
    return {r["step"]: r for r in log_of(host, w) if r["event"] == "step" and r["turn"] == turn}


def out(rec: dict) -> str:
    r = rec["result"]
    return r.get("output", "") if isinstance(r, dict) else str(r)


def lifecycle(run_dir: Path) -> list[dict]:
    return [r for f in (run_dir / "trace" / "lifecycle").glob("*.parquet") for r in pq.read_table(f).to_pylist()]


def groups_left(run_id: str = "test-run") -> list[Path]:
    h, _ = limits.detect()
    return [] if h is None else [d / limits.parent_name(run_id) for d in h.own.values()
                                 if (d / limits.parent_name(run_id)).exists()]


needs_cgroups = pytest.mark.skipif(limits.detect()[0] is None, reason=f"no cgroups here: {limits.detect()[1]}")


@needs_cgroups
async def test_a_fork_loop_ends_at_the_process_limit_while_another_worker_works(tmp_path, git_env):
    lim = LimitsConfig(pids=64)
    turn = [
        sh(f"python3 {tmp_path / 'scripts' / 'bomb.py'} 2>&1"),
        sh("echo shell ok; ls | wc -l"),
        Step(do="terminal", text="echo terminal ok"),
        Step(do="mcp", tool="board_write", args={"type": "FACT", "text": "my turn completes"}),
        Step(do="mcp", tool="board_read", args={}),
    ]
    run_dir, services, host, _ = start(tmp_path, ["w001", "w002"], [turn], lim, {"bomb.py": BOMB})
    w1, w2 = host.workers["w001"], host.workers["w002"]
    await host.start()
    try:
        await host.launch("w001")
        marker = await await_for(lambda: (w1.workdir / "at_limit").exists() and (w1.workdir / "at_limit").read_text(),
                                 120, "w001's fork loop to stop forking")
        forked = int(marker.split(":")[0])
        w1_pid = w1.session.pid
        await host.launch("w002")  # while w001 holds its process limit
        await await_for(lambda: w2.turns_finished >= 1, 120, "w002's turn to end")
        held = not (w1.workdir / "release").exists() and w1.in_turn
        (w1.workdir / "release").touch()
        await await_for(lambda: w1.turns_finished >= 1, 120, "w001's turn to end")
    finally:
        await host.stop()
        services.close()
    print(f"w001 forked {forked} before the limit: {marker}")
    assert forked < lim.pids and "Resource temporarily unavailable" in marker, marker
    assert held, "w002's turn ended while w001 held its processes"
    two = results(host, "w002", 0)
    assert len(two) == 5 and all(r["ok"] for r in two.values()), two
    assert "shell ok" in out(two[1]) and "terminal ok" in out(two[2]) and out(two[3]).startswith("written:")
    one = results(host, "w001", 0)
    assert f"forked {forked}" in out(one[0])
    told = out(one[3]) + out(one[4])  # the agent was told, with its next tool result
    assert "process limit 64 reached" in told and "End the processes you no longer need" in told, told
    rows = lifecycle(run_dir)
    hit = [r for r in rows if r["event"] == "limit_reached"]
    assert hit and all(r["worker_id"] == "w001" for r in hit), hit
    assert "process limit 64 reached" in hit[0]["detail"]
    assert w1_pid == w1.session.pid and not w1.crashed and not w2.crashed  # no agent died
    started = [r for r in rows if r["event"] == "started"]
    assert all("processes" in r["detail"] and "cgroup" in r["detail"] for r in started), started
    assert not groups_left(), groups_left()  # the groups went with the agents


@needs_cgroups
async def test_a_4_gib_allocation_kills_only_that_workers_agent(tmp_path, git_env):
    lim = LimitsConfig(memory_mib=256)
    turns = [
        [Step(do="exec", text=ALLOCATE), sh("echo still here"),
         Step(do="mcp", tool="board_write", args={"type": "FACT", "text": "one turn done"})],
        [sh("echo next turn")],
    ]
    run_dir, services, host, _ = start(tmp_path, ["w001", "w002"], turns, lim, {})
    w1, w2 = host.workers["w001"], host.workers["w002"]
    await host.start()
    try:
        await host.launch("w001")
        await host.launch("w002")
        await await_for(lambda: w2.turns_finished >= 1, 120, "w002's first turn to end")
        w2_pid = w2.session.pid
        await await_for(lambda: w1.crashed >= 1 and w1.turns_finished >= 2, 120,
                        "w001's agent to die and its restarted agent to take a turn")
        host.push(w2, "nudge", "Carry on.")
        await await_for(lambda: w2.turns_finished >= 2, 120, "w002's second turn to end")
        w2_pid_after = w2.session.pid
    finally:
        await host.stop()
        services.close()
    rows = lifecycle(run_dir)
    crashed = [r for r in rows if r["event"] == "crashed"]
    assert [r["worker_id"] for r in crashed] == ["w001"], crashed
    assert crashed[0]["detail"].startswith("agent killed: memory limit 256 MiB reached"), crashed[0]["detail"]
    assert any(r["event"] == "restarted" and r["worker_id"] == "w001" for r in rows)
    # The other worker's agent lived on and worked; the restarted one was told why its predecessor died.
    assert w2.crashed == 0 and w2_pid == w2_pid_after
    assert all(r["ok"] for r in results(host, "w002", 1).values())
    prompts = [r["text"] for r in log_of(host, "w001") if r["event"] == "prompt"]
    assert any("memory limit 256 MiB reached" in p for p in prompts[1:]), prompts
    assert not groups_left()


async def test_filling_the_workdir_stops_at_the_disk_limit_and_tmp_is_bounded(tmp_path, git_env):
    lim = LimitsConfig(disk_mib=50, disk_check_s=0.2, tmp_mib=16)
    fill = ("i=0; while [ $i -lt 400 ]; do head -c 1048576 /dev/zero > fill.$i || break; i=$((i+1)); "
            "sleep 0.01; done; echo wrote $i")
    turn = [
        sh("head -c 100M /dev/zero > /tmp/big; echo rc=$?; du -m /tmp/big; df -m /tmp | tail -1"),
        sh(fill),
        Step(do="write", text="more.txt", content="more"),
        Step(do="mcp", tool="board_read", args={}),
        sh("rm -f fill.*; echo cleaned"),
        Step(do="sleep", seconds=2.0),  # the watcher measures again (every 0.2 s here)
        Step(do="write", text="after.txt", content="fits again"),
        sh(f"head -c {60 * MIB} /dev/zero > one-big-file; echo rc=$?; du -m one-big-file"),
    ]
    run_dir, services, host, _ = start(tmp_path, ["w001"], [turn], lim, {})
    w1 = host.workers["w001"]
    await host.start()
    try:
        await host.launch("w001")
        await await_for(lambda: w1.turns_finished >= 1, 180, "the turn to end")
        peak = w1.disk.peak if w1.disk is not None else 0
    finally:
        await host.stop()
        services.close()
    got = results(host, "w001", 0)
    assert len(got) == 8, got
    # /tmp: 16 MiB, full, refused past it.
    tmp = out(got[0])
    assert "No space left on device" in tmp and tmp.split("du -m")[0] and "rc=1" in tmp, tmp
    assert int(tmp.splitlines()[-2].split()[0]) <= 16 and tmp.splitlines()[-1].split()[1] == "16", tmp
    # The fill was stopped near the limit: the command killed, not finished.
    written = len(list(w1.workdir.glob("fill.*")))
    print(f"disk: the fill was stopped at {peak / MIB:.1f} MiB measured (limit 50 MiB)")
    assert 50 * MIB <= peak < 100 * MIB, peak
    assert "wrote 400" not in out(got[1]) and got[1]["result"]["exit_code"] != 0, got[1]
    # Refused while over, with the reason; the agent told with its next tool result; fine again once cleaned.
    assert not got[2]["ok"] and "disk limit 50 MiB reached" in out(got[2]), got[2]
    assert "disk limit 50 MiB reached" in out(got[3]) and "Delete what you do not need" in out(got[3])
    assert written == 0 and got[6]["ok"] and (w1.workdir / "after.txt").read_text() == "fits again"
    # One file past the limit: refused by RLIMIT_FSIZE at 50 MiB.
    big = out(got[7])
    assert "rc=0" not in big and (w1.workdir / "one-big-file").stat().st_size <= 50 * MIB, big
    rows = [r for r in lifecycle(run_dir) if r["event"] == "limit_reached"]
    print(*(r["detail"][:120] for r in rows), sep="\n")
    assert rows and "disk limit 50 MiB reached" in rows[0]["detail"] and "turn stopped" in rows[0]["detail"], rows


def test_disk_usage_follows_no_link_and_counts_a_hard_link_once(tmp_path):
    (tmp_path / "a").write_bytes(b"x" * MIB)
    os.link(tmp_path / "a", tmp_path / "b")
    (tmp_path / "to-root").symlink_to("/usr")
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "c").write_bytes(b"y" * MIB)
    (sub / "loop").symlink_to("..")
    u = limits.disk_usage([tmp_path], 1000)
    assert u.complete and 2 * MIB <= u.bytes < 3 * MIB, u
    assert not limits.disk_usage([tmp_path], 2).complete
    # Past PATH_MAX: still counted (each folder opened from its parent's fd), or refused when deeper than the bound.
    deep = os.open(sub, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(300):  # 300 levels of 20 characters: a 6,000-character path
            os.mkdir("d" * 20, dir_fd=deep)
            nxt = os.open("d" * 20, os.O_RDONLY | os.O_DIRECTORY, dir_fd=deep)
            os.close(deep)
            deep = nxt
        f = os.open("hidden", os.O_WRONLY | os.O_CREAT, dir_fd=deep)
        os.write(f, b"z" * MIB)
        os.close(f)
    finally:
        os.close(deep)
    u = limits.disk_usage([tmp_path], 1000)
    assert u.complete and u.bytes >= 3 * MIB, u
    u = limits.disk_usage([tmp_path], 1000, max_depth=100)
    assert not u.complete and "deeper than 100" in u.why, u


async def test_without_cgroups_the_rlimits_hold_for_the_agent_and_its_terminals(tmp_path, git_env):
    """The documented fallback (a machine without cgroups): RLIMIT_DATA bounds each process's memory (a 1 GiB
    allocation fails in the agent, which lives on), RLIMIT_FSIZE each file; a terminal takes the same limits."""
    lim = LimitsConfig(memory_mib=256, disk_mib=50, cgroups=False)
    turn = [
        Step(do="exec", text="result = len(b'x' * (1 << 30))"),
        sh("ulimit -d; ulimit -f"),
        Step(do="terminal", text="python3 -c 'import resource as r; print(r.getrlimit(r.RLIMIT_DATA)[0] // 1024, "
                                 "r.getrlimit(r.RLIMIT_FSIZE)[0] // 512)'"),
        sh("echo alive"),
    ]
    run_dir, services, host, _ = start(tmp_path, ["w001"], [turn], lim, {})
    w1 = host.workers["w001"]
    await host.start()
    try:
        await host.launch("w001")
        await await_for(lambda: w1.turns_finished >= 1, 120, "the turn to end")
    finally:
        await host.stop()
        services.close()
    got = results(host, "w001", 0)
    assert not got[0]["ok"] and "MemoryError" in out(got[0]), got[0]
    expected = [str(256 * 1024), str(50 * MIB // 512)]  # KiB; 512-byte blocks
    assert out(got[1]).split() == expected and out(got[2]).split() == expected, (got[1], got[2])
    assert out(got[3]).strip() == "alive" and not w1.crashed
    started = next(r for r in lifecycle(run_dir) if r["event"] == "started")
    assert "rlimits (cgroups off" in started["detail"], started
