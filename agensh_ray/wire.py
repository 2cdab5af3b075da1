"""The compact wire forms: what the hottest values look like while they cross a process boundary, and
why each is not the pydantic model the rest of the code uses.

A Ray call pickles its arguments and its answer. At 1,024 workers the board and the routers carry
tens of thousands of small values a second, and pickling a pydantic model costs about ten times a
plain tuple with the same fields. So the hot paths carry tuples (`NamedTuple`s where a reader wants
names), built only from values that were validated where they entered, and turned back into models
at the edge where plain code wants them. Everything that is not hot stays a model (`agensh_ray.models`).

Sections: "board" (the board's entries, write requests and answers, and the recent-view delta) and
"routing" (the events a router ships to a worker host, and the items its agents take). Other
sections append below them, each with its own heading.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from agensh_ray.errors import BoardError
from agensh_ray.models import BoardEntry, EntryType

# ==================================================================================================== board
#
# The board's calls, and the form of what each carries:
#   write_acks(list[EntryFields])        -> list[Ack | Row | BoardError]   (one per request, in order)
#   since_rows / wait_since_rows(cursor) -> list[Row]                       (routers, the driver)
#   recent_delta(have_lo, have_hi)       -> RecentDelta                     (each host's recent-view copy)
# Refusals travel as `BoardError` values, not raised: the facade re-raises them with the board's own
# message instead of a wrapped remote traceback.


class Row(NamedTuple):
    """An entry as the board hands it across process boundaries: a plain tuple, about ten times
    cheaper to pickle than the `BoardEntry` model (same field names; `entry()` makes the model).

    Routers read the board as rows and ship each one inside the routing events, so a host keeps its
    copy of the recent view current from what it is delivered anyway."""

    seq: int
    ts: int
    type: str
    text: str
    worker_id: str
    has_detail: bool = False
    detail: str | None = None
    request_id: str | None = None

    def entry(self) -> BoardEntry:
        return BoardEntry(
            seq=self.seq, ts=self.ts, type=self.type, text=self.text, worker_id=self.worker_id,
            has_detail=self.has_detail, detail=self.detail, request_id=self.request_id,
        )


EntryFields = tuple[str, str, "str | None", str, "str | None"]
"""A write request as a plain tuple: (type, text, detail, worker_id, request_id).

Why: a host writing for 64 workers sends its entries in shared calls; a tuple per entry pickles at a
fraction of a `BoardEntryIn`, and the board validates the fields itself anyway (`Board.validate`).
The writer always sets `request_id` (an idempotency key), so a call Ray re-sends after the board
actor restarted answers with the entry already written instead of writing it twice."""


Ack = tuple[int, int]
"""A new entry's answer to its writer: (seq, ts). The writer has the rest, so the board does not send
it back (a batch's answer is a few ints per entry, the cheapest thing Ray can carry)."""


def entries_from_acks(requests: list[tuple], acks: list[Any]) -> list[BoardEntry | BoardError]:
    """The entries a writer wrote, from its requests (`EntryFields` tuples) and the board's answers:
    `(seq, ts)` for a new entry, the stored `Row` for a request id written before, a `BoardError` for a
    refusal."""
    out: list[BoardEntry | BoardError] = []
    for req, ack in zip(requests, acks):
        if isinstance(ack, tuple) and not isinstance(ack, Row):
            if isinstance(req, dict):
                req = tuple(req.get(k) for k in ("type", "text", "detail", "worker_id", "request_id"))
            t, text, detail, worker, rid = req
            # The board accepted these fields (its answer says so): no second validation.
            out.append(BoardEntry.model_construct(
                seq=ack[0], ts=ack[1], type=EntryType(str(getattr(t, "value", t)).strip().upper()), text=text,
                worker_id=worker, has_detail=bool(detail), detail=detail or None, request_id=rid))
        else:
            out.append(ack.entry() if isinstance(ack, Row) else ack)
    return out


class RecentDelta(NamedTuple):
    """`Board.recent_delta`'s answer (plain tuples: it crosses to every host several times a second).

    Why a delta: the recent view is 2,000 entries; a host keeps its own copy and asks only for what
    it lacks, so a read costs the new entries, not the whole view (`agensh_ray.board.view` applies it).
    """

    reset: bool
    first_seq: int
    """The view holds no entry older than this."""
    claim_cutoff: int
    """CLAIMs stamped before this (board clock, us) are not in the view."""
    rows: list[Row]
    """The entries the reader lacks, oldest first, without details."""
    last_seq: int = 0
    """The board's newest seq when it answered: the view is complete up to here."""
    limit: int = 0
    """The view's size (`BoardLimits.recent_limit`)."""
    claim_ttl_us: int = 0
    """How long a CLAIM stays in the view (board clock, us)."""


# ==================================================================================================== routing
#
# What a router ships to a worker host, and what the host's agents take from it:
#   deliver(list[Event], cursors: dict[source, seq]) -> int     (router -> host, one call per batch)
#   HostInbox.take_shared(worker) -> list[Shared]; take(worker) -> list[Queued]   (host -> its agents)
# The three are built only from validated models (`BoardEntry`, `ChatMessage`, `ForgeEvent`,
# `Delivery`), and never cross the agent boundary: an agent reads their `text` (agensh_ray/render.py).

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
