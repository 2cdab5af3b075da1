"""The real agent CLIs (installed from npm by .ci/run) driven by a real
WorkerHost: ACP over stdio, our MCP tools over HTTP, a real forge, and a
deterministic fake LLM endpoint shipped in the package (agensh_ray/fakes).

Each test skips, saying how to install, when its CLI is missing.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from agensh_ray.agent.client import SessionObserver
from agensh_ray.agent.harness import get_harness
from agensh_ray.agent.session import ProcessSession
from agensh_ray.errors import AgentNeedsCredentials, HarnessError
from agensh_ray.fakes.anthropic_server import FakeAnthropic
from agensh_ray.fakes.openai_server import FakeOpenAI
from agensh_ray.fakes.script import Script, Step, Turn
from agensh_ray.fakes.textkit import feature_turn
from agensh_ray.models import Delivery, now_us
from tests.support import LocalServices, await_for

pytestmark = [pytest.mark.real_agent, pytest.mark.timeout(300)]

WORKERS = ["w001", "w002"]
PACKAGES = {
    "copilot": "@github/copilot@1.0.102",
    "claude": "@zed-industries/claude-code-acp@0.16.2",
    "codex": "@zed-industries/codex-acp@0.16.0",
    "gemini": "@google/gemini-cli@0.61.0",
}


def need(name: str) -> None:
    try:
        get_harness(name).argv()
    except HarnessError:
        pytest.skip(
            f"the {name} CLI is not installed: npm install -g --prefix .ci/node {PACKAGES[name]} "
            "(.ci/run does it; see docs/real-agents.md)"
        )


def deliver_dm(host, msg) -> None:
    """Hand a DM to the worker's host as the RouterActor would (urgent: appended to the next tool result)."""
    host.deliver([Delivery(event_id=msg.event_id, worker_id=msg.to, priority="high", kind="dm",
                           text=f"[DM from {msg.sender}] {msg.text}", enqueue_ts=now_us())],
                 {"chat": msg.seq})


def table(run_dir: Path, name: str) -> list[dict]:
    rows: list[dict] = []
    for f in sorted((run_dir / "trace" / name).glob("*.parquet")):
        rows += pq.read_table(f).to_pylist()
    return rows


@pytest.fixture
def services(tmp_path, git_env):
    s = LocalServices(tmp_path / "svc", WORKERS)
    yield s
    s.close()


@pytest.fixture
def openai_fake():
    fakes: list[FakeOpenAI] = []

    def make(script: Script) -> FakeOpenAI:
        fake = FakeOpenAI(script)
        fake.start()
        fakes.append(fake)
        return fake

    yield make
    for f in fakes:
        f.close()


def copilot_env(monkeypatch, url: str) -> None:
    monkeypatch.setenv("COPILOT_PROVIDER_BASE_URL", url)
    monkeypatch.setenv("COPILOT_PROVIDER_API_KEY", "sk-fake-copilot-0123456789")
    monkeypatch.setenv("COPILOT_MODEL", "gpt-4.1")
    monkeypatch.setenv("COPILOT_OFFLINE", "true")


async def test_copilot_one_whole_loop_through_our_tools_and_its_own_shell(
    services, openai_fake, monkeypatch, tmp_path
):
    need("copilot")
    dm = "w002 here: I take lower, you keep upper"
    fake = openai_fake(Script(workers={"w001": [feature_turn(services.task, 0, dm_gate="dm")]}))
    copilot_env(monkeypatch, fake.url)
    run_dir = tmp_path / "run"
    host = services.host(run_dir, WORKERS, harness="copilot")
    await host.start()
    w = host.workers["w001"]
    try:
        await host.launch("w001")
        # Mid-turn: the model's answer after board_read is held until a DM is queued for w001.
        assert await asyncio.to_thread(fake.wait_held, "dm", 120), "copilot never got to its CLAIM step"
        deliver_dm(host, services.chat_plain.dm("w002", "w001", dm))
        assert host.inbox.has_urgent("w001")
        fake.open_gate("dm")
        await await_for(lambda: w.turn >= 1 and not w.in_turn, 180, "the first turn to end")
        session_pid = w.session.pid
        assert session_pid and w.crashed == 0
    finally:
        await host.stop()

    merged = [p for p in services.forge_plain.pr_list("merged") if p.author == "w001"]
    assert len(merged) == 1, services.forge_plain.pr_list("all")
    assert set(merged[0].files) == {"textkit/commands/upper.py", "textkit/registry.py"}
    entries = [(e.type.value, e.worker_id) for e in services.board_plain.recent()]
    assert ("CLAIM", "w001") in entries and ("PATCH_SUMMARY", "w001") in entries

    # The DM reached the model inside a tool result of a later request (appended to board_write's result).
    carrying = [r for r in fake.requests if any(dm in text for text in r.results())]
    assert carrying, "the DM never reached the model"
    assert any("[DM from w002]" in t and t.startswith("written: #") for t in carrying[0].results())

    calls = table(run_dir, "tool_calls")
    mcp = [c["tool"] for c in calls if c["source"] == "mcp"]
    for tool in ("board_read", "board_write", "pr_create", "pr_merge"):
        assert tool in mcp, mcp
    assert mcp.count("board_write") == 2
    agent = [c for c in calls if c["source"] == "agent"]
    assert len(agent) >= 9 and all(c["duration_ms"] is not None for c in agent)
    assert all(c["ok"] for c in calls), [c for c in calls if not c["ok"]]
    turns = table(run_dir, "turns")
    first = [t for t in turns if t["turn"] == 1]
    assert {t["phase"] for t in first} == {"start", "end"}
    assert [t["stop_reason"] for t in first if t["phase"] == "end"] == ["end_turn"]
    usage = table(run_dir, "usage")
    assert usage and usage[0]["input_tokens"] > 0 and usage[0]["output_tokens"] > 0
    deliveries = table(run_dir, "deliveries")
    assert any(d["kind"] == "dm" and d["via"] == "mid_turn" for d in deliveries)
    # No credential in the trace or the logs.
    blob = json.dumps([calls, turns, table(run_dir, "lifecycle")], default=str)
    for f in (run_dir / "logs").glob("*"):
        blob += f.read_text(errors="replace")
    assert "sk-fake-copilot-0123456789" not in blob and w.token not in blob
    # It ran in its sandbox, reaching only its forge, its tools and the fake model through the relays.
    started = [r["detail"] for r in table(run_dir, "lifecycle") if r["event"] == "started"]
    assert started and "sandbox: network isolated: only forge" in started[0] and "model (COPILOT" in started[0]


@pytest.mark.parametrize("restore", ["session_load", "handoff"])
async def test_copilot_killed_mid_turn_is_restarted_and_resumes(
    restore, services, openai_fake, monkeypatch, tmp_path
):
    """Kill the agent while the model is thinking; the worker restarts it and the work goes on:
    with session/load (Copilot supports it), or, when the saved session is gone, in a new session
    primed with a hand-off summary of the worker's claims, PRs and the last board entries."""
    need("copilot")
    script = Script(workers={"w001": [
        Turn(steps=[
            Step(tool="board_write", args={"type": "CLAIM", "text": "claim upper: textkit/commands/upper.py"}),
            Step(tool="board_write", args={"type": "OBSERVED", "text": "about to be killed"}, gate="crash"),
            Step(say="unreachable: the process is killed before this"),
        ]),
        Turn(match="Resume your work", steps=[
            Step(tool="board_write", args={"type": "FACT", "text": "${worker} resumed after its agent was killed"}),
            Step(say="Resumed."),
        ]),
    ]})
    fake = openai_fake(script)
    copilot_env(monkeypatch, fake.url)
    run_dir = tmp_path / "run"
    host = services.host(run_dir, WORKERS, harness="copilot")
    await host.start()
    w = host.workers["w001"]
    try:
        await host.launch("w001")
        assert await asyncio.to_thread(fake.wait_held, "crash", 120), "copilot never reached the held step"
        old_pid = w.session.pid
        if restore == "handoff":  # the saved session is lost with the process
            for d in (w.home / ".copilot" / "session-state").iterdir():
                shutil.rmtree(d) if d.is_dir() else d.unlink()
        os.killpg(old_pid, signal.SIGKILL)
        fake.open_gate("crash")
        await await_for(lambda: w.crashed == 1 and w.session.pid != old_pid and w.session.alive, 120, "the restart")
        await await_for(
            lambda: any("resumed after" in e.text for e in services.board_plain.recent()), 120, "the resumed turn"
        )
        await await_for(lambda: not w.in_turn, 60, "the resumed turn to end")
        assert not w.stopped
    finally:
        await host.stop()
    life = [(r["event"], r["detail"]) for r in table(run_dir, "lifecycle") if r["worker_id"] == "w001"]
    assert [e for e, _ in life][:3] == ["started", "crashed", "restarted"], life
    assert "exited with code -9 mid-turn" in life[1][1]
    assert life[2][1] == ("session loaded" if restore == "session_load" else "new session with hand-off summary")
    turns = table(run_dir, "turns")
    ends = {t["turn"]: t["stop_reason"] for t in turns if t["phase"] == "end"}
    assert ends[1] == "agent_died" and ends[2] == "end_turn"
    assert [t["trigger"] for t in turns if t["phase"] == "start"][:2] == ["first", "handoff"]
    resumed = fake.wait_for(lambda r: r.turn == 1 and r.step == 0, 1)
    prompt = [m.text for m in resumed.messages if m.kind == "prompt"][-1]
    if restore == "handoff":
        assert "could not be restored" in prompt and 'CLAIM w001: "claim upper' in prompt
        assert len([m for m in resumed.messages if m.kind == "prompt"]) == 1  # a new conversation
    else:
        assert "board_write" in json.dumps(resumed.body["messages"])  # the old conversation came back


async def test_claude_code_calls_our_tool_and_writes_through_fs(services, tmp_path, monkeypatch):
    need("claude")
    outside = tmp_path / "outside.txt"
    script = Script(workers={"*": [Turn(steps=[
        Step(tool="board_write", args={"type": "FACT", "text": "claude code reached the board over MCP"}),
        Step(tool="Write", args={"file_path": "${cwd}/NOTES.md", "content": "written through fs/write_text_file\n"}),
        Step(tool="Write", args={"file_path": str(outside), "content": "must not be written\n"}),
        Step(say="Done."),
    ])]})
    fake = FakeAnthropic(script)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.start())
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-fake-0123456789")
    run_dir = tmp_path / "run"
    host = services.host(run_dir, WORKERS, harness="claude")
    await host.start()
    w = host.workers["w001"]
    try:
        await host.launch("w001")
        await await_for(lambda: w.turn >= 1 and not w.in_turn, 180, "the turn to end")
        writes = list(w.session.client.files_written)
    finally:
        await host.stop()
        fake.close()
    assert w.crashed == 0
    assert [(e.type.value, e.text) for e in services.board_plain.recent()] == [
        ("FACT", "claude code reached the board over MCP")
    ]
    assert (w.workdir / "NOTES.md").read_text() == "written through fs/write_text_file\n"
    assert writes == [(w.workdir / "NOTES.md").resolve()]
    assert not outside.exists()
    names = [c.name for r in fake.requests if r.reply for c in r.reply.calls]
    assert names[:2] == ["mcp__agensh__board_write", "mcp__acp__Write"]
    calls = table(run_dir, "tool_calls")
    assert [c["tool"] for c in calls if c["source"] == "mcp"] == ["board_write"]
    # Claude Code announces each tool call twice: one row per call, not two.
    agent_ids = [c["tool_call_id"] for c in calls if c["source"] == "agent"]
    assert len(agent_ids) == len(set(agent_ids)) >= 2


class _Quiet(SessionObserver):
    pass


@pytest.mark.parametrize("name,key", [("codex", "OPENAI_API_KEY"), ("gemini", "GEMINI_API_KEY")])
async def test_handshake_and_a_clear_error_without_credentials(name, key, services, tmp_path, monkeypatch):
    need(name)
    for var in get_harness(name).env_keys:
        monkeypatch.delenv(var, raising=False)
    host = services.host(tmp_path / "run", WORKERS, harness=name)
    await host.start()
    w = host.workers["w001"]
    url = host.tools.url(w.id, w.token)
    workdir = tmp_path / "wd"
    workdir.mkdir()
    try:
        # Without credentials: a prompt, clear error, not a hang.
        bare = ProcessSession(get_harness(name), "w001", workdir, tmp_path / "home-bare", url, _Quiet(),
                            log_dir=tmp_path / "logs", secrets={})
        with pytest.raises(AgentNeedsCredentials) as err:  # not the start's timeout: the prompt was recognised
            await bare.start(timeout_s=60)
        assert key in str(err.value)
        assert not bare.alive
        # With (fake) credentials: initialize, authenticate, session/new with our HTTP MCP server.
        host.tools.hits.clear()
        monkeypatch.setenv(key, f"fake-{name}-key-0123456789")
        s = ProcessSession(get_harness(name), "w001", workdir, tmp_path / "home", url, _Quiet(),
                         log_dir=tmp_path / "logs", secrets={})
        session_id = await s.start(timeout_s=90)
        try:
            assert session_id and s.alive and s.can_load
            # It connected to our MCP server (Gemini without --skip-trust would silently not).
            await await_for(lambda: host.tools.hits.get("w001", 0) >= 2, 30, f"{name} to connect to the MCP server")
        finally:
            await s.close()
        assert not s.alive
        assert f"fake-{name}-key-0123456789" not in (tmp_path / "logs" / "w001.agent.stderr").read_text()
    finally:
        await host.stop()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_run_with_two_copilot_workers_against_the_fake_endpoint_merges_two_prs(tmp_path):
    """The acceptance run, as docs/real-agents.md tells it: the bundled fake endpoint in one process,
    `python -m agensh_ray.run --harness copilot --workers 2` in another; each worker merges a PR."""
    need("copilot")
    fake = subprocess.Popen(
        [sys.executable, "-m", "agensh_ray.fakes.openai_server", "--script", "textkit", "--port", "0"],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        line = fake.stdout.readline()
        assert "listening on http://127.0.0.1:" in line, line
        url = line.split("listening on ", 1)[1].strip()
        env = dict(os.environ, COPILOT_PROVIDER_BASE_URL=url, COPILOT_PROVIDER_API_KEY="sk-fake-0123456789",
                   COPILOT_MODEL="gpt-4.1", COPILOT_OFFLINE="true")
        run = subprocess.run(
            [sys.executable, "-m", "agensh_ray.run", "--harness", "copilot", "--workers", "2", "--time-scale", "60",
             "--run-dir", str(tmp_path), "--run-id", "acceptance"],
            env=env, capture_output=True, text=True, timeout=540,
        )
    finally:
        fake.terminate()
        fake.wait(10)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    summary = json.loads((tmp_path / "acceptance" / "summary.json").read_text())
    assert summary["prs_merged"] == 2 and summary["merged_pr_authors"] == 2, summary
    assert summary["board_entries"].get("PATCH_SUMMARY") == 2 and summary["score"] > 0, summary
    assert "sk-fake-0123456789" not in run.stdout + run.stderr
