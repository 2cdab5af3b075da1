"""One start of an agent CLI in ACP mode, outside any sandbox, before the first
start on a machine: initialize, session/new in a scratch folder, then stdin
closed, so that the CLI writes the caches it keeps (Node's compile cache) into
the shared cache, where sandboxed agents read them read-only. A worker's own
sandboxed agent cannot write there: one worker must not plant code that the
others run.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import acp

from agensh_ray.agent.client import NoExtensions, initialize
from agensh_ray.agent.process import AgentProcess


class _Quiet(NoExtensions):
    """The client side of a start that asks nothing of the agent."""

    async def session_update(self, session_id, update, **kwargs):
        return None

    async def request_permission(self, options, session_id, tool_call, **kwargs):
        raise acp.RequestError.method_not_found("session/request_permission")


async def _start(argv: list[str], env: dict[str, str], timeout_s: float) -> None:
    with tempfile.TemporaryDirectory(prefix="agensh-warm-") as scratch:
        process = AgentProcess(argv, env, Path(scratch), Path(scratch) / "agent.stderr")
        proc = await process.start()
        try:
            conn = acp.connect_to_agent(_Quiet(), proc.stdin, proc.stdout)
            await asyncio.wait_for(initialize(conn, "agensh-ray warm-up"), timeout_s)
            await asyncio.wait_for(conn.new_session(cwd=scratch, mcp_servers=[]), timeout_s)
        finally:
            await process.stop(grace_s=20.0)  # stdin closed: it writes its caches as it exits


def start_once(argv: list[str], env: dict[str, str], timeout_s: float = 120.0) -> None:
    """Start the CLI in ACP mode once and let it exit (blocking: run it in a thread)."""
    asyncio.run(_start(argv, env, timeout_s))
