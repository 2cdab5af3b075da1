"""The texts the runtime sends to agents, read from `prompts/` (one file each,
so they can be read and changed without touching code)."""

from __future__ import annotations

from functools import cache

from agensh_ray.paths import PROMPTS_DIR
from agensh_ray.render import MARKERS


@cache
def _text(name: str) -> str:
    return (PROMPTS_DIR / f"{name}.md").read_text(encoding="utf-8")


def worker(worker_id: str, workers: int) -> str:
    """The worker prompt: the same for everyone but the worker id (with what marks a worker's text)."""
    return _text("worker").format(worker_id=worker_id, workers=workers, markers=MARKERS)


def nudge() -> str:
    return _text("nudge").strip()


def share_findings() -> str:
    return _text("share_findings").strip()


def wind_down(minutes_left: float, last: bool) -> str:
    return _text("wind_down_last" if last else "wind_down").strip().format(minutes=minutes_left)


def resume() -> str:
    return _text("resume").strip()


def handoff(worker_id: str, claims: str, prs: str, recent: str) -> str:
    return _text("handoff").strip().format(worker_id=worker_id, claims=claims, prs=prs, recent=recent)
