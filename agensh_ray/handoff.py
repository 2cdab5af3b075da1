"""What a worker's new agent session is told when its old one is lost.

When an agent process dies and the agent cannot reload its session
(session/load unsupported or failed), the worker primes a new session with a
hand-off summary built from the shared state, not from the lost
conversation: the worker's own CLAIMs and PATCH_SUMMARYs, its pull requests,
and the last board entries. Everything in it is re-readable with the tools.
"""

from __future__ import annotations

from typing import Any

from agensh_ray.render import fmt_entry, fmt_pr

RECENT = 15
HEAD = "Resume your work."


async def handoff_summary(worker: str, services: Any) -> str:
    """The summary for `worker`; `services` has the async board and forge of the host."""
    lines = [
        f"{HEAD} Your agent process restarted and its session could not be restored. "
        f"This is where you ({worker}) were, from the board and the forge:"
    ]
    try:
        mine = []
        for t in ("CLAIM", "PATCH_SUMMARY"):
            entries = await services.board.agrep(".", regex=True, limit=500, type=t)
            mine += [e for e in entries if e.worker_id == worker]
        mine.sort(key=lambda e: e.seq)
        lines.append("Your claims and patch summaries:")
        lines += [f"  {fmt_entry(e)}" for e in mine] or ["  (none)"]
    except Exception as exc:  # the summary must not block the restart
        lines.append(f"(board unavailable: {exc}; use board_grep)")
    try:
        prs = [p for p in await services.forge.pr_list("all") if p.author == worker]
        lines.append("Your pull requests:")
        lines += [f"  {fmt_pr(p)}" for p in prs] or ["  (none)"]
    except Exception as exc:
        lines.append(f"(forge unavailable: {exc}; use pr_list)")
    try:
        recent = (await services.board.arecent())[-RECENT:]
        lines.append(f"The last {len(recent)} board entries:")
        lines += [f"  {fmt_entry(e)}" for e in recent] or ["  (the board is empty)"]
    except Exception:
        pass
    lines.append(
        "Check your clone (git status, git log, your branch) before you act: finish and merge what you "
        "claimed, then continue the loop."
    )
    return "\n".join(lines)
