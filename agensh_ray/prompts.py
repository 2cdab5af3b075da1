"""The texts the runtime sends to agents, read from `prompts/` (one file each,
so they can be read and changed without touching code)."""

from __future__ import annotations

from functools import cache

from agensh_ray.paths import PROMPTS_DIR
from agensh_ray.render import MARKERS


@cache
def _text(name: str) -> str:
    return (PROMPTS_DIR / f"{name}.md").read_text(encoding="utf-8")


def claims(rule: str = "lease", life_wall_s: float = 3600.0, time_scale: float = 1.0) -> str:
    """How a claim lives, as the worker prompt says it: the run's rule (agensh_ray/board/leases.py) and its
    life in the agents' schedule minutes (`RunConfig.claim_life_wall_s` x time_scale), the same numbers the
    board and the analysis use."""
    minutes = life_wall_s * time_scale / 60.0
    life = f"{minutes:.0f} minutes" if minutes < 600 else f"{minutes / 60:.0f} hours"
    if rule == "legacy":
        return (f"A claim counts for {life} after you write it; `board_read` no longer shows older ones "
                "(`board_grep` finds them).")
    return ("Start its text with its key and a colon, `claim KEY: the files you will touch` (e.g. `claim tac: "
            "textkit/commands/tac.py`); `board_claims` with that key lists the open claims on it, oldest first: "
            "the first one holds it. Your claim stays yours while you work: every board entry you write and every "
            f"PR you open, review, comment or merge renews it; it lapses after {life} without any, and ends with "
            "a FAIL `release KEY: why`, a PATCH_SUMMARY `KEY: what merged`, or your next CLAIM.")


def worker(worker_id: str, workers: int, claim_rule: str | None = None) -> str:
    """The worker prompt: the same for everyone but the worker id (with what marks a worker's text and how a
    claim lives in this run, `claims(...)`; None: the default rule at x1)."""
    return _text("worker").format(worker_id=worker_id, workers=workers, markers=MARKERS,
                                  claims=claim_rule if claim_rule is not None else claims())


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
