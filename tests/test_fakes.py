"""The fake LLM endpoints (agensh_ray/fakes) over real loopback HTTP: where a
script's answer comes from, both wire formats, streaming, the record."""

from __future__ import annotations

import json

import httpx
import pytest

from agensh_ray.fakes.anthropic_server import FakeAnthropic
from agensh_ray.fakes.openai_server import FakeOpenAI
from agensh_ray.fakes.script import Message, Player, Script, Step, Turn, resolve_tool
from agensh_ray.fakes.textkit import textkit_script
from agensh_ray.task import Task

TOOLS = ["bash", "agensh-board_read", "agensh-board_write", "agensh-pr_merge"]

SCRIPT = Script(workers={
    "w001": [
        Turn(steps=[
            Step(tool="board_read", say="looking"),
            Step(tool="pr_merge", args={"number": "${pr}"}),
            Step(tool="bash", args={"command": "git merge origin/main"}, when="ERROR"),
            Step(tool="pr_merge", args={"number": "${pr}"}, unless="merged: PR"),
            Step(say="done in ${cwd}"),
        ]),
        Turn(match="Resume", steps=[Step(say="resumed")]),
    ],
    "*": [Turn(steps=[Step(say="anyone")])],
})


def convo(*items: tuple) -> list[Message]:
    out = [Message("system", "Current working directory: /repo")]
    for kind, value in items:
        out.append(Message(kind, value) if kind != "assistant" else Message("assistant", "", value))
    return out


def test_the_answer_comes_from_the_conversation_not_a_counter():
    p = Player(SCRIPT)
    first = convo(("prompt", "worker id: w001\ngo"))
    r = p.reply(first, TOOLS)
    assert (r.text, r.calls[0].name, r.calls[0].args) == ("looking", "agensh-board_read", {})
    assert p.reply(first, TOOLS).calls[0].id == r.calls[0].id  # a retried request gets the same answer
    after_read = first + [Message("assistant", calls=r.calls), Message("result", "opened: PR #7 [open]")]
    merge = p.reply(after_read, TOOLS)
    assert merge.calls[0].args == {"number": 7}  # "${pr}" alone becomes a number
    # The merge conflicted: the conditional steps run.
    conflicted = after_read + [Message("assistant", calls=merge.calls), Message("result", "ERROR: conflicts")]
    fix = p.reply(conflicted, TOOLS)
    assert fix.calls[0].name == "bash"
    again = p.reply(conflicted + [Message("assistant", calls=fix.calls), Message("result", "")], TOOLS)
    assert again.calls[0].name == "agensh-pr_merge"
    # The merge went through: both conditional steps are skipped.
    merged = after_read + [Message("assistant", calls=merge.calls), Message("result", "merged: PR #7")]
    assert p.reply(merged, TOOLS).text == "done in /repo"
    # A later prompt: the next positional turn (none: the idle answer) or a matching one.
    done = merged + [Message("assistant", "done")]
    assert p.reply(done + [Message("prompt", "worker id: w001\nnudge")], TOOLS).text == SCRIPT.idle
    assert p.reply(done + [Message("prompt", "Resume your work.")], TOOLS).text == "resumed"
    assert p.reply(convo(("prompt", "worker id: w009")), TOOLS).text == "anyone"
    assert p.reply(first, []).text == SCRIPT.side  # no tools: a side question of the CLI


def test_tool_names_are_found_by_suffix_and_a_missing_one_is_named():
    assert resolve_tool("board_read", ["mcp__agensh__board_read", "Read"]) == "mcp__agensh__board_read"
    assert resolve_tool("Write", ["mcp__acp__Write", "NotebookEdit"]) == "mcp__acp__Write"
    with pytest.raises(KeyError, match="board_grep"):
        resolve_tool("board_grep", ["bash"])


def sse(text: str) -> list[dict]:
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ") and line != "data: [DONE]"]


def test_openai_fake_streams_tool_calls_and_records_requests():
    with FakeOpenAI(SCRIPT) as fake:
        body = {
            "model": "gpt-4.1", "stream": True, "stream_options": {"include_usage": True},
            "messages": [{"role": "system", "content": "Current working directory: /repo"},
                         {"role": "user", "content": "worker id: w001\ngo"}],
            "tools": [{"type": "function", "function": {"name": n, "parameters": {}}} for n in TOOLS],
        }
        chunks = sse(httpx.post(fake.url + "/chat/completions", json=body).text)
        deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
        assert "".join(d.get("content") or "" for d in deltas) == "looking"
        call = [tc for d in deltas for tc in d.get("tool_calls", [])]
        assert call[0]["function"]["name"] == "agensh-board_read"
        assert "".join(tc["function"]["arguments"] for tc in call) == "{}"
        assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
        assert chunks[-1]["usage"]["prompt_tokens"] > 0
        plain = httpx.post(fake.url + "/chat/completions", json={**body, "stream": False}).json()
        assert plain["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "agensh-board_read"
        assert httpx.get(fake.url + "/models").json()["data"][0]["id"] == "gpt-4.1"
        assert [r.worker for r in fake.requests] == ["w001", "w001"]


def test_anthropic_fake_streams_tool_use_and_reads_tool_results():
    with FakeAnthropic(SCRIPT) as fake:
        tools = [{"name": n, "input_schema": {"type": "object"}} for n in TOOLS]
        body = {"model": "claude-x", "max_tokens": 100, "stream": True, "system": "Working directory: /repo",
                "tools": tools, "messages": [{"role": "user", "content": "worker id: w001\ngo"}]}
        events = sse(httpx.post(fake.url + "/v1/messages", json=body).text)
        assert [e["type"] for e in events][0] == "message_start" and events[-1]["type"] == "message_stop"
        use = [e["content_block"] for e in events if e["type"] == "content_block_start"][-1]
        assert use["type"] == "tool_use" and use["name"] == "agensh-board_read"
        later = {**body, "stream": False, "messages": body["messages"] + [
            {"role": "assistant", "content": [{"type": "tool_use", "id": use["id"], "name": use["name"], "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use["id"],
                                          "content": [{"type": "text", "text": "opened: PR #3"}]}]},
        ]}
        msg = httpx.post(fake.url + "/v1/messages", json=later).json()
        assert msg["stop_reason"] == "tool_use" and msg["content"][0]["input"] == {"number": 3}
        assert fake.requests[-1].results() == ["opened: PR #3"]
        count = httpx.post(fake.url + "/v1/messages/count_tokens", json=body).json()
        assert count["input_tokens"] > 0


def test_textkit_script_gives_each_worker_its_own_feature_with_the_oracle_code():
    task = Task.load("textkit")
    script = textkit_script(17, task)
    claims, modules = [], []
    for w in sorted(script.workers):
        steps = script.workers[w][0].steps
        claims.append(next(s.args["text"] for s in steps if s.args.get("type") == "CLAIM"))
        create = next(s for s in steps if s.tool == "create")
        modules.append(create.args["file_text"])
        assert all(len(s.args.get("text", "")) <= 300 for s in steps)
    assert len(set(claims)) == 17 and all(len(c) <= 100 for c in claims)
    assert modules[0] == task.oracle_module(task.features()[0].name)
