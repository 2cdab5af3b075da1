"""The parts of the agent plumbing that need no agent CLI: the secrets file,
what each agent may see, redaction, the permission policy (its table, case by
case), and a real ACP agent subprocess for the stderr log and the crash message."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import pytest
from acp import RequestError
from acp.schema import PermissionOption, ToolCallLocation, ToolCallUpdate

from agensh_ray.agent.client import SessionObserver, WorkdirClient
from agensh_ray.agent.harness import get_harness, read_secrets
from agensh_ray.agent.policy import PermissionPolicy
from agensh_ray.agent.session import ProcessSession
from agensh_ray.errors import AgentDied, HarnessError


def test_secrets_file_feeds_only_the_agent_that_needs_it(tmp_path, monkeypatch):
    f = tmp_path / "secrets.env"
    f.write_text("# agents\nexport ANTHROPIC_API_KEY='sk-ant-from-file'\nOPENAI_API_KEY=sk-openai-from-file\n")
    monkeypatch.setenv("AGENSH_SECRETS_FILE", str(f))
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    assert read_secrets() == {"ANTHROPIC_API_KEY": "sk-ant-from-file", "OPENAI_API_KEY": "sk-openai-from-file"}
    claude = get_harness("claude").environment(tmp_path / "h1", {})
    assert claude["ANTHROPIC_API_KEY"] == "sk-ant-from-file" and "OPENAI_API_KEY" not in claude
    codex = get_harness("codex").environment(tmp_path / "h2", {})
    assert codex["OPENAI_API_KEY"] == "sk-openai-from-file" and "ANTHROPIC_API_KEY" not in codex
    # An unknown (cmd:) agent gets what the file holds and nothing else of the user's.
    monkeypatch.setenv("SOME_USER_SECRET_TOKEN", "not-for-agents")
    other = get_harness("cmd:my-agent --acp").environment(tmp_path / "h3", {})
    assert other["OPENAI_API_KEY"] == "sk-openai-from-file" and "SOME_USER_SECRET_TOKEN" not in other
    f.write_text("not a pair\n")
    with pytest.raises(HarnessError, match="expected KEY=VALUE"):
        read_secrets()


def test_redaction_knows_credentials_by_name_only(tmp_path):
    h = get_harness("copilot")
    env = {"COPILOT_PROVIDER_API_KEY": "sk-abcdef", "GH_TOKEN": "ghp_123456", "GIT_AUTHOR_EMAIL": "w001@x.invalid"}
    text = h.redact("key sk-abcdef token ghp_123456 by w001@x.invalid", env)
    assert text == "key *** token *** by w001@x.invalid"


def test_copilot_shares_one_package_cache_and_keeps_its_own_config(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENSH_CACHE_DIR", str(tmp_path / "cache"))
    a = get_harness("copilot").environment(tmp_path / "a", {})
    b = get_harness("copilot").environment(tmp_path / "b", {})
    assert a["XDG_CACHE_HOME"] == b["XDG_CACHE_HOME"] == str(tmp_path / "cache" / "copilot")
    assert a["COPILOT_HOME"] != b["COPILOT_HOME"] and a["COPILOT_HOME"].startswith(str(tmp_path / "a"))
    assert a["PATH"].split(":")[0] == str(Path(sys.executable).parent)


class Seen(SessionObserver):
    def __init__(self):
        self.permissions: list[tuple[str, bool, str]] = []
        self.refused: list[tuple[str, str]] = []

    def on_permission(self, title, allowed, reason):
        self.permissions.append((title, allowed, reason))

    def on_refused(self, what, reason):
        self.refused.append((what, reason))


OPTIONS = [
    PermissionOption(option_id="yes", name="Allow", kind="allow_once"),
    PermissionOption(option_id="always", name="Always", kind="allow_always"),
    PermissionOption(option_id="no", name="Reject", kind="reject_once"),
]


def _clone(root: Path) -> Path:
    """A worker's workdir: a git clone on main (the policy reads its current branch)."""
    wd = root / "workers" / "w001" / "repo"
    wd.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(wd)], check=True)
    (wd / "sub").mkdir()
    return wd


@pytest.fixture
def clone(tmp_path):
    return _clone(tmp_path)


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    """One clone for the policy's tables (they only read it)."""
    return _clone(tmp_path_factory.mktemp("policy"))


async def test_permissions_are_chosen_by_kind_inside_the_workdir_only(clone):
    seen = Seen()
    c = WorkdirClient(clone, seen, PermissionPolicy(clone, "w001"), {})

    async def ask(**call) -> str:
        resp = await c.request_permission(OPTIONS, "s", ToolCallUpdate(tool_call_id="t", **call))
        return resp.outcome.option_id

    inside = [ToolCallLocation(path=str(clone / "a.md"))]
    assert await ask(title="Write notes", kind="edit", locations=inside) == "yes"
    assert await ask(title="Write", kind="edit", raw_input={"file_path": "/etc/passwd"}) == "no"
    assert await ask(title="Bash", kind="execute", raw_input={"command": "git push origin main"}) == "no"
    assert await ask(title="Read", kind="read", raw_input={"path": "/usr/lib/python3/os.py"}) == "no"
    assert await ask(title="agensh-board_write", kind="other", raw_input={"type": "FACT", "text": "x"}) == "yes"
    assert [a for _, a, _ in seen.permissions] == [True, False, False, False, True]
    assert seen.permissions[1][2] == f"the path `/etc/passwd` is outside your workdir {clone}; work inside your clone"
    assert seen.permissions[2][2].startswith("pushing to main (`main`) is refused: main is protected")
    with pytest.raises(RequestError) as refused:
        await c.write_text_file("x", str(clone.parent / "escape.txt"), "s")
    assert "outside the worker's workdir" in str(refused.value.data)
    assert str(refused.value).startswith("refused by the worker's permission policy: ")
    await c.write_text_file("x", "inside.txt", "s")
    assert c.files_written == [(clone / "inside.txt").resolve()]


async def test_a_refused_terminal_command_never_runs_and_says_why(clone):
    seen = Seen()
    c = WorkdirClient(clone, seen, PermissionPolicy(clone, "w001"), {"PATH": "/usr/bin:/bin"})
    with pytest.raises(RequestError) as refused:
        await c.create_terminal("/bin/sh", "s", args=["-c", "touch ran && git push -f origin HEAD:main"])
    assert str(refused.value) == ("refused by the worker's permission policy: force pushes (`-f`) are refused: never "
                                  "rewrite pushed history; merge main into your branch instead of rebasing")
    assert not (clone / "ran").exists()
    assert seen.refused == [("/bin/sh -c touch ran && git push -f origin HEAD:main", str(refused.value)[43:])]
    t = await c.create_terminal("/bin/sh", "s", args=["-c", "echo ok > ran && git status --short"])
    await c.wait_for_terminal_exit("s", t.terminal_id)
    assert (clone / "ran").read_text() == "ok\n"
    await c.close_terminals()


# The policy's table: (command line, None if allowed else a fragment of the reason).
COMMANDS = [
    ("git push origin w001/feature", None),
    ("git push -u origin w001/feature", None),
    ("git checkout -q -b w001/x && git add -A && git commit -qm 'x' && git push -q origin HEAD", None),
    ("git push origin --delete w001/old", None),
    ("git push origin :w001/old", None),
    ("git push origin HEAD:refs/heads/w001/x", None),
    ("git push -f origin HEAD:main", "force pushes (`-f`)"),
    ("git push --force origin w001/x", "force pushes (`--force`)"),
    ("git push --force-with-lease origin w001/x", "force pushes (`--force-with-lease`)"),
    ("git push --force-with-lease=w001/x:abc origin w001/x", "force pushes"),
    ("git push -uf origin w001/x", "force pushes (`-uf`)"),
    ("git push origin +w001/x", "force pushes (`+w001/x`)"),
    ("git push origin +HEAD:w001/x", "force pushes"),
    ("git push --mirror", "`git push --mirror` is refused"),
    ("git push --all origin", "`git push --all` is refused"),
    ("git push --tags origin", "`git push --tags` is refused"),
    ("git push --prune origin", "`git push --prune` is refused"),
    ("git push origin main", "pushing to main (`main`)"),
    ("git push origin HEAD:main", "pushing to main (`HEAD:main`)"),
    ("git push origin refs/heads/main", "pushing to main"),
    ("git push origin w001/x:refs/heads/main", "pushing to main"),
    ("git push origin HEAD:Main", "pushing to main"),
    ("git push origin HEAD:refs/heads/MAIN", "pushing to main"),
    ("git push origin HEAD:heads/main", "pushing to main"),  # git takes heads/main on the remote to refs/heads/main
    ("git push origin w001/x:heads/Main", "pushing to main"),
    ("git push origin HEAD:HEAD", "would make a branch named HEAD"),
    ("git push origin :", "pushes many branches, main among them"),
    ("git push origin 'refs/heads/*:refs/heads/*'", "pushes many branches"),
    ("git push", "pushing to main (`HEAD`)"),  # the clone is on main
    ("git push origin HEAD", "pushing to main (`HEAD`)"),
    ("git checkout main && git push -u origin HEAD", "pushing to main"),
    ("git -C sub push origin main", "pushing to main"),
    ("git push origin --delete w002/x", "deleting the branch `w002/x`"),
    ("git push origin :w002/x", "deleting the branch `w002/x`"),
    ("git push -d origin main", "deleting the branch `main`"),
    ("bash -c 'git push -f origin x'", "force pushes"),
    ("sh -lc \"git push origin HEAD:main\"", "pushing to main"),
    ("eval 'git push --force'", "force pushes"),
    ("echo $(git push -f)", "force pushes"),
    ("rm -rf ~", "`~` is in a home folder"),
    ("rm -rf /", "`/` is outside your workdir"),
    ("rm -rf $HOME/.config", "in a home folder"),
    ("cat /etc/shadow", "`/etc/shadow` is outside your workdir"),
    ("cat ../../w002/repo/.git/config", "outside your workdir"),
    ("grep user ../../../forge/state.jsonl", "outside your workdir"),
    ("touch ../escape.txt", "outside your workdir"),
    ("cd .. && ls", "the folder `..` is outside"),
    ("cd", "`cd` alone goes to the home folder"),
    ("echo x > /etc/motd", "the redirection target `/etc/motd`"),
    ("cat < /etc/passwd", "the redirection target"),
    ("FOO=/etc/x make", "the path `/etc/x`"),
    ("env GIT_DIR=/other/.git git status", "the path `/other/.git`"),
    ("make --directory=/usr/src", "the path `/usr/src`"),
    ("git -C /work/other status", "outside your workdir"),
    ('echo "`cat ~/.ssh/id_rsa`"', "in a home folder"),
    ("ls /usr/include", "outside your workdir"),
    ("xargs rm -rf ~", "in a home folder"),
    ("timeout 5 cat /etc/shadow", "outside your workdir"),
    ("sudo ls", "`sudo` is refused: workers have no root"),
    ("su -c id", "`su` is refused"),
    ("curl http://example.com", "`curl` is not on the list of programs"),
    ("wget http://example.com", "`wget` is not on the list"),
    ("nc -l 8080", "`nc` is not on the list"),
    ("pkill python", "`pkill` is not on the list"),
    ("kill -9 -1", "`kill -1` would signal a whole process group"),
    ("kill 0", "`kill 0`"),
    ("cat 'unterminated", "cannot be parsed"),
    ("cd sub && cat ../README.md", None),
    ("ls 2>/dev/null | wc -l", None),
    ("python3 checks/check.py upper", None),
    ("python3.11 -m pytest -q tests", None),
    ("/usr/bin/python3 -c 'import sys; print(sys.version)'", None),
    ("./build.sh && sub/run --fast", None),
    ("grep -rn '/usr/' . | head", None),
    ("sed -i 's/a/b/' x.py && sed -e '/^#/d' y.txt && awk '/x/ {print $1}' z", None),
    ("node -e 'console.log(1/2)'", None),
    ("find . -name '*.py' | xargs grep -l foo", None),
    ("kill -9 1234; kill %1", None),
    ("echo '/etc/shadow is a path' && printf '%s\\n' /root", None),
    ("git diff HEAD~1 -- sub && git log --oneline -5", None),
    ("cat > x.py <<'EOF'\n#!/usr/bin/env python3\nprint(open('/etc/passwd').read())\nEOF\npython3 x.py", None),
    ("grep -qs 'merge=union' .git/info/attributes || echo 'r merge=union' >> .git/info/attributes", None),
    ("command -v jq || which rg", None),
]


@pytest.mark.security
@pytest.mark.parametrize("line,refused", COMMANDS, ids=[c[0][:50] for c in COMMANDS])
def test_the_command_policy(repo, line, refused):
    reason = PermissionPolicy(repo, "w001").command(line)
    if refused is None:
        assert reason is None, reason
    else:
        assert reason is not None and refused in reason, reason


def test_tmp_is_allowed_only_where_it_is_private(clone):
    assert "outside your workdir" in PermissionPolicy(clone, "w001").command("echo x > /tmp/out && cat /tmp/out")
    assert PermissionPolicy(clone, "w001", private_tmp=True).command("echo x > /tmp/out && cat /tmp/out") is None
    assert "outside" in PermissionPolicy(clone, "w001", private_tmp=True).command("cat /tmp/../etc/shadow")


@pytest.mark.parametrize("kind,raw,locations,refused", [
    ("think", None, [], None),
    ("switch_mode", None, [], None),
    ("read", {"path": "README.md"}, [], None),
    ("read", {"path": "/etc/shadow"}, [], "`/etc/shadow` is outside your workdir"),
    ("search", {"path": "../.."}, [], "outside your workdir"),
    ("edit", {"file_path": "sub/a.py"}, [], None),
    ("edit", None, ["/root/.bashrc"], "outside your workdir"),
    ("delete", {"path": "~/notes"}, [], "in a home folder"),
    ("move", {"source": "a.py", "destination": "../../b.py"}, [], "outside your workdir"),
    ("fetch", {"url": "https://example.com"}, [], "fetching from the web is not allowed"),
    ("execute", {"command": "git push -f origin HEAD:main"}, [], "force pushes"),
    ("execute", {"command": ["bash", "-lc", "rm -rf ~"]}, [], "in a home folder"),
    ("execute", {"command": "ls", "cwd": "/etc"}, [], "`/etc` is outside your workdir"),
    ("execute", {}, [], "no command line to check"),
    ("other", {"type": "CLAIM", "text": "upper: textkit/commands/upper.py"}, [], None),
    (None, {"command": "sudo id"}, [], "`sudo` is refused"),
    (None, {"path": "/etc/hosts"}, [], "outside your workdir"),
    ("install_everything", {}, [], "kind `install_everything` is not on the list"),
])
def test_the_tool_call_policy(repo, kind, raw, locations, refused):
    reason = PermissionPolicy(repo, "w001").tool_call(kind, "", raw, locations)
    if refused is None:
        assert reason is None, reason
    else:
        assert reason is not None and refused in reason, reason


def test_a_tool_call_without_raw_input_is_judged_by_its_title(clone):
    policy = PermissionPolicy(clone, "w001")
    assert "force pushes" in policy.tool_call("execute", "`git push --force`", None)
    assert policy.tool_call("execute", "`git status`", None) is None


async def test_a_dead_agent_is_reported_with_its_redacted_last_words(tmp_path, monkeypatch):
    """A real ACP subprocess that dies during initialize: clear error, stderr in the log, no secret."""
    script = tmp_path / "agent.py"
    script.write_text("import os, sys\nsys.stderr.write('boom, key=' + os.environ['ANTHROPIC_API_KEY'] + '\\n')\n"
                      "sys.exit(3)\n")
    monkeypatch.setenv("AGENSH_SECRETS_FILE", str(tmp_path / "s.env"))
    (tmp_path / "s.env").write_text("ANTHROPIC_API_KEY=sk-very-secret-1234\n")
    h = get_harness(f"cmd:{sys.executable} {script}")
    s = ProcessSession(h, "w001", tmp_path, tmp_path / "home", "http://127.0.0.1:9/w/w001/tok123456/mcp",
                     SessionObserver(), log_dir=tmp_path / "logs")
    with pytest.raises(AgentDied) as err:
        await asyncio.wait_for(s.start(timeout_s=30), 40)
    assert "exited with code 3 during initialize" in str(err.value) and "boom" in str(err.value)
    log = (tmp_path / "logs" / "w001.agent.stderr").read_text()
    assert "boom, key=***" in log
    assert "sk-very-secret-1234" not in log + str(err.value)


async def test_a_session_on_a_restarted_shared_agent_is_told_it_died_and_opens_a_new_one(tmp_path):
    """Two workers' sessions on one shared sim process (--workers-per-actor): the process dies, the session
    in a turn restarts it; the other one, idle meanwhile, is told at its next prompt that its agent died
    (AgentDied: the worker recovers) instead of prompting the new process with a session it never opened
    (which failed every later turn as a turn error)."""
    from agensh_ray.agent.mux import MuxSession, SharedAgent

    h = get_harness("sim")
    home = tmp_path / "home"
    shared = SharedAgent(h, h.environment(home=home, extra={}), tmp_path, tmp_path / "logs", "h000.shared-agent")
    sessions = []
    for w in ("w001", "w002"):
        (tmp_path / w).mkdir()
        sessions.append(MuxSession(shared, w, tmp_path / w, f"http://127.0.0.1:9/w/{w}/tok/mcp", SessionObserver()))
    a, b = sessions
    try:
        await asyncio.wait_for(a.start(timeout_s=30), 40)
        await asyncio.wait_for(b.start(timeout_s=30), 40)
        old_pid, old_b = shared.process.proc.pid, b.session_id
        shared.process.proc.kill()
        await shared.process.proc.wait()
        assert not a.alive and not b.alive
        await asyncio.wait_for(a.restart(), 40)  # the session that saw the death restarts the process
        assert a.alive and shared.process.proc.pid != old_pid and not b.alive
        with pytest.raises(AgentDied, match="restarted since this session opened"):
            await b.prompt("go on")
        await asyncio.wait_for(b.restart(), 40)  # what the worker's recover() does: a new session, same process
        assert b.alive and b.session_id != old_b and shared.process.proc.pid != old_pid
        assert set(shared.client.clients) == {a.session_id, b.session_id}
    finally:
        for s in sessions:
            await s.close()
        await shared.close()


async def test_an_overdue_turn_on_a_shared_agent_ends_alone_and_the_others_go_on(tmp_path):
    """Two workers' sessions on one shared agent process (--workers-per-actor): one turn passes its deadline. Only
    that session is ended (cancelled and dropped, TurnDeadline); the process is not killed, the other worker's turn
    on it ends normally, and the late worker's recovery opens a new session on the same process."""
    import json

    from agensh_ray.agent.mux import MuxSession, SharedAgent
    from agensh_ray.errors import TurnDeadline

    script = tmp_path / "script.json"  # per session: turn 0 answers, turn 1 takes 3 s
    script.write_text(json.dumps({"turns": [[{"do": "say", "text": "hi"}], [{"do": "sleep", "seconds": 3},
                                                                           {"do": "say", "text": "done"}]]}))
    h = get_harness(f"cmd:{sys.executable} -m agensh_ray.fakes.acp_agent --script {script} --log {tmp_path / 'a.jsonl'}")
    shared = SharedAgent(h, h.environment(home=tmp_path / "home", extra={}), tmp_path, tmp_path / "logs", "h000.shared")
    sessions = []
    for w in ("w001", "w002"):
        (tmp_path / w).mkdir()
        sessions.append(MuxSession(shared, w, tmp_path / w, f"http://127.0.0.1:9/w/{w}/tok/mcp", SessionObserver()))
    late, other = sessions
    try:
        for s in sessions:
            await asyncio.wait_for(s.start(timeout_s=30), 40)
            assert (await asyncio.wait_for(s.prompt("first"), 30))[1] == "hi"
        pid, old = shared.process.proc.pid, late.session_id
        others_turn = asyncio.create_task(other.prompt("work"))
        with pytest.raises(TurnDeadline, match="session .* cancelled and dropped"):
            await asyncio.wait_for(late.prompt("work", deadline_s=1.0), 30)
        assert shared.alive and shared.process.proc.pid == pid and old not in shared.client.clients
        assert await asyncio.wait_for(others_turn, 30) == ("end_turn", "done")
        await asyncio.wait_for(late.restart(), 30)  # what the worker's recover() does
        assert late.alive and late.session_id != old and shared.process.proc.pid == pid
        assert (await asyncio.wait_for(late.prompt("again"), 30))[1] == "hi"  # a new session: its turn 0
    finally:
        for s in sessions:
            await s.close()
        await shared.close()


def test_children_of_reads_the_kernels_list_and_matches_a_walk_of_proc():
    """`children_of` (the kernel's per-thread children lists) names the same processes as psutil's walk of all of
    /proc, threads' children included, and a process that is gone is NoSuchProcess."""
    import psutil

    from agensh_ray.agent.process import children_of

    # The second child is started by a thread that stays alive: the kernel lists it under that thread's task only.
    code = ("import subprocess, sys, threading\n"
            "kids, up, done = [subprocess.Popen(['sleep', '60'])], threading.Event(), threading.Event()\n"
            "def spawn():\n"
            "    kids.append(subprocess.Popen(['sleep', '60'])); up.set(); done.wait()\n"
            "t = threading.Thread(target=spawn); t.start(); up.wait()\n"
            "print('ready', flush=True); sys.stdin.read()\n"
            "[k.kill() for k in kids]; done.set(); t.join()")
    parent = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout.readline().strip() == "ready"
        mine = sorted(children_of(parent.pid))
        assert len(mine) == 2 and mine == sorted(c.pid for c in psutil.Process(parent.pid).children())
    finally:
        parent.communicate("", timeout=30)
    with pytest.raises(psutil.NoSuchProcess):
        children_of(parent.pid)


async def test_the_agent_below_its_sandbox_is_found_once_and_never_named_once_gone(tmp_path, monkeypatch):
    """A sandboxed agent (bubblewrap and its relay, as in a run): `agent_pid` walks down past them to the agent's
    own process once, keeps it while it lives (a turn asks every 2 s: no walk each time), and never names it once
    it is gone (its pid could be anybody's next)."""
    import os
    import signal

    import psutil

    from agensh_ray.agent import process as agent_process
    from agensh_ray.agent.process import AgentProcess
    from agensh_ray.agent.sandbox import SandboxPolicy

    work = tmp_path / "w"
    work.mkdir()
    argv, env = ["sleep", "120"], {"PATH": "/usr/bin:/bin"}
    # An endpoint to reach: the chain is bwrap, its relay, the agent, as in a run.
    policy = SandboxPolicy.build(argv=argv, env=env, writable=[work], chdir=work,
                                 endpoints={"mcp": "http://127.0.0.1:59999/w/mcp"})
    proc = AgentProcess(argv, env, work, tmp_path / "agent.stderr", sandbox=policy)
    await proc.start()
    try:
        def agent_cmd() -> list[str]:
            pid = proc.agent_pid()
            return psutil.Process(pid).cmdline() if pid is not None else []

        for _ in range(100):
            if agent_cmd()[:1] == ["sleep"]:
                break
            await asyncio.sleep(0.1)
        first = proc.agent_pid()
        assert first != proc.proc.pid and psutil.Process(first).cmdline() == ["sleep", "120"]
        assert psutil.Process(first).ppid() != proc.proc.pid  # below bwrap's and the relay's own processes
        walks = []
        real = agent_process.children_of
        monkeypatch.setattr(agent_process, "children_of", lambda pid: walks.append(pid) or real(pid))
        real_children = psutil.Process.children
        monkeypatch.setattr(psutil.Process, "children", lambda self, **kw: walks.append(self.pid) or real_children(self, **kw))
        assert [proc.agent_pid() for _ in range(20)] == [first] * 20 and walks == []
        os.kill(first, signal.SIGKILL)

        def gone() -> bool:
            try:
                return psutil.Process(first).status() == psutil.STATUS_ZOMBIE
            except psutil.NoSuchProcess:
                return True

        deadline = time.monotonic() + 30
        while not gone() and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert gone()
        # Once dead (a zombie included), it is not named again.
        named = [proc.agent_pid() for _ in range(5)]
        assert first not in named, named
    finally:
        await proc.stop()
