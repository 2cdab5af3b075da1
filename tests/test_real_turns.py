"""One real turn per agent CLI against the bundled fake endpoint, as a user runs it: the model chosen with
--model (RunConfig.model), the endpoint and key in the CLI's own variables, through the model gateway (on by
default for such a run), a real WorkerHost, sandboxed. The scripted turn calls our MCP tool, edits a file with
the CLI's own tool and runs `printenv` in the agent's shell; the test checks the model the fake was asked for,
the trace's tool calls and usage, that every model call the CLI made (its own request pattern: streams it may
close before their end marker) is recorded answered with the fake's token counts, that nothing under the
worker's HOME holds the key, and that the shell saw no credential.

Each test skips, saying how to install, when its CLI is missing.
"""

from __future__ import annotations

import re
import secrets
import subprocess

import pytest

from agensh_ray.agent.harness import SECRET_NAME, get_harness
from agensh_ray.config import GatewayConfig, RunConfig
from agensh_ray.fakes.anthropic_server import FakeAnthropic
from agensh_ray.fakes.gemini_server import FakeGemini, model_of
from agensh_ray.fakes.openai_server import FakeOpenAI
from agensh_ray.fakes.script import Script, Step, Turn
from agensh_ray.services.gateway import GatewayServer, make_gateway
from tests.support import Awaited, LocalServices, await_for
from tests.test_real_agents import need, table

pytestmark = [pytest.mark.real_agent, pytest.mark.timeout(300)]

WORKERS = ["w001", "w002"]
MODEL = "agensh-chosen-model-1"
KEY = "sk-fake-turn-key-7d1c0e5a9b3f"
NOTE = "written by the agent's own edit tool\n"
BRANCH = "w001/agent-note"  # the forge takes a worker's own branches only
SHELL = (f"printenv && git checkout -q -b {BRANCH} && git add -A && git commit -q -m \"the agent's note\" && "
         "git push -q origin HEAD")
"""The turn's shell step: its environment (checked for credentials), then a commit pushed for a PR."""
CODEX_PATCH = "*** Begin Patch\n*** Add File: NOTES.md\n+written by the agent's own edit tool\n*** End Patch\n"

CLIS = {
    # harness: (fake endpoint, URL variable, key variable, edit step, shell step of a command line)
    "copilot": (FakeOpenAI, "COPILOT_PROVIDER_BASE_URL", "COPILOT_PROVIDER_API_KEY",
                Step(tool="create", args={"path": "${cwd}/NOTES.md", "file_text": NOTE}),
                lambda cmd: Step(tool="bash", args={"command": cmd, "description": "commit", "initial_wait": 60})),
    "claude": (FakeAnthropic, "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY",
               Step(tool="Write", args={"file_path": "${cwd}/NOTES.md", "content": NOTE}),
               lambda cmd: Step(tool="Bash", args={"command": cmd, "description": "commit", "timeout": 60000})),
    "codex": (FakeOpenAI, "OPENAI_BASE_URL", "OPENAI_API_KEY",
              Step(tool="exec_command", args={"cmd": f"apply_patch <<'EOF'\n{CODEX_PATCH}EOF\n"}),
              lambda cmd: Step(tool="exec_command", args={"cmd": cmd, "workdir": "${cwd}"})),
    # Gemini CLI writes its files itself (the worker offers it no fs/*: docs/real-agents.md), a new one too.
    "gemini": (FakeGemini, "GOOGLE_GEMINI_BASE_URL", "GEMINI_API_KEY",
               Step(tool="write_file", args={"file_path": "${cwd}/NOTES.md", "content": NOTE}),
               lambda cmd: Step(tool="run_shell_command", args={"command": cmd, "description": "commit"})),
}


@pytest.fixture
def services(tmp_path, git_env):
    s = LocalServices(tmp_path / "svc", WORKERS)
    yield s
    s.close()


def printenv_output(fake) -> str:
    """The tool result that carries printenv's output (it has HOME=...)."""
    outs = [t for r in fake.requests for t in r.results() if re.search(r'(^|\n|"|\\n)HOME=', t)]
    assert outs, "printenv's output never reached the model"
    return outs[-1]


async def real_turn(name: str, services, tmp_path, monkeypatch) -> None:
    need(name)
    fake_cls, url_var, key_var, edit, shell = CLIS[name]
    for var in get_harness(name).env_keys:
        monkeypatch.delenv(var, raising=False)
    script = Script(workers={"*": [Turn(steps=[
        Step(tool="board_write", args={"type": "FACT", "text": f"{name} reached the board over MCP"}),
        edit, shell(SHELL),
        Step(tool="pr_create", args={"head": BRANCH, "title": f"{name}'s note", "body": "written, committed, pushed"}),
        Step(say="Done."),
    ])]})
    fake = fake_cls(script)
    monkeypatch.setenv(url_var, fake.start())
    monkeypatch.setenv(key_var, KEY)
    if name == "copilot":
        monkeypatch.setenv("COPILOT_OFFLINE", "true")
    run_dir = tmp_path / "run"
    cfg = RunConfig(workers=len(WORKERS), harness=name, model=MODEL, gateway=GatewayConfig(enabled=True))
    gateway = make_gateway(cfg, run_dir, "test-run", secrets.token_bytes(32), "n1")
    server = GatewayServer(gateway)
    await server.start()
    services.gateway = Awaited(gateway)
    host = services.host(run_dir, WORKERS, harness=name, model=MODEL, gateway=cfg.gateway)
    w = host.workers["w001"]
    try:
        await host.start()
        await host.launch("w001")
        await await_for(lambda: w.turn >= 1 and not w.in_turn, 240, f"{name}'s turn to end")
    finally:
        try:
            await host.stop()
        finally:
            await server.close()
            gateway.trace.close()
            fake.close()
    life = [(r["event"], r["detail"]) for r in table(run_dir, "lifecycle")]
    assert w.crashed == 0 and not [d for e, d in life if e in ("turn_error", "crashed")], life

    # Every model call the CLI made is answered in the gateway's count (none client_gone, none failed), with
    # the tokens the fake reported.
    rows = table(run_dir, "llm_calls")
    answered = [r for r in fake.requests if r.status == 200 and r.usage]
    assert rows and [r["status"] for r in rows] == ["ok"] * len(rows), [(r["status"], r["error"]) for r in rows]
    assert sorted((r["input_tokens"], r["output_tokens"]) for r in rows) == \
        sorted((a.usage["input"], a.usage["output"]) for a in answered)
    # The fake was asked for the chosen model, every time.
    asked = {r.body.get("model") or model_of(r.path) for r in fake.requests if r.reply is not None}
    assert asked == {MODEL}, asked
    # The scripted turn ran: our tool, the CLI's own edit and shell.
    assert [(e.type.value, e.text) for e in services.board_plain.recent()] == [
        ("FACT", f"{name} reached the board over MCP")]
    assert (w.workdir / "NOTES.md").read_text() == NOTE
    calls = table(run_dir, "tool_calls")
    assert [c["tool"] for c in calls if c["source"] == "mcp"] == ["board_write", "pr_create"]
    # Its shell committed as the worker (git's identity reached it) and pushed; the PR is open on the forge.
    (pr,) = services.forge_plain.pr_list("open")
    assert (pr.author, pr.head) == ("w001", BRANCH)
    log = subprocess.run(["git", "-C", str(w.workdir), "log", "-1", "--format=%an <%ae>|%cn|%s"], capture_output=True,
                         text=True, check=True).stdout.strip()
    assert log == "w001 <w001@agensh.invalid>|w001|the agent's note", log
    agent = [c for c in calls if c["source"] == "agent"]
    assert len(agent) >= 3 and all(c["ok"] for c in agent), agent
    turns = table(run_dir, "turns")
    assert {t["model"] for t in turns} == {MODEL}
    # Usage, where the CLI reports it, is what the fake counted.
    usage = table(run_dir, "usage")
    counted = [r.usage for r in fake.requests if r.usage]
    if name in ("copilot", "gemini"):  # gemini 0.61: in the PromptResponse's _meta.quota.token_count
        assert len(usage) == 1
        assert (usage[0]["input_tokens"], usage[0]["output_tokens"]) == (
            sum(u["input"] for u in counted), sum(u["output"] for u in counted)), (usage, counted)
    else:  # claude-code-acp 0.16 and codex-acp 0.16 report no tokens with the turn
        assert usage == []
    # The agent's shell saw no credential: neither the key nor any credential variable.
    env_lines = printenv_output(fake)
    assert KEY not in env_lines
    names = re.findall(r"(?m)^([A-Za-z_][A-Za-z0-9_]*)=", env_lines.replace("\\n", "\n"))
    assert "HOME" in names and not [n for n in names if SECRET_NAME.search(n)], names
    # ... and git's identity (Gemini CLI's redaction would drop GIT_AUTHOR_*, its names hold AUTH, but for the
    # allow-list the worker writes): the agent's commits are its own.
    assert "GIT_COMMITTER_NAME" in names and ("GIT_AUTHOR_NAME" in names or "GIT_CONFIG_KEY_0" in names), names
    # Nothing the CLI left in the worker's HOME holds the key, nor its MCP token (Claude Code gets it in a header
    # and keeps its MCP URL in its logs).
    for f in w.home.rglob("*"):
        if f.is_file() and not f.is_symlink():
            data = f.read_bytes()
            assert KEY.encode() not in data and w.token.encode() not in data, f


async def test_real_turn_copilot(services, tmp_path, monkeypatch):
    await real_turn("copilot", services, tmp_path, monkeypatch)


async def test_real_turn_claude(services, tmp_path, monkeypatch):
    await real_turn("claude", services, tmp_path, monkeypatch)


async def test_real_turn_codex(services, tmp_path, monkeypatch):
    await real_turn("codex", services, tmp_path, monkeypatch)


async def test_real_turn_gemini(services, tmp_path, monkeypatch):
    await real_turn("gemini", services, tmp_path, monkeypatch)


@pytest.mark.timeout(400)
@pytest.mark.parametrize("sandbox", ["sandboxed", "no_sandbox"])
def test_driver_sigterm_mid_turn_leaves_no_agent_process(sandbox, tmp_path):
    """`python -m agensh_ray.run --harness codex` (through the model gateway), SIGTERM to the driver while its agent
    waits for the model: within 10 s no agent process is left (codex-acp's npm launcher does not forward signals;
    its native child goes with the process group, and in a sandbox with its PID namespace)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import psutil

    need("codex")
    fake = FakeOpenAI(Script(workers={"*": [Turn(steps=[Step(tool="board_read", args={}, gate="hold"),
                                                       Step(say="Done.")])]}))
    url = fake.start()
    env = {k: v for k, v in os.environ.items() if k not in get_harness("codex").env_keys}
    env.update(OPENAI_BASE_URL=url, OPENAI_API_KEY=KEY)
    driver = subprocess.Popen(
        [sys.executable, "-m", "agensh_ray.run", "--harness", "codex", "--model", MODEL, "--workers", "1",
         "--run-dir", str(tmp_path), "--run-id", "sigterm", *(["--no-sandbox"] if sandbox == "no_sandbox" else [])],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        assert fake.wait_held("hold", 240), "the agent never asked the model"
        agents = [p for p in psutil.Process(driver.pid).children(recursive=True)
                  if any("codex-acp" in part for part in p.cmdline())]
        assert len(agents) >= 2, agents  # the npm launcher and its native child
        assert {r.body.get("model") for r in fake.requests} == {MODEL}
        driver.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and [p for p in agents if p.is_running()
                                               and p.status() != psutil.STATUS_ZOMBIE]:
            time.sleep(0.2)
        left = [p for p in agents if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        assert not left, f"agent processes alive 10 s after SIGTERM: {left}"
        fake.open_gate("hold")
        out, _ = driver.communicate(timeout=180)
        assert driver.returncode == 143, out[-3000:]
        assert KEY not in out
    finally:
        fake.close()
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait(30)


async def test_a_codex_turn_whose_model_fails_is_a_model_error(services, tmp_path, monkeypatch):
    """Without the gateway: the endpoint answers every call with 500; codex-acp gives up and answers the turn
    with an error of its own. The worker counts a model error (the progress line and the summary show it)."""
    from agensh_ray.fakes.faults import FaultSchedule

    need("codex")
    for var in get_harness("codex").env_keys:
        monkeypatch.delenv(var, raising=False)
    fake = FakeOpenAI(Script(workers={"*": [Turn(steps=[Step(say="never: the provider is down")])]}),
                      faults=FaultSchedule(error_rate=1.0, error_status=500))
    monkeypatch.setenv("OPENAI_BASE_URL", fake.start())
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    run_dir = tmp_path / "run"
    host = services.host(run_dir, WORKERS, harness="codex", model=MODEL)
    await host.start()
    w = host.workers["w001"]
    try:
        await host.launch("w001")
        await await_for(lambda: w.turn >= 1 and not w.in_turn, 240, "the failing turn to end")
        status = host.status()
    finally:
        await host.stop()
        fake.close()
    assert fake.requests and {r.status for r in fake.requests} == {500}
    assert status["model_errors"] == 1 and status["turn_errors"] == 1, status
    errors = [r["detail"] for r in table(run_dir, "lifecycle") if r["event"] == "turn_error"]
    assert len(errors) == 1 and KEY not in errors[0]
