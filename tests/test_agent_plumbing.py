"""The parts of the agent plumbing that need no agent CLI: the secrets file,
what each agent may see, redaction, the permission policy, and a real ACP
agent subprocess (the sim) for the stderr log and the crash message."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from acp import RequestError
from acp.schema import PermissionOption, ToolCallLocation, ToolCallUpdate

from agensh_ray.agent.client import SessionObserver, WorkdirClient
from agensh_ray.agent.harness import get_harness, read_secrets
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

    def on_permission(self, title, allowed, reason):
        self.permissions.append((title, allowed, reason))


OPTIONS = [
    PermissionOption(option_id="yes", name="Allow", kind="allow_once"),
    PermissionOption(option_id="always", name="Always", kind="allow_always"),
    PermissionOption(option_id="no", name="Reject", kind="reject_once"),
]


async def test_permissions_are_chosen_by_kind_inside_the_workdir_only(tmp_path):
    seen = Seen()
    c = WorkdirClient(tmp_path, seen, ["git push origin main"], {})

    async def ask(**call) -> str:
        resp = await c.request_permission(OPTIONS, "s", ToolCallUpdate(tool_call_id="t", **call))
        return resp.outcome.option_id

    inside = [ToolCallLocation(path=str(tmp_path / "a.md"))]
    assert await ask(title="Write notes", kind="edit", locations=inside) == "yes"
    assert await ask(title="Write", kind="edit", raw_input={"file_path": "/etc/passwd"}) == "no"
    assert await ask(title="Bash", kind="execute", raw_input={"command": "git push origin main"}) == "no"
    assert await ask(title="Read", kind="read", raw_input={"path": "/usr/lib/python3/os.py"}) == "yes"
    assert [a for _, a, _ in seen.permissions] == [True, False, False, True]
    assert "outside the worker's workdir" in seen.permissions[1][2]
    with pytest.raises(RequestError) as refused:
        await c.write_text_file("x", str(tmp_path.parent / "escape.txt"), "s")
    assert "outside the worker's workdir" in str(refused.value.data)
    await c.write_text_file("x", "inside.txt", "s")
    assert c.files_written == [(tmp_path / "inside.txt").resolve()]


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
