"""The `sim` agent: a real ACP agent process (official SDK, stdio) that stands
in for an LLM-driven coding CLI.

It drives the same surfaces a real agent does: our infra tools over MCP
(streamable HTTP, the URL it gets in session/new), its own shell for git and
the task's checks, and the client's `fs/write_text_file` for edits. What an
LLM would reason out, it takes from the task's oracle (only this harness
reads it) and from seeded randomness: which feature to claim, whether the
first attempt has a bug, how long each step "thinks".

This module is the ACP plumbing (sessions, one per worker; one process may
serve many); a turn's behaviour is in turn.py, its knobs in settings.py.
"""

from __future__ import annotations

import logging
import os
import random
import re
import resource
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import acp
from acp.schema import (
    AgentCapabilities,
    Implementation,
    InitializeResponse,
    McpCapabilities,
    NewSessionResponse,
    PromptResponse,
)

from agensh_ray.sim.settings import SimSettings
from agensh_ray.sim.steps import StepClock
from agensh_ray.sim.turn import MAIN_CHECK_RE, WORKER_RE, Cancelled, Turn
from agensh_ray.task import Task

log = logging.getLogger("agensh.sim")


@dataclass
class SimSession:
    session_id: str
    cwd: Path
    mcp_url: str
    worker: str | None = None
    rng: random.Random | None = None
    mcp: object | None = None
    mcp_cm: object | None = None
    cancelled: bool = False
    wind_down: bool = False
    mine: set[str] = field(default_factory=set)
    """Features this worker has merged."""
    lost: set[str] = field(default_factory=set)
    """Features this worker gave up on (left to its peers)."""
    backed_off: dict[str, str] = field(default_factory=dict)
    """Feature -> the peer whose earlier claim this worker backed off from (until that peer releases it)."""
    failed: dict[str, int] = field(default_factory=dict)
    """Feature -> builds of it that raised (a transient error: retried up to MAX_ATTEMPTS in turn.py)."""
    tool_seq: int = 0
    env: dict[str, str] | None = None
    """Environment of this session's commands (its git identity)."""
    merged_seen: set[str] = field(default_factory=set)
    """Features this session saw registered on main."""
    tools: frozenset[str] = frozenset()
    """The infra tools the run gives this agent (the MCP server's list; no board or chat in the baseline)."""
    clock: StepClock | None = None
    """This worker's steps: their times from its own seeded stream, counted by kind (agensh_ray/sim/steps.py)."""
    main_checked: set[str] = field(default_factory=set)
    """Commits of main (12 hex digits) checked by this worker or reported checked by a peer (board or channel)."""
    summaries: int = 0
    """Features merged as this worker knew at its last gather (PATCH_SUMMARY entries, main's registries)."""
    summaries_at_check: int = -1
    """`summaries` when it last looked at main to check it (the same: main has not changed since)."""
    waits: int = 0
    """Steps this turn spent waiting for dependencies peers are building (generated tasks; turn.MAX_WAITS)."""
    handed_prs: list[tuple[int, str]] = field(default_factory=list)
    """Its own PRs a hand-off summary listed as open (number, branch): a previous session opened them and died
    before merging (its host or node was lost); finished first."""


class SimAgent:
    """The ACP Agent implementation. One process may serve many sessions."""

    def __init__(self, settings: SimSettings, task: Task):
        self.settings = settings
        self.task = task
        self.conn = None
        self.sessions: dict[str, SimSession] = {}
        self.steps = 0
        """Steps taken by every session of this process (the stats line at each turn's end)."""
        me = resource.getrusage(resource.RUSAGE_SELF)
        self.cpu_start = me.ru_utime + me.ru_stime
        """CPU seconds this process had spent when it was ready (its imports), left out of the per-step figure."""

    def on_connect(self, conn) -> None:
        self.conn = conn

    async def initialize(self, protocol_version, client_capabilities=None, client_info=None, **kwargs):
        return InitializeResponse(
            protocol_version=acp.PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(load_session=False, mcp_capabilities=McpCapabilities(http=True)),
            agent_info=Implementation(name="agensh-sim", title="agensh-ray simulated agent", version="0.1.0"),
        )

    async def new_session(self, cwd, mcp_servers=None, additional_directories=None, **kwargs):
        http = [s for s in mcp_servers or [] if getattr(s, "url", None)]
        if not http:
            raise acp.RequestError.invalid_params({"mcpServers": "the sim agent needs the agensh HTTP MCP server"})
        sid = uuid.uuid4().hex
        self.sessions[sid] = SimSession(session_id=sid, cwd=Path(cwd), mcp_url=http[0].url)
        return NewSessionResponse(session_id=sid)

    async def authenticate(self, method_id, **kwargs):
        return None

    async def cancel(self, session_id, **kwargs):
        if s := self.sessions.get(session_id):
            s.cancelled = True

    async def prompt(self, prompt, session_id, **kwargs):
        s = self.sessions.get(session_id)
        if s is None:
            raise acp.RequestError.invalid_params({"sessionId": f"unknown session {session_id}"})
        text = "\n".join(getattr(b, "text", "") for b in prompt)
        if s.worker is None:
            m = WORKER_RE.search(text)
            if not m:
                raise acp.RequestError.invalid_params({"prompt": "no 'worker id: wNNN' line in the first prompt"})
            s.worker = m.group(1)
            s.rng = random.Random(f"{self.settings.seed}:{s.worker}")
            cfg = self.settings.config
            s.clock = StepClock(self.settings.seed, s.worker, cfg.think_s, cfg.think_sigma)
            email = f"{s.worker}@agensh.invalid"
            # Git identity per session: one sim process may serve many workers.
            s.env = {**os.environ, "GIT_AUTHOR_NAME": os.environ.get("GIT_AUTHOR_NAME", s.worker),
                     "GIT_COMMITTER_NAME": os.environ.get("GIT_COMMITTER_NAME", s.worker),
                     "GIT_AUTHOR_EMAIL": os.environ.get("GIT_AUTHOR_EMAIL", email),
                     "GIT_COMMITTER_EMAIL": os.environ.get("GIT_COMMITTER_EMAIL", email)}
        s.cancelled = False
        self._note_events(s, text)
        try:
            if s.mcp is None:
                await self._connect_mcp(s)
            await Turn(self, s).run()
        except Cancelled:
            return PromptResponse(stop_reason="cancelled")
        finally:
            self.stats()
        return PromptResponse(stop_reason="end_turn")

    def stats(self) -> None:
        """One line on stderr (the agent's log in the run folder): this process's steps so far and its CPU
        seconds, its own and its finished subprocesses' (git, the checks), to measure CPU per step."""
        me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        print(f"sim stats: pid {os.getpid()} steps {self.steps} cpu_self {me.ru_utime + me.ru_stime:.3f} "
              f"cpu_children {kids.ru_utime + kids.ru_stime:.3f} cpu_start {self.cpu_start:.3f}",
              file=sys.stderr, flush=True)

    async def _connect_mcp(self, s: SimSession) -> None:
        from mcp import Client

        s.mcp_cm = Client(s.mcp_url, read_timeout_seconds=120)
        s.mcp = await s.mcp_cm.__aenter__()
        s.tools = frozenset(t.name for t in (await s.mcp.list_tools()).tools)

    def _note_events(self, s: SimSession, text: str) -> None:
        s.main_checked.update(MAIN_CHECK_RE.findall(text))  # a check of main reported (board, channel, its own)
        if "WIND-DOWN" in text:
            s.wind_down = True
        if "Resume your work" in text and s.worker:  # prompts/handoff.md: its PRs as render.fmt_pr lines
            pr = re.compile(rf"PR #(\d+) \[open\] ({s.worker}/[\w-]+) -> \S+ by {s.worker}\b")
            s.handed_prs += [(int(n), branch) for n, branch in pr.findall(text)]

    async def close(self) -> None:
        for s in self.sessions.values():
            if s.mcp_cm is not None:
                try:
                    await s.mcp_cm.__aexit__(None, None, None)
                except Exception:
                    pass


async def main() -> None:
    logging.basicConfig(level=os.environ.get("AGENSH_SIM_LOG", "WARNING"), format="%(asctime)s sim %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    task = Task.load(os.environ.get("AGENSH_SIM_TASK", "textkit"))
    agent = SimAgent(SimSettings.from_env(), task)
    try:
        await acp.run_agent(agent)
    finally:
        await agent.close()
