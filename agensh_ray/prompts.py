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


def baseline(worker_id: str) -> str:
    """The single-agent baseline's first prompt: one engineer, the forge tools only."""
    return _text("baseline").format(worker_id=worker_id)


def keep_going(minutes_left: float) -> str:
    """The baseline's stop hook: the agent ended its turn before the deadline."""
    return _text("keep_going").strip().format(minutes=minutes_left)


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


def refused(what: str, reason: str) -> str:
    """What an agent reads after a permission request of its was refused (ACP carries no reason)."""
    return _text("refused").strip().format(what=what, reason=reason)


def limit(what: str) -> str:
    """What an agent reads when a resource limit of its sandbox was reached (agent/limits.py)."""
    return _text("limit").strip().format(what=what)


def task(program: str, reference: str, language: str) -> str:
    """Issue #1 of a task that brings no task.md of its own (a catalogue instance, a generated task)."""
    return _text("task").format(program=program, reference=reference, language=language)
