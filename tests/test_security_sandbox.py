"""A hostile worker, confined. The scripted ACP agent (agensh_ray/fakes/acp_agent.py,
through the `cmd:` harness) is run by a real WorkerHost in its bubblewrap sandbox and
attempts the attacks of issue 12 through every path an agent has: its own shell (inside
the sandbox), terminals the host runs for it (ACP terminal/create: the permission policy,
then the same sandbox), permission requests, and ACP fs/* reads and writes. Each is
refused with a clear message or sees nothing. Afterwards the same agent's next turn
reaches its MCP tools, commits in its workdir, pushes its own branches to the forge
through the sandbox's relays, and its PR merges; the other worker's clone, token and
branch are untouched."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pyarrow.parquet as pq
import pytest

from agensh_ray.agent import sandbox
from agensh_ray.agent.sandbox import SandboxPolicy, bwrap_argv
from agensh_ray.config import SandboxConfig
from agensh_ray.fakes.acp_agent import AgentScript, Step
from agensh_ray.paths import PROJECT_ROOT
from tests.support import LocalServices, await_for, wait_for

pytestmark = [
    pytest.mark.security,
    pytest.mark.skipif(sandbox.unavailable() is not None, reason=f"no sandbox here: {sandbox.unavailable()}"),
]

WORKERS = ["w001", "w002"]
REFUSED = "refused by the worker's permission policy"


def sh(text: str) -> Step:
    """A command the agent runs itself (its own subprocess: inside its sandbox, no policy)."""
    return Step(do="shell", text=text)


def term(text: str) -> Step:
    """A command the agent asks the host to run (ACP terminal/create: the policy, then its sandbox)."""
    return Step(do="terminal", text=text)


def py(code: str) -> str:
    return f"python3 -c {shlex.quote(code)} 2>&1"


def attacks(decoy_port: int) -> list[Step]:
    connect = "import socket\ntry:\n    socket.create_connection(({host!r}, {port}), 3)\n    print('CONNECTED')\n" \
              "except OSError as e:\n    print('BLOCKED', e)"
    return [
        # 0-8: its own shell, inside the sandbox
        sh("cat ../../w002/repo/.git/config 2>&1; ls ../.. 2>&1"),
        sh("grep user ../../../forge/state.jsonl 2>&1; ls ../../.. 2>&1"),
        sh("touch ../../escape.txt 2>&1; touch /escape.txt 2>&1; echo done"),
        sh("ps ax -o pid=,args= 2>&1"),
        sh(py(connect.format(host="127.0.0.1", port=decoy_port))),
        sh(py(connect.format(host="1.1.1.1", port=80))),
        sh("cat /etc/shadow 2>&1; cat ~/../../../.git/config 2>&1 | head -3; echo done"),
        sh("git commit -q --allow-empty -m evil && git push -q origin HEAD:main 2>&1; echo rc=$?; "
           "git reset -q --hard HEAD~1"),
        sh(f"ls -A {PROJECT_ROOT} 2>&1"),
        # 9-16: terminals the host runs
        term("cat ../../w002/repo/.git/config"),
        term("grep user ../../../forge/state.jsonl"),
        term(py("print(open('../../w002/repo/.git/config').read())")),
        term("git push -f origin HEAD:main"),
        term("rm -rf ~"),
        term("ps ax -o pid=,args="),
        term(py(connect.format(host="127.0.0.1", port=decoy_port))),
        term(py("open('../../escape2.txt', 'w').write('x'); print('wrote')")),
        # 17-20: permission requests
        Step(do="permission", text="git push -f origin HEAD:main", kind="execute",
             args={"command": "git push -f origin HEAD:main"}),
        Step(do="permission", text="rm -rf ~", kind="execute", args={"command": "rm -rf ~"}),
        Step(do="permission", text="Read /etc/shadow", kind="read", args={"path": "/etc/shadow"}),
        Step(do="permission", text="Edit notes.md", kind="edit", args={"path": "notes.md"}),
        # 21-23: ACP fs/*
        Step(do="read", text="/etc/shadow"),
        Step(do="read", text="../../w002/repo/.git/config"),
        Step(do="write", text="../../escape3.txt", content="x"),
        # 24: an MCP tool call: the refusals' reasons arrive with its result
        Step(do="mcp", tool="board_read", args={}),
        # 25-26: the other worker's branch, through a terminal and a permission request
        term("git push origin --delete w002/work"),
        Step(do="permission", text="git push origin +HEAD:w002/work", kind="execute",
             args={"command": "git push origin +HEAD:w002/work"}),
    ]


NORMAL_TURN = [
    Step(do="mcp", tool="board_write", args={"type": "FACT", "text": "the sandbox leaves my tools working"}),
    term("git checkout -q -b w001/hello && echo hello > hello.txt && git add hello.txt && "
         "git commit -q -m 'hello from w001' && git push -q origin HEAD && echo pushed"),
    sh("git push -q origin HEAD:refs/heads/w001/own-git 2>&1; echo rc=$?"),
    Step(do="mcp", tool="pr_create", args={"head": "w001/hello", "title": "hello", "body": "a normal PR"}),
    Step(do="mcp", tool="pr_merge", args={"number": 2}),
    # 5-14: the board answers writes as usual after the attacks (timed at the agent, through its MCP relay)
    *[Step(do="mcp", tool="board_write", args={"type": "FACT", "text": f"still answering {i}"}) for i in range(10)],
]


def steps(log: Path, turn: int) -> list[dict]:
    out = []
    for line in log.read_text().splitlines() if log.exists() else []:
        rec = json.loads(line)
        if rec["event"] == "step" and rec["turn"] == turn:
            out.append(rec)
    return out


def text(rec: dict) -> str:
    r = rec["result"]
    return r.get("output", "") if isinstance(r, dict) else str(r)


def forge_git(forge: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(forge / "repo.git"), *args], capture_output=True, text=True,
                          check=False).stdout


async def test_a_hostile_worker_is_confined_and_then_works_normally(tmp_path, git_env):
    run_dir = tmp_path / "run"
    services = LocalServices(run_dir, WORKERS)  # the run's layout: forge/, board.jsonl beside workers/
    decoy = socket.socket()
    decoy.bind(("127.0.0.1", 0))
    decoy.listen()
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    script = scripts / "hostile.json"
    script.write_text(AgentScript(turns=[attacks(decoy.getsockname()[1]), NORMAL_TURN]).model_dump_json())
    harness = f"cmd:{sys.executable} -m agensh_ray.fakes.acp_agent --script {script} --log ~/agent.jsonl"
    host = services.host(run_dir, WORKERS, harness=harness, sandbox=SandboxConfig(read_only=[scripts]))
    w1, w2 = host.workers["w001"], host.workers["w002"]
    log = w1.home / "agent.jsonl"
    w2_token = services.forge_plain.credentials.token("w002")  # the forge's state keeps only its hash
    w2_hash = services.forge_plain.store.users["w002"]
    main_before = forge_git(run_dir / "forge", "rev-parse", "main")
    await host.start()
    tree: list[psutil.Process] = []
    try:
        await asyncio.to_thread(host.workdirs.prepare, "w002", w2.workdir, w2.home, services.clone_urls["w002"])
        for args in (["checkout", "-q", "-b", "w002/work"], ["commit", "-q", "--allow-empty", "-m", "w002's work"],
                     ["push", "-q", "origin", "HEAD"]):
            subprocess.run(["git", "-C", str(w2.workdir), *args], check=True, capture_output=True)
        w2_branch = forge_git(run_dir / "forge", "rev-parse", "w002/work")
        await host.launch("w001")
        await await_for(lambda: w1.turn >= 1 and not w1.in_turn, 120, "the hostile turn to end")
        top = psutil.Process(w1.session.pid)
        tree = [top, *top.children(recursive=True)]  # psutil.Process knows its start time: no pid reuse
        host.push(w1, "nudge", "Carry on with your work.")
        await await_for(lambda: w1.turn >= 2 and not w1.in_turn, 120, "the normal turn to end")
    finally:
        await host.stop()
        services.close()
        decoy.close()

    got = steps(log, 0)
    assert len(got) == 27, [s["step"] for s in got]
    out = {s["step"]: text(s) for s in got}
    ok = {s["step"]: s["ok"] for s in got}
    # Its own shell sees no other worker, no run folder, no forge state; writes nothing outside; no other process.
    assert "No such file" in out[0] and w2_token not in out[0] and out[0].splitlines()[-1] == "w001", out[0]
    assert "No such file" in out[1] and out[1].splitlines()[-1] == "workers", out[1]
    assert not (run_dir / "workers" / "escape.txt").exists() and not Path("/escape.txt").exists()
    assert "Read-only file system" in out[2]
    procs = [line for line in out[3].splitlines() if line.strip()]
    assert len(procs) <= 6 and not any("-m pytest" in p for p in procs), procs
    assert out[4].startswith("BLOCKED") and out[5].startswith("BLOCKED"), (out[4], out[5])
    assert "Permission denied" in out[6] and "token" not in out[6]
    assert "rc=0" not in out[7]  # the forge refuses main to its own git too
    # Of the checkout, only the code it runs: no tasks (hidden tests), no runs, no .git.
    assert set(out[8].split()) <= {".venv", "agensh_ray", "actors", "services", "analysis", ".ci"}, out[8]
    # Terminals: refused with the policy's reason, or confined like its shell.
    for i in (9, 10, 12, 13):
        assert not ok[i] and REFUSED in out[i], (i, out[i])
    assert "outside your workdir" in out[9] and "force pushes" in out[12] and "home folder" in out[13]
    assert "No such file" in out[11] and w2_token not in out[11]
    assert not any("-m pytest" in line for line in out[14].splitlines()) and len(out[14].splitlines()) <= 6
    assert out[15].startswith("BLOCKED")
    assert not (run_dir / "workers" / "escape2.txt").exists()
    # Permission requests: refused (the allowed edit inside the workdir still passes).
    assert [out[i] for i in (17, 18, 19, 20)] == ["reject", "reject", "reject", "allow"]
    # fs/*: refused with the reason.
    for i in (21, 22, 23):
        assert not ok[i] and REFUSED in out[i] and "outside the worker's workdir" in out[i], out[i]
    assert not (run_dir / "workers" / "escape3.txt").exists()
    # The refusals' reasons reached the agent with its next tool result.
    assert "Refused by your permission policy: git push -f origin HEAD:main" in out[24]
    assert "force pushes (`-f`) are refused" in out[24] and "/etc/shadow" in out[24]
    assert not ok[25] and "deleting the branch `w002/work` is refused" in out[25], out[25]
    assert out[26] == "reject"

    # The same agent, next turn: tools, commit, push (terminal and its own git), a PR that merges.
    normal = {s["step"]: (s["ok"], text(s)) for s in steps(log, 1)}
    assert normal[0] == (True, normal[0][1]) and normal[0][1].startswith("written:"), normal[0]
    assert normal[1][0] and "pushed" in normal[1][1], normal[1]
    assert "rc=0" in normal[2][1], normal[2]
    assert normal[3][1].startswith("opened: PR #2"), normal[3]
    assert normal[4][1].startswith("merged: PR #2"), normal[4]
    # Board writes answer within 100 ms (median of 10, at the agent: MCP over the sandbox's relay).
    writes = [s for s in steps(log, 1) if 5 <= s["step"] <= 14]
    assert len(writes) == 10, writes
    assert all(s["ok"] and text(s).startswith("written:") for s in writes), writes
    write_ms = sorted(1000 * s["seconds"] for s in writes)
    print(f"board_write at the agent after the attacks: median {statistics.median(write_ms):.1f} ms, "
          f"max {write_ms[-1]:.1f} ms")
    assert statistics.median(write_ms) < 100, write_ms
    assert forge_git(run_dir / "forge", "show", "main:hello.txt") == "hello\n"
    assert forge_git(run_dir / "forge", "rev-parse", "main") != main_before
    branches = forge_git(run_dir / "forge", "for-each-ref", "--format=%(refname:short)", "refs/heads").split()
    assert sorted(branches) == ["main", "w001/hello", "w001/own-git", "w002/work"]
    # The other worker: its branch, token and clone untouched.
    assert forge_git(run_dir / "forge", "rev-parse", "w002/work") == w2_branch
    assert services.forge_plain.store.users["w002"] == w2_hash and services.forge_plain._authenticate("w002", w2_token)
    assert w2_token in (w2.workdir / ".git" / "config").read_text()
    # The worker that ran keeps no token in its clone once its host stopped (its origin has the bare URL).
    w1_config, w1_token = (w1.workdir / ".git" / "config").read_text(), services.forge_plain.credentials.token("w001")
    assert w1_token and w1_token not in w1_config and "origin" in w1_config
    # Traced, and nothing of the sandbox outlives the host.
    rows = [r for f in (run_dir / "trace" / "lifecycle").glob("*.parquet") for r in pq.read_table(f).to_pylist()]
    refused = [r for r in rows if r["event"] == "refused"]
    assert len(refused) >= 9 and all(r["worker_id"] == "w001" for r in refused)
    started = next(r for r in rows if r["event"] == "started")
    assert "sandbox: network isolated" in started["detail"]
    def alive() -> list[psutil.Process]:
        out = []
        for p in tree:
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(p)
            except psutil.NoSuchProcess:
                pass
        return out

    wait_for(lambda: not alive(), 30, "the sandbox's processes to end with the host")


async def test_the_shared_sim_process_is_sandboxed_with_its_hosts_workdirs(tmp_path, git_env):
    """Simulation packing: one sim process serves a host's workers, in one sandbox holding their workdirs and HOMEs
    (they see each other's clones there, nothing else of the run); its terminals join that sandbox."""
    run_dir = tmp_path / "run"
    services = LocalServices(run_dir, ["w001", "w002", "w003"])
    host = services.host(run_dir, ["w001", "w002"], harness="sim", time_scale=600)
    decoy = f"decoy-outside-{os.getpid()}"  # a process of this machine, outside the sandbox
    outside = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", decoy])
    await host.start()
    try:
        await host.launch("w001")
        await host.launch("w002")
        w1 = host.workers["w001"]
        await await_for(lambda: all(w.turn >= 1 for w in host.workers.values()), 120, "both workers to take a turn")
        c = w1.session.client
        t = await c.create_terminal("/bin/sh", w1.session.session_id,
                                    args=["-c", py("import os; print(*sorted(os.listdir('../..')), "
                                                   "*sorted(os.listdir('../../..')), *os.listdir('../../_h000'))")
                                          + "; ps ax -o args="])
        await c.wait_for_terminal_exit(w1.session.session_id, t.terminal_id)
        text = (await c.terminal_output(w1.session.session_id, t.terminal_id)).output
        out = text.split()
        await c.release_terminal(w1.session.session_id, t.terminal_id)
        # 40 s on a quiet machine; several minutes on a loaded one (the sim runs the task's checks before it pushes)
        pushed = await await_for(lambda: [e for e in services.forge_plain.events_since(0) if e.kind == "push"], 400,
                                 "a push through the shared sandbox's relay")
    finally:
        outside.kill()
        outside.wait()
        await host.stop()
        services.close()
    # not w003, not forge/, board.jsonl, logs/, not the host's seed mirror (its origin holds a token)
    assert out[:5] == ["_h000", "w001", "w002", "workers", "home"], out
    # its own PID namespace: the terminal's ps lists itself, never a process of the machine outside
    assert "ps ax -o args=" in text and decoy not in text, text
    assert pushed


@pytest.mark.parametrize("user", ["root", "nobody"])
def test_a_terminal_joins_the_running_sandbox_without_capabilities(tmp_path, user):
    """A terminal command (enter.py) joins the agent's sandbox: its /tmp, its namespaces, no capability, no way
    to gain one, the same read-only view; as root (no user namespace) and as another user (bubblewrap's two user
    namespaces: the command must end in the inner one, where it holds nothing)."""
    if os.geteuid() != 0:
        pytest.skip("runs the sandbox as root and as nobody: needs root")
    work = Path(tempfile.mkdtemp(prefix="agensh-enter-"))  # pytest's own folder is root's alone
    if user != "root":
        os.chown(work, 65534, 65534)
    as_user = [] if user == "root" else ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", "--"]
    links = tuple((link, os.readlink(link)) for link in ("/bin", "/lib", "/lib64", "/sbin") if os.path.islink(link))
    policy = SandboxPolicy(writable=(work,), read_only=(Path("/usr"), Path("/etc")), symlinks=links, chdir=work)
    info_r, info_w = os.pipe()
    agent = subprocess.Popen([*as_user, *bwrap_argv(policy, ["sh", "-c", "echo agent > /tmp/mark; exec sleep 120"],
                                                    None, info_fd=info_w, as_root=user == "root")],
                             pass_fds=(info_w,))
    os.close(info_w)
    try:
        with os.fdopen(info_r, "rb") as f:
            pid = json.loads(f.read())["child-pid"]
        argv = sandbox.enter_argv(pid, work, ["sh", "-c", "id -u; grep -E '^(CapEff|CapPrm|NoNewPrivs)' "
                                              "/proc/self/status; cat /tmp/mark; readlink /proc/self/ns/user "
                                              "/proc/self/ns/mnt /proc/self/ns/net; touch /usr/x; touch ok"])
        if user != "root":
            argv[0] = "/usr/bin/python3"  # this machine's own Python lives in root's HOME, unreadable to nobody

        def enter():
            assert agent.poll() is None, "the sandbox ended"
            res = subprocess.run([*as_user, *argv], capture_output=True, text=True, timeout=60, check=False)
            return res if "agent" in res.stdout else None

        res = wait_for(enter, 30, "the sandbox's /tmp to hold the agent's mark")
        out = res.stdout.split()
        assert out[0] == ("0" if user == "root" else "65534"), res.stdout
        assert out[1:7] == ["CapPrm:", "0000000000000000", "CapEff:", "0000000000000000", "NoNewPrivs:", "1"], out
        assert out[8:11] == [os.readlink(f"/proc/{pid}/ns/{ns}") for ns in ("user", "mnt", "net")], out
        assert out[9] != os.readlink("/proc/self/ns/mnt")
        assert "Read-only file system" in res.stderr and (work / "ok").exists()
    finally:
        agent.kill()
        agent.wait(30)
        shutil.rmtree(work)
