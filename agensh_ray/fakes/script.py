"""The script a fake LLM endpoint follows, and how it finds its place in it.

A fake model answers each request from the conversation the request carries,
not from a counter: the same request gets the same answer (agent CLIs retry),
a session restored with session/load continues where it was, and a worker is
recognised by the ``worker id: wNNN`` line of its prompt, so one endpoint
serves every worker of a run with a different script each.

    Script
      workers: {"w001": [Turn, ...], "*": [Turn, ...]}
      Turn:  match (regex on the turn's prompt; else turns are taken in order)
             steps: [Step, ...]
      Step:  tool + args   call a tool (name resolved against the request's tool
                           list by suffix: "board_read" finds "agensh-board_read")
             say           assistant text; a step with only text ends the turn
             when/unless   regex on the last tool result: skip the step unless/if it matches
             gate          hold the answer until a test opens the gate
             fail / cut    answer the first requests for the step with errors (429
                           with Retry-After, 500, 529, ...) or a stream cut mid-way

Arguments are templates: ``${worker}``, ``${cwd}`` (the agent's working
directory, from its system prompt) and ``${pr}`` (the last ``PR #N`` a tool
result mentioned) are replaced; nothing else is touched, so file contents
with braces pass through.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

WORKER_RE = re.compile(r"worker id:\s*(w\d+)", re.I)
CWD_RES = (
    re.compile(r"Current working directory:\s*(\S+)"),
    re.compile(r"Working directory:\s*(\S+)"),
    re.compile(r"<cwd>\s*(\S+?)\s*</cwd>"),
    re.compile(r"Workspace Directories:\*\*\s*-\s*(\S+)"),  # Gemini CLI
)
PR_RE = re.compile(r"PR #(\d+)")
OPENED_RE = re.compile(r"opened: PR #(\d+)")
VAR_RE = re.compile(r"\$\{(worker|cwd|pr)\}")


class Step(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tool: str | None = None
    """Tool to call; matched against the request's tools exactly or by suffix after -, _, /, . or :."""
    args: dict[str, Any] = Field(default_factory=dict)
    """Tool arguments (templates)."""
    say: str | None = None
    """Assistant text (sent before the tool call, or alone to end the turn)."""
    when: str | None = None
    """Take this step only if the last tool result matches this regex."""
    unless: str | None = None
    """Skip this step if the last tool result matches this regex."""
    gate: str | None = None
    """Hold the answer until the endpoint's gate of this name is opened (tests synchronise on it)."""
    fail: list[int] = Field(default_factory=list)
    """Answer the first requests for this step with these statuses (429, 500, 529, ...), then the step."""
    retry_after: float | None = 1.0
    """The Retry-After those failures carry (None: none)."""
    cut: int = 0
    """Cut the stream of this step's answer mid-way this many times first."""


class Turn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    match: str | None = None
    """Regex on the turn's prompt; a matching turn is chosen over the positional one."""
    steps: list[Step]


class Script(BaseModel):
    model_config = ConfigDict(extra="forbid")

    workers: dict[str, list[Turn]] = Field(default_factory=dict)
    """Turns per worker id; "*" for any worker without its own."""
    idle: str = "Nothing left for me to do right now; I will check the board again at my next turn."
    """The answer once a worker's script is used up (ends the turn)."""
    side: str = "OK"
    """The answer to requests that carry no tools (titles, summaries the CLI asks for on its own)."""

    @classmethod
    def load(cls, path: str | Path) -> "Script":
        return cls.model_validate_json(Path(path).read_text())

    def turns_for(self, worker: str | None) -> list[Turn]:
        if worker and worker in self.workers:
            return self.workers[worker]
        return self.workers.get("*", [])


# -- a conversation, independent of the wire format --------------------------------


@dataclass
class Call:
    id: str
    name: str
    args: dict[str, Any]


@dataclass
class Message:
    kind: str
    """prompt (a user's turn), assistant, result (a tool result) or system."""
    text: str = ""
    calls: list[Call] = field(default_factory=list)


@dataclass
class Reply:
    """What the fake model answers: text and/or tool calls."""

    text: str = ""
    calls: list[Call] = field(default_factory=list)
    gate: str | None = None
    worker: str | None = None
    turn: int = -1
    step: int = -1
    fail: list[int] = field(default_factory=list)
    retry_after: float | None = None
    cut: int = 0


@dataclass
class Position:
    worker: str | None
    turn: int
    """Index of the turn in the worker's script (-1: none left)."""
    step: int
    """Index of the step to answer with (-1: the turn is used up)."""
    cwd: str | None = None


def resolve_tool(name: str, available: list[str]) -> str:
    """The request's tool that `name` means: exact, else the one ending with a separator + name."""
    if not available or name in available:
        return name
    pattern = re.compile(rf"(?:^|[-_/.:]){re.escape(name)}$")
    hits = [t for t in available if pattern.search(t)]
    if not hits:
        raise KeyError(f"no tool named like {name!r} in the request (tools: {', '.join(available)})")
    return min(hits, key=len)


class Player:
    """Finds the answer to a conversation in a script."""

    def __init__(self, script: Script):
        self.script = script

    def position(self, messages: list[Message]) -> Position:
        prompts = _prompt_groups(messages)
        text_all = "\n".join(m.text for m in messages if m.kind in ("prompt", "system"))
        m = WORKER_RE.search("\n".join(t for t, _ in prompts)) or WORKER_RE.search(text_all)
        worker = m.group(1) if m else None
        cwd = None
        for rx in CWD_RES:
            if c := rx.search(text_all):
                cwd = c.group(1)
                break
        turns = self.script.turns_for(worker)
        if not prompts:
            return Position(worker, -1, -1, cwd)
        matched = [i for i, t in enumerate(turns) if t.match]
        positional = [i for i, t in enumerate(turns) if not t.match]

        def matching(text: str) -> int | None:
            for i in matched:
                if re.search(turns[i].match or "", text):
                    return i
            return None

        plain_before = sum(1 for text, _ in prompts[:-1] if matching(text) is None)
        last_text, start = prompts[-1]
        turn = matching(last_text)
        if turn is None:
            turn = positional[plain_before] if plain_before < len(positional) else -1
        if turn < 0:
            return Position(worker, -1, -1, cwd)
        # Replay the turn so far: one assistant message per step taken; skipped steps are re-derived.
        steps = turns[turn].steps
        p = 0
        last_result = ""
        for msg in messages[start:]:
            if msg.kind == "result":
                last_result = msg.text
            elif msg.kind == "assistant":
                p = _next_step(steps, p, last_result)
                if p < 0:
                    return Position(worker, turn, -1, cwd)
                p += 1
        p = _next_step(steps, p, last_result)
        return Position(worker, turn, p, cwd)

    def reply(self, messages: list[Message], tools: list[str], call_prefix: str = "call") -> Reply:
        """The answer to a request; `tools` are the tool names it offers (none: a side request)."""
        if not tools:
            return Reply(text=self.script.side)
        pos = self.position(messages)
        if pos.turn < 0 or pos.step < 0:
            return Reply(text=self.script.idle, worker=pos.worker, turn=pos.turn)
        step = self.script.turns_for(pos.worker)[pos.turn].steps[pos.step]
        env = {"worker": pos.worker or "", "cwd": pos.cwd or ".", "pr": _last_pr(messages)}
        reply = Reply(
            text=_fill(step.say or "", env), gate=step.gate, worker=pos.worker, turn=pos.turn, step=pos.step,
            fail=step.fail, retry_after=step.retry_after, cut=step.cut,
        )
        if step.tool:
            name = resolve_tool(step.tool, tools)
            call_id = f"{call_prefix}_{pos.worker or 'x'}_{pos.turn}_{pos.step}_{len(messages)}"
            reply.calls.append(Call(call_id, name, _fill(step.args, env)))
        return reply


def _prompt_groups(messages: list[Message]) -> list[tuple[str, int]]:
    """(text, index of the first message after it) per run of consecutive prompt messages."""
    out: list[tuple[str, int]] = []
    prev = None
    for i, m in enumerate(messages):
        if m.kind == "prompt":
            if prev == "prompt" and out:
                out[-1] = (out[-1][0] + "\n" + m.text, i + 1)
            else:
                out.append((m.text, i + 1))
        prev = m.kind
    return out


def _next_step(steps: list[Step], p: int, last_result: str) -> int:
    while p < len(steps):
        s = steps[p]
        if s.when is not None and not re.search(s.when, last_result):
            p += 1
            continue
        if s.unless is not None and re.search(s.unless, last_result):
            p += 1
            continue
        return p
    return -1


def _last_pr(messages: list[Message]) -> str:
    """The PR this conversation opened last (else the last one a result mentions)."""
    results = [m.text for m in messages if m.kind == "result"]
    for text in reversed(results):
        if found := OPENED_RE.search(text):
            return found.group(1)
    for text in reversed(results):
        if found := PR_RE.search(text):
            return found.group(1)
    return ""


def _fill(value: Any, env: dict[str, str]) -> Any:
    if isinstance(value, str):
        whole = VAR_RE.fullmatch(value)
        if whole and env.get(whole.group(1), "").isdigit():
            return int(env[whole.group(1)])  # "${pr}" alone is a number, as a tool schema wants
        return VAR_RE.sub(lambda m: env.get(m.group(1), ""), value)
    if isinstance(value, dict):
        return {k: _fill(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, env) for v in value]
    return value


def dumps(script: Script) -> str:
    return json.dumps(script.model_dump(exclude_defaults=True), indent=2)
