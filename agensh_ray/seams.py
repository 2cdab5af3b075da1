"""The seams of agensh-ray as Protocols: what each side of a boundary needs
from the other, and nothing more. Implementations duck-type them.

Two families:

* the **services**, as their adapters implement them (`Forge`, `Chat`: plain,
  synchronous objects, one per run, living inside the forge and chat actors);
* what a **worker host** awaits (`BoardAccess`, `ChatAccess`, `ForgeAccess`,
  gathered in `Services`, and `GatewayAccess`, its node's model gateway): in a run these are facades over Ray actors; in
  tests, the same plain objects called in-process. The host never knows which.

And the two seams inside a worker host: `AgentSession` (one worker's agent
behind ACP: a process of its own, or a session on a shared sim process) and
`Infra` (what the MCP tool server calls back into, per worker).

And the two seams of a router (`RouterPump`): `RouterSources` (the durable
sources it reads by cursor) and `HostLink` (one worker host it feeds): in a
run, Ray actors behind actors/router.py; in tests, plain in-process objects.
"""

from __future__ import annotations

from typing import Any, Protocol

from agensh_ray.models import (
    BoardEntry,
    BoardEntryIn,
    ChatMessage,
    ForgeEvent,
    GatewayEndpoint,
    Issue,
    PullRequest,
    ReviewVerdict,
    TurnReport,
)

# ---------------------------------------------------------------------------- services


class Forge(Protocol):
    """A git forge with pull requests (embedded, or Gitea). All calls are synchronous."""

    def add_user(self, name: str) -> str:
        """Create a user (idempotent) and return its access token."""

    def clone_url(self, user: str) -> str:
        """HTTP URL of the repository carrying this user's credentials."""

    def init_repo(self, starter_dir: Any, title: str, body: str) -> None:
        """Seed the repository from a starter directory and open issue #1 = the task (idempotent)."""

    def issue_view(self, number: int) -> Issue: ...

    def pr_create(self, author: str, head: str, title: str, body: str = "", base: str = "main") -> PullRequest: ...

    def pr_list(self, state: str = "open") -> list[PullRequest]:
        """state: open | merged | closed | all."""

    def pr_view(self, number: int, with_diff: bool = True) -> PullRequest: ...

    def pr_review(self, number: int, reviewer: str, verdict: ReviewVerdict, body: str = "") -> PullRequest: ...

    def pr_comment(self, number: int, author: str, body: str) -> PullRequest: ...

    def pr_merge(self, number: int, merger: str) -> PullRequest:
        """Merge into the base; raises MergeConflict (with the files) or ForgeError."""

    def pr_close(self, number: int, by: str) -> PullRequest: ...

    def events_since(self, cursor: int, limit: int = 1000) -> list[ForgeEvent]:
        """Forge events with seq > cursor, oldest first."""

    def main_head(self) -> str:
        """Commit id of main."""

    def close(self) -> None: ...


class Chat(Protocol):
    """One task channel and direct messages (embedded, or Mattermost). All calls are synchronous."""

    def add_user(self, name: str) -> None: ...

    def post(self, sender: str, text: str) -> ChatMessage:
        """Post on the task channel."""

    def dm(self, sender: str, to: str, text: str) -> ChatMessage: ...

    def messages_since(self, cursor: int, limit: int = 1000) -> list[ChatMessage]:
        """Every message (posts and DMs) with seq > cursor, oldest first."""

    def history(self, user: str, limit: int = 50) -> list[ChatMessage]:
        """The newest channel posts and the DMs to or from `user`, oldest first."""

    @property
    def last_seq(self) -> int:
        """The newest message's seq (0: none yet)."""

    def close(self) -> None: ...


# ---------------------------------------------------------------------------- what a worker host awaits


class BoardAccess(Protocol):
    """The board as a worker host uses it (refusals raise BoardError)."""

    async def awrite(self, entry: BoardEntryIn) -> BoardEntry: ...

    async def arecent(self, limit: int | None = None) -> list[BoardEntry]: ...

    async def aunfold(self, seq: int) -> BoardEntry: ...

    async def agrep(self, pattern: str, regex: bool = True, limit: int = 50, type: str | None = None
                    ) -> list[BoardEntry]: ...

    async def aclaims(self, key: str | None = None) -> list[Any]: ...

    async def atouch(self, worker: str) -> None: ...


class ChatAccess(Protocol):
    """The chat as a worker host uses it (refusals raise ChatError)."""

    async def post(self, sender: str, text: str) -> ChatMessage: ...

    async def dm(self, sender: str, to: str, text: str) -> ChatMessage: ...

    async def history(self, user: str, limit: int = 50) -> list[ChatMessage]: ...


class ForgeAccess(Protocol):
    """The forge as a worker host uses it (refusals raise ForgeError or MergeConflict)."""

    async def issue_view(self, number: int) -> Issue: ...

    async def pr_create(self, author: str, head: str, title: str, body: str = "") -> PullRequest: ...

    async def pr_list(self, state: str = "open") -> list[PullRequest]: ...

    async def pr_view(self, number: int, with_diff: bool = True) -> PullRequest: ...

    async def pr_review(self, number: int, reviewer: str, verdict: str, body: str = "") -> PullRequest: ...

    async def pr_comment(self, number: int, author: str, body: str) -> PullRequest: ...

    async def pr_merge(self, number: int, merger: str) -> PullRequest: ...


class GatewayAccess(Protocol):
    """The model gateway of the host's node (services/gateway), awaited by the host."""

    async def endpoint(self, workers: list[str]) -> dict[str, GatewayEndpoint]:
        """Each worker's gateway URL and virtual key, for its agent's environment."""

    async def turn_report(self, worker: str, since_us: int, final: bool = False) -> TurnReport:
        """What the worker's model calls met since `since_us` (failures, a budget cap, a give-up); `final`: the
        turn has ended (the gateway stops refusing the worker's calls after a give-up)."""


class Services(Protocol):
    """The shared services of a run, as one worker host reaches them (`gateway`: optional attribute, present
    when the run's agents go through the model gateway)."""

    board: BoardAccess
    chat: ChatAccess
    forge: ForgeAccess


# ---------------------------------------------------------------------------- inside a worker host


class AgentSession(Protocol):
    """One worker's agent behind ACP: ``start() -> prompt(text) ... -> restart() ... -> close()``.

    `prompt` raises AgentDied when the agent process dies or its connection breaks, TurnFailed when
    the agent answers the turn with an error; `restart` brings it back and says whether the old
    conversation was restored (session/load) or a new session needs the hand-off summary.
    """

    env: dict[str, str]

    @property
    def pid(self) -> int | None: ...

    @property
    def alive(self) -> bool: ...

    async def start(self) -> str:
        """Start (or join) the agent process and open the session; returns the session id."""

    async def prompt(self, text: str, deadline_s: float | None = None,
                     stopped_s: float | None = None) -> tuple[str, str]:
        """One turn: (ACP stop reason, the agent's text). Past `deadline_s` wall seconds, or with its process
        stopped (SIGSTOP) for `stopped_s`, the agent's process group is killed and TurnDeadline (an AgentDied)
        raised."""

    async def cancel(self) -> None: ...

    async def restart(self) -> bool:
        """After a crash; True if the old session was loaded (no hand-off needed)."""

    async def close(self) -> None: ...


class Infra(Protocol):
    """What the MCP tool server needs from its host, per worker. Raise ToolFailure for bad arguments."""

    async def board_write(self, worker: str, type: str, text: str, detail: str | None) -> BoardEntry: ...
    async def board_read(self, worker: str, limit: int) -> list[BoardEntry]: ...
    async def board_unfold(self, worker: str, seq: int) -> BoardEntry: ...
    async def board_grep(self, worker: str, pattern: str, regex: bool, limit: int) -> list[BoardEntry]: ...
    async def board_claims(self, worker: str, key: str) -> list[Any]: ...
    async def send_dm(self, worker: str, to: str, text: str) -> ChatMessage: ...
    async def channel_post(self, worker: str, text: str) -> ChatMessage: ...
    async def read_messages(self, worker: str, limit: int) -> list[ChatMessage]: ...
    async def pr_create(self, worker: str, head: str, title: str, body: str) -> PullRequest: ...
    async def pr_list(self, worker: str, state: str) -> list[PullRequest]: ...
    async def pr_view(self, worker: str, number: int) -> PullRequest: ...
    async def pr_review(self, worker: str, number: int, verdict: str, body: str) -> PullRequest: ...
    async def pr_comment(self, worker: str, number: int, body: str) -> PullRequest: ...
    async def pr_merge(self, worker: str, number: int) -> PullRequest: ...
    async def issue_view(self, worker: str, number: int) -> str: ...

    def pending_urgent(self, worker: str) -> str:
        """Text of urgent events queued for the worker (empty if none); marks them delivered."""

    def record_tool_call(self, worker: str, tool: str, duration_ms: float, ok: bool, error: str | None) -> None: ...

    def check_token(self, worker: str, token: str) -> bool: ...


# ---------------------------------------------------------------------------- what a router reads and feeds


class RouterSources(Protocol):
    """The durable sources a router reads by cursor (each event's seq is its position in its source)."""

    async def read(self, source: str, cursor: int) -> list[Any]:
        """Events of `source` (board | chat | forge) with seq > cursor, oldest first. Board and chat wait
        up to their poll timeout for one (a long poll); the forge is polled, and an empty read waits a
        little before it returns. [] when nothing came."""

    async def board_info(self) -> dict[str, Any]:
        """At least `last_ts` (the newest entry's board time, us) and `claim_ttl_s` (claims' lifetime)."""

    async def board_claims(self) -> list[Any]:
        """The board's open claims (`agensh_ray.board.leases.Lease`, each key's oldest first)."""

    async def board_cursor_at(self, ts: int) -> int:
        """The cursor just before the first entry written at board time `ts` (us) or later."""

    async def board_since(self, cursor: int, limit: int) -> list[BoardEntry]:
        """Up to `limit` board entries with seq > cursor, oldest first, without waiting."""


class HostLink(Protocol):
    """One worker host as a router feeds it. Raises HostGone when the host is gone for good; any other
    error is transient (the router sends the same events again; the host drops what it already has)."""

    async def deliver(self, events: list[Any], cursors: dict[str, int]) -> int:
        """Queue the router's events (`agensh_ray.wire.Event`) and move the host's cursors to `cursors`;
        returns how many (worker, event) items were new."""

    async def cursors(self) -> dict[str, int]:
        """The host's cursor per source: where a restarted router resumes."""
