"""The model a run's agents use and how each CLI is told; what reaches an agent's commands; the MCP token in a
header. Plain units: no CLI is started (tests/test_real_turns.py does that)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from agensh_ray.agent.client import SessionObserver, WorkdirClient
from agensh_ray.agent.harness import get_harness
from agensh_ray.agent.policy import PermissionPolicy
from agensh_ray.config import RunConfig
from agensh_ray.fakes import responses
from agensh_ray.fakes.script import Call
from agensh_ray.run import parse_args


@pytest.fixture
def no_model_vars(monkeypatch):
    for var in ("COPILOT_MODEL", "ANTHROPIC_MODEL", "GEMINI_MODEL", "AGENSH_SECRETS_FILE"):
        monkeypatch.delenv(var, raising=False)


def test_model_from_the_flag_else_the_variable_else_the_default(no_model_vars, monkeypatch, tmp_path):
    copilot = get_harness("copilot")
    assert copilot.choose_model("m-flag") == "m-flag"
    assert copilot.choose_model(None) == "gpt-4.1"
    monkeypatch.setenv("COPILOT_MODEL", "m-env")
    assert copilot.choose_model(None) == "m-env" and copilot.choose_model("m-flag") == "m-flag"
    assert get_harness("codex").choose_model(None) == "gpt-5-codex"
    assert get_harness("sim").choose_model(None) is None and get_harness("cmd:x --acp").choose_model(None) is None
    cfg = parse_args(["--harness", "claude", "--model", "m-1", "--run-dir", str(tmp_path)])
    assert cfg.model == "m-1" and json.loads(cfg.model_dump_json())["model"] == "m-1"  # config.json has it
    assert parse_args(["--run-dir", str(tmp_path)]).model is None  # the sim: no model


def test_each_cli_is_told_the_model_its_own_way(no_model_vars, tmp_path):
    env = get_harness("claude").environment(tmp_path / "h1", {}, secrets={}, model="m-1")
    slots = ("ANTHROPIC_MODEL", "ANTHROPIC_DEFAULT_SONNET_MODEL", "ANTHROPIC_DEFAULT_OPUS_MODEL",
             "ANTHROPIC_DEFAULT_HAIKU_MODEL", "ANTHROPIC_SMALL_FAST_MODEL")
    assert {env[k] for k in slots} == {"m-1"}
    assert get_harness("copilot").environment(tmp_path / "h2", {}, secrets={}, model="m-2")["COPILOT_MODEL"] == "m-2"
    codex = dataclasses.replace(get_harness("codex"), command=("/bin/true",))  # no CLI needed
    argv = codex.launch_argv({"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}, "m-3")
    pairs = [argv[i + 1] for i, a in enumerate(argv) if a == "-c"]
    assert 'model="m-3"' in pairs and 'openai_base_url="http://127.0.0.1:9/v1"' in pairs
    assert {'cli_auth_credentials_store="ephemeral"', "shell_environment_policy.ignore_default_excludes=false",
            "features.shell_snapshot=false"} <= set(pairs)
    assert not any(a.startswith("openai_base_url") for a in codex.launch_argv({}, None))  # its built-in endpoint
    copilot = dataclasses.replace(get_harness("copilot"), command=("/bin/true", "--acp"))
    assert copilot.launch_argv({"COPILOT_MODEL": "x"}, "m") == ["/bin/true", "--acp"]


async def test_terminal_commands_get_no_credential_variables(tmp_path):
    (tmp_path / "wd").mkdir()
    env = {"PATH": "/usr/bin:/bin", "OPENAI_API_KEY": "sk-0123456789", "GH_TOKEN": "gh-0123456789",
           "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "url.x.insteadOf", "GIT_CONFIG_VALUE_0": "y", "LANG": "C"}
    c = WorkdirClient(tmp_path / "wd", SessionObserver(), PermissionPolicy(tmp_path / "wd", "w001"), env)
    t = await c.create_terminal("printenv", "s")
    await c.wait_for_terminal_exit("s", t.terminal_id)
    out = (await c.terminal_output("s", t.terminal_id)).output
    await c.close_terminals()
    assert "GIT_CONFIG_KEY_0=url.x.insteadOf" in out and "LANG=C" in out
    assert "0123456789" not in out and "OPENAI_API_KEY" not in out and "GH_TOKEN" not in out


def test_the_fake_answers_the_responses_api_with_namespaced_tools():
    body = {"model": "m", "instructions": "sys", "input": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "worker id: w001"}]},
        {"type": "function_call", "name": "board_write", "namespace": "mcp__agensh", "call_id": "c1",
         "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "written"},
    ], "tools": [{"type": "function", "name": "exec_command"},
                 {"type": "namespace", "name": "mcp__agensh", "tools": [{"type": "function", "name": "board_write"}]}]}
    assert responses.tools(body) == ["exec_command", "mcp__agensh__board_write"]
    conv = responses.conversation(body)
    assert [m.kind for m in conv] == ["system", "prompt", "assistant", "result"]
    assert conv[2].calls[0].name == "mcp__agensh__board_write" and conv[3].text == "written"
    item = responses._item(Call("c2", "mcp__agensh__board_write", {"a": 1}), responses._specs(body))
    assert (item["name"], item["namespace"], json.loads(item["arguments"])) == ("board_write", "mcp__agensh", {"a": 1})
    assert RunConfig().model is None
