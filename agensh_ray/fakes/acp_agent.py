"""A scripted ACP agent: stands in for an agent CLI (Copilot, Claude Code, ...)
in tests that need an agent whose every action is known in advance.

It is a real ACP agent process (official SDK, stdio), started through the
`cmd:` harness like any unknown agent:

    cmd:python -m agensh_ray.fakes.acp_agent --script SCRIPT.json --log LOG.jsonl

and it acts through the same surfaces a real agent has: our MCP tools (over
the HTTP URL it gets in session/new), the client's terminals and files (ACP
terminal/* and fs/*), permission requests, and its own subprocesses (`shell`:
inside its sandbox, as a CLI's own tools run). The hostile-worker tests
(tests/test_security_sandbox.py) script their attacks with it. Turn N
runs the steps of `turns[N]` (the last entry again once they run out, if
`repeat_last`; else nothing) and ends with `end_turn`. Every prompt it gets and
the result of every step go to the log, one JSON object per line, so a test
asserts on what the agent saw and what it was answered.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time
import uuid
from pathlib import Path
from typing import Any, Literal

import acp
from acp.schema import (
    AgentCapabilities,
    Implementation,
    InitializeResponse,
    McpCapabilities,
    NewSessionResponse,
    PromptResponse,
    ToolCallUpdate,
)
from pydantic import BaseModel, ConfigDict


class Step(BaseModel):
    """One action. `do` names it; the other fields are its arguments."""

    model_config = ConfigDict(extra="forbid")
    do: Literal["say", "mcp", "terminal", "shell", "read", "write", "permission", "sleep", "exec", "fail"]
    text: str = ""
    """fail: the error the turn is answered with (a JSON-RPC error, as a CLI whose model failed);
    say: the text; terminal/shell: the command line (run by /bin/sh); read/write: the path; permission: the title;
    exec: Python code run in the agent's own process (a hostile agent's own allocations); its `result` is returned."""
    tool: str = ""
    """mcp: the tool's name."""
    args: dict[str, Any] = {}
    """mcp: the tool's arguments; permission: the tool call's raw input."""
    content: str = ""
    """write: the file's content."""
    kind: str | None = None
    """permission: the tool call's ACP kind (execute, edit, read, ...)."""
    seconds: float = 0.0
    """sleep: how long; fail: how long to wait first (ended early by an ACP cancel: an agent that fails its turn
    when it is stopped)."""
    repeat: int = 1
    """mcp: make the call this many times (a flood), `concurrency` of them at once; each is logged as a `call`
    (with its answer's first 200 characters), the step's result counts the answers by their first word."""
    concurrency: int = 1


class AgentScript(BaseModel):
    model_config = ConfigDict(extra="forbid")
    turns: list[list[Step]] = []
    repeat_last: bool = False


class ScriptedAgent:
    def __init__(self, script: AgentScript, log: Path):
        self.script = script
        self.log = log
        self.conn = None
        self.sessions: dict[str, dict[str, Any]] = {}

    def record(self, **fields: Any) -> None:
        with open(self.log, "a", encoding="utf-8") as f:
            f.write(json.dumps(fields, default=str) + "\n")

    def on_connect(self, conn) -> None:
        self.conn = conn

    async def initialize(self, protocol_version, client_capabilities=None, client_info=None, **kwargs):
        return InitializeResponse(
            protocol_version=acp.PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(load_session=False, mcp_capabilities=McpCapabilities(http=True)),
            agent_info=Implementation(name="agensh-scripted", title="agensh-ray scripted agent", version="0.1.0"),
        )

    async def new_session(self, cwd, mcp_servers=None, additional_directories=None, **kwargs):
        sid = uuid.uuid4().hex
        urls = [s.url for s in mcp_servers or [] if getattr(s, "url", None)]
        self.sessions[sid] = {"cwd": cwd, "mcp_url": urls[0] if urls else None, "turn": 0, "mcp": None}
        self.record(event="session", cwd=cwd, mcp=bool(urls))
        return NewSessionResponse(session_id=sid)

    async def authenticate(self, method_id, **kwargs):
        return None

    async def cancel(self, session_id, **kwargs):
        s = self.sessions.get(session_id)
        if s is not None:
            s.setdefault("cancelled", asyncio.Event()).set()
        return None

    async def prompt(self, prompt, session_id, **kwargs):
        s = self.sessions[session_id]
        text = "\n".join(getattr(b, "text", "") for b in prompt)
        turns = self.script.turns
        n = s["turn"]
        s["turn"] += 1
        steps = turns[n] if n < len(turns) else (turns[-1] if turns and self.script.repeat_last else [])
        self.record(event="prompt", turn=n, text=text)
        s["cancelled"] = asyncio.Event()
        for i, step in enumerate(steps):
            began = time.perf_counter()
            if step.do == "fail":  # the turn ends with an error answer
                if step.seconds:
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(s["cancelled"].wait(), step.seconds)
                self.record(event="step", turn=n, step=i, do="fail", ok=True, result=step.text, at=time.time())
                raise acp.RequestError(-32603, step.text or "the turn failed")
            try:
                result = await self.run(session_id, s, step)
                self.record(event="step", turn=n, step=i, do=step.do, ok=True, result=result,
                            seconds=round(time.perf_counter() - began, 4), at=time.time())
            except Exception as exc:  # a refusal is a result too: the test asserts on it
                self.record(event="step", turn=n, step=i, do=step.do, ok=False, result=f"{type(exc).__name__}: {exc}",
                            seconds=round(time.perf_counter() - began, 4), at=time.time())
        return PromptResponse(stop_reason="end_turn")

    async def run(self, sid: str, s: dict[str, Any], step: Step) -> Any:
        conn = self.conn
        if step.do == "say":
            await conn.session_update(sid, acp.update_agent_message_text(step.text))
            return step.text
        if step.do == "exec":
            scope: dict[str, Any] = {}
            exec(step.text, scope)  # noqa: S102 - a test's script, run by the test's own agent
            return scope.get("result")
        if step.do == "sleep":
            await asyncio.sleep(step.seconds)
            return step.seconds
        if step.do == "mcp":
            if s["mcp"] is None:
                from mcp import Client

                s["mcp_cm"] = Client(s["mcp_url"], read_timeout_seconds=120)
                s["mcp"] = await s["mcp_cm"].__aenter__()
            if step.repeat > 1:
                return await self.flood(s["mcp"], step)
            res = await s["mcp"].call_tool(step.tool, step.args)
            return "".join(getattr(c, "text", "") for c in res.content)
        if step.do == "terminal":
            term = await conn.create_terminal(command="/bin/sh", args=["-c", step.text], session_id=sid, cwd=s["cwd"])
            done = await conn.wait_for_terminal_exit(session_id=sid, terminal_id=term.terminal_id)
            out = await conn.terminal_output(session_id=sid, terminal_id=term.terminal_id)
            await conn.release_terminal(session_id=sid, terminal_id=term.terminal_id)
            return {"exit_code": done.exit_code, "output": out.output}
        if step.do == "shell":
            proc = await asyncio.create_subprocess_shell(step.text, cwd=s["cwd"], stdout=asyncio.subprocess.PIPE,
                                                         stderr=asyncio.subprocess.STDOUT)
            out, _ = await proc.communicate()
            return {"exit_code": proc.returncode, "output": out.decode("utf-8", "replace")}
        if step.do == "read":
            return (await conn.read_text_file(path=step.text, session_id=sid)).content
        if step.do == "write":
            await conn.write_text_file(content=step.content, path=step.text, session_id=sid)
            return "written"
        # permission: ask as a CLI would before running a tool
        options = [acp.schema.PermissionOption(option_id="allow", name="Allow", kind="allow_once"),
                   acp.schema.PermissionOption(option_id="reject", name="Reject", kind="reject_once")]
        call = ToolCallUpdate(tool_call_id=uuid.uuid4().hex, title=step.text, kind=step.kind, raw_input=step.args)
        resp = await conn.request_permission(options=options, session_id=sid, tool_call=call)
        return getattr(resp.outcome, "option_id", None) or resp.outcome.outcome


    async def flood(self, client, step: Step) -> dict[str, int]:
        """`step`'s call `repeat` times, `concurrency` at once; the answers counted by their first word."""
        left = iter(range(step.repeat))
        counts: dict[str, int] = {}

        async def one_at_a_time() -> None:
            for k in left:
                began = time.perf_counter()
                try:
                    res = await client.call_tool(step.tool, step.args)
                    text, ok = "".join(getattr(c, "text", "") for c in res.content), True
                except Exception as exc:  # noqa: BLE001 - logged as the answer
                    text, ok = f"{type(exc).__name__}: {exc}", False
                self.record(event="call", k=k, ok=ok, result=text[:200], seconds=round(time.perf_counter() - began, 4),
                            at=time.time())
                word = text.split(" ", 1)[0]
                counts[word] = counts.get(word, 0) + 1

        await asyncio.gather(*(one_at_a_time() for _ in range(max(1, step.concurrency))))
        return counts


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m agensh_ray.fakes.acp_agent", description=__doc__.splitlines()[0])
    p.add_argument("--script", type=Path, help="JSON file: {\"turns\": [[step, ...], ...], \"repeat_last\": false}")
    p.add_argument("--log", type=Path, required=True,
                   help="JSON-lines file: every prompt and step result (~ is this agent's HOME: a sandboxed agent "
                   "writes only there and in its workdir)")
    a = p.parse_args(argv)
    script = AgentScript.model_validate_json(a.script.read_text()) if a.script else AgentScript()
    asyncio.run(acp.run_agent(ScriptedAgent(script, a.log.expanduser())))


if __name__ == "__main__":
    main()
