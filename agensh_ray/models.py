"""Typed values that cross a process boundary: board entries, chat messages,
forge objects and the events the routers deliver.

Every class here is a pydantic model so that a malformed value is rejected
where it enters, with a message that names the field, instead of three actors
later.
"""

from __future__ import annotations

import time
from enum import Enum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


def now_us() -> int:
    """Wall-clock UTC time in microseconds (the trace's `ts` unit)."""
    return time.time_ns() // 1000


class EntryType(str, Enum):
    OBSERVED = "OBSERVED"
    FACT = "FACT"
    FAIL = "FAIL"
    CLAIM = "CLAIM"
    PATCH_SUMMARY = "PATCH_SUMMARY"


class BoardEntryIn(BaseModel):
    """What a worker asks to put on the board (validated by `Board.validate`)."""

    model_config = ConfigDict(extra="forbid")
    type: str
    text: str
    detail: str | None = None
    worker_id: str
    request_id: str | None = None
    """Optional idempotency key: a retried write with the same key returns the first entry."""


class BoardEntry(BaseModel):
    """An acknowledged board entry: durable in the log before anyone sees it."""

    seq: int
    ts: int
    type: EntryType
    text: str
    worker_id: str
    has_detail: bool = False
    detail: str | None = None
    request_id: str | None = None

    @property
    def event_id(self) -> str:
        return f"board:{self.seq}"


class ChatMessage(BaseModel):
    """A post on the task channel (`to` is None) or a direct message."""

    seq: int
    ts: int
    sender: str
    to: str | None = None
    channel: str = "task"
    text: str

    @property
    def is_dm(self) -> bool:
        return self.to is not None

    @property
    def event_id(self) -> str:
        return f"chat:{self.seq}"


PRState = Literal["open", "merged", "closed"]
ReviewVerdict = Literal["approve", "comment", "request_changes"]


class Review(BaseModel):
    reviewer: str
    verdict: ReviewVerdict
    body: str = ""
    ts: int


class Comment(BaseModel):
    author: str
    body: str
    ts: int


class PullRequest(BaseModel):
    number: int
    title: str
    body: str = ""
    author: str
    head: str
    base: str = "main"
    state: PRState = "open"
    created_ts: int
    merged_ts: int | None = None
    merged_by: str | None = None
    closed_by: str | None = None
    merge_commit: str | None = None
    reviews: list[Review] = Field(default_factory=list)
    comments: list[Comment] = Field(default_factory=list)
    files: list[str] = Field(default_factory=list)
    """Paths changed by the PR relative to its base (filled by pr_view/merge)."""
    diff: str | None = None
    """Unified diff against the base, only when asked for (pr_view)."""


class Issue(BaseModel):
    number: int
    title: str
    body: str
    author: str
    state: Literal["open", "closed"] = "open"


ForgeEventKind = Literal[
    "push", "pr_opened", "pr_reviewed", "pr_commented", "pr_merged", "pr_closed", "merge_conflict", "merge_failed",
    "push_rejected"
]


class ForgeEvent(BaseModel):
    """One thing that happened on the forge, in order (`seq`), readable by cursor."""

    seq: int
    ts: int
    kind: ForgeEventKind
    actor: str
    pr: int | None = None
    ref: str | None = None
    detail: str = ""
    notify: list[str] = Field(default_factory=list)
    """Workers this concerns (PR author, reviewers, mentioned workers)."""

    @property
    def event_id(self) -> str:
        return f"forge:{self.seq}"


Priority = Literal["high", "low"]


class Delivery(BaseModel):
    """One event bound for one worker, as the router hands it to the worker's host."""

    event_id: str
    worker_id: str
    priority: Priority
    kind: str
    """board | dm | channel | forge | nudge | share_findings | wind_down | summary"""
    text: str
    enqueue_ts: int


class GatewayEndpoint(BaseModel):
    """What an agent gets instead of its provider's endpoint and credential: its node's model gateway."""

    model_config = ConfigDict(extra="forbid")
    url: str
    """The gateway's URL for the agent's provider route (http://127.0.0.1:<port>/<provider>)."""
    key: str
    """The worker's virtual key (worthless outside the gateway)."""


class TurnReport(BaseModel):
    """What the model gateway saw of one worker's model calls since a moment (the start of a turn)."""

    model_config = ConfigDict(extra="forbid")
    calls: int = 0
    failed: int = 0
    """Calls that ended in an error the agent saw (the gateway gave up, the stream was cut, refused)."""
    last_failed: bool = False
    """The last call of the span failed: the turn ended on a failing model."""
    error: str | None = None
    """The last failure: provider, model, the provider's status and message, attempts."""
    budget: str | None = None
    """Set when the worker (or the run) is at its budget cap: the refusal text."""
    gave_up: str | None = None
    """Set when the gateway gave up on a model call of this worker since its turn began (the provider's last
    error): its further calls are refused at once until the turn ends, and the worker ends the turn."""
    refused_after_give_up: int = 0
    """Calls refused at once since that give-up (a CLI that retries on its own)."""
