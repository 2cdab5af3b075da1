"""What a worker's new agent session is told when its old one is lost.

When an agent process dies and the agent cannot reload its session
(session/load unsupported or failed), the worker primes a new session with
the worker prompt and one hand-off summary (prompts/handoff.md) built from the
shared state, not from the lost conversation: the worker's own CLAIMs and
PATCH_SUMMARYs, its pull requests, and the last board entries. Everything in
it is re-readable with the tools.
"""

from __future__ import annotations

from agensh_ray import prompts
from agensh_ray.render import fmt_entry, fmt_pr
from agensh_ray.seams import Services

RECENT = 15


async def handoff_summary(worker: str, services: Services) -> str:
    """The summary for `worker`; each part says so when its service cannot answer (it never blocks a restart)."""
    try:
        mine = []
        for t in ("CLAIM", "PATCH_SUMMARY"):
            entries = await services.board.agrep(".", regex=True, limit=500, type=t)
            mine += [e for e in entries if e.worker_id == worker]
        mine.sort(key=lambda e: e.seq)
        claims = "\n".join(f"  {fmt_entry(e)}" for e in mine) or "  (none)"
    except Exception as exc:
        claims = f"  (board unavailable: {exc}; use board_grep)"
    try:
        prs = "\n".join(f"  {fmt_pr(p)}" for p in await services.forge.pr_list("all") if p.author == worker)
        prs = prs or "  (none)"
    except Exception as exc:
        prs = f"  (forge unavailable: {exc}; use pr_list)"
    try:
        recent = (await services.board.arecent())[-RECENT:]
        lines = [f"  {fmt_entry(e)}" for e in recent] or ["  (the board is empty)"]
        last = "\n".join([f"The last {len(recent)} board entries:", *lines])
    except Exception:
        last = "(the board's recent entries are unavailable: use board_read)"
    return prompts.handoff(worker, claims, prs, last)
