"""The compact wire forms: the values that cross a process boundary (a Ray call) on the hot paths
of a run, and why each is a plain tuple rather than a pydantic model.

A 1,024-worker run moves every board entry to every worker. Pickling a pydantic model costs about
ten times a tuple of the same fields, and these values are built only from models that were
already validated (`BoardEntry`, `ChatMessage`, `ForgeEvent`), so on these paths the project ships
NamedTuples and keeps the models for the edges (what an agent sends, what lands in the trace).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:  # the board's wire row (its section of this module at merge)
    from agensh_ray.board import Row

# ------------------------------------------------------------------ routing

SOURCES = ("board", "chat", "forge")
"""The durable sources a router reads by cursor; `Event.source` names one (the cursor it advances)."""

HIGH, LOW = "high", "low"
"""Priorities: high reaches an agent mid-turn (appended to its next infra-tool result), low at its
next turn start."""


class Event(NamedTuple):
    """One source event as a router ships it to one host: its text once, its targets as a rule.

    Why: an event is shipped once per host with its targets as a rule ("every worker of the host but
    the author"), never once per worker, so one board entry costs 16 small items for 1,024 workers on
    16 hosts, not 1,023. `high` and `low` name the host's workers that get it at that priority; `None`
    means "every other worker of the host": all of them but the author and those named in the other
    field. A tuple, not a pydantic model: 1,024 workers make this the hottest value of the run (it is
    built by `Fanout` from validated models and never crosses the agent boundary).
    """

    source: str
    """board | chat | forge (the cursor it advances)."""
    seq: int
    kind: str
    """board | dm | channel | forge (a board entry delivered low becomes a `summary`)."""
    text: str
    author: str
    enqueue_ts: int
    high: tuple[str, ...] | None = ()
    low: tuple[str, ...] | None = ()
    label: str = ""
    """The board entry type (summaries count them per type)."""
    row: Row | None = None
    """A board event's entry (without detail): the host keeps its copy of the recent view from it."""

    @property
    def event_id(self) -> str:
        return f"{self.source}:{self.seq}"

    @property
    def worker_id(self) -> str | None:
        """The one worker this event is for (DMs and forge notifications), None for a broadcast."""
        named = (self.high or ()) + (self.low or ())
        return named[0] if len(named) == 1 and self.high is not None and self.low is not None else None


class Shared(NamedTuple):
    """One event as it reaches the agents of a host, made once per event and priority and shared by
    all of them (what `HostInbox.take_shared` returns: `Queued` without the worker id).

    Why: under policy `all` every worker of a host takes every entry; one value per event and
    priority, shared by the host's workers, costs no allocation per worker on that hot path.
    """

    event_id: str
    priority: str
    kind: str
    text: str
    enqueue_ts: int
    label: str = ""


class Queued(NamedTuple):
    """One event as it reaches one agent (what `HostInbox.take` returns; fields as in `Delivery`).

    Why: where the worker must be named (the deliveries trace, the host's own prompts) a small
    tuple per item, made only when the agent takes it (about a microsecond), not a model.
    """

    event_id: str
    worker_id: str
    priority: str
    kind: str
    text: str
    enqueue_ts: int
    label: str = ""
