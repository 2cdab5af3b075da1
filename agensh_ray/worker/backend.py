"""The tools backend: what the MCP tool server (tools.py) calls, per worker, to
reach the shared services (`agensh_ray.seams.Infra`).

Every service refusal (board, chat, forge, merge conflict) becomes a
`ToolFailure` whose message the model reads as the tool result; urgent events
queued for the caller ride along on every result (`pending_urgent`), which is
how a DM or a new board entry reaches an agent mid-turn.

Every write (board, chat, forge) first waits for its worker's turn under the
run's write rates (`agensh_ray.worker.rates`), before anything else is done
for it: a worker that writes too fast is slowed at its own calls.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING

from agensh_ray.board import BoardLimits
from agensh_ray.board.leases import Lease
from agensh_ray.errors import AGENT_REFUSALS, ToolFailure
from agensh_ray.inputs import forge_text_problem, whole_number
from agensh_ray.lag import SERVER
from agensh_ray.models import BoardEntry, BoardEntryIn, ChatMessage, PullRequest
from agensh_ray.render import fmt_issue, render
from agensh_ray.trace import ToolCallRow
from agensh_ray.worker.keep_going import WORK_TOOLS
from agensh_ray.worker.rates import WriteRates

if TYPE_CHECKING:
    from agensh_ray.worker.host import WorkerHost

PR_STATES = ("open", "merged", "closed", "all")
VERDICTS = ("approve", "comment", "request_changes")
_BOARD = BoardLimits()
"""The board's default limits: the ranges the tools accept (a board with other limits refuses the rest
with its own range)."""


def _arg(value: object, name: str, hi: int | None = None) -> int:
    """A tool's whole-number argument, 1 to `hi`, or a ToolFailure naming it and its range."""
    return whole_number(value, name, 1, hi, ToolFailure)


def _forge_texts(**texts: object) -> None:
    """A ToolFailure if a forge text is past its limit (the forge refuses it in the same words; checked here
    first, so a long text never crosses to the forge actor)."""
    for kind, text in texts.items():
        if (bad := forge_text_problem(kind, text)) is not None:
            raise ToolFailure(bad)


def _plain(exc: BaseException) -> str:
    """The message of an exception that may have crossed a Ray boundary."""
    cause = getattr(exc, "cause", None)
    if cause is not None:
        return str(cause)
    text = str(exc)
    return text.splitlines()[-1] if "Traceback" in text else text


class ToolsBackend:
    """The `Infra` of one host: its workers' tool calls, answered through the host's services."""

    def __init__(self, host: WorkerHost):
        self.host = host
        self.services = host.services
        self.rates = WriteRates(host.cfg.write_rates)
        self.tool_names: frozenset[str] = frozenset()
        """The MCP tools served so far (which calls the agents report are ours: agensh_ray/lag.py)."""

    # -- the server's own needs ---------------------------------------------------------
    def check_token(self, worker: str, token: str) -> bool:
        w = self.host.workers.get(worker)
        return w is not None and secrets.compare_digest(w.token, token)

    def pending_urgent(self, worker: str) -> str:
        taken = self.host.inbox.take(worker, urgent_only=True)
        self.host.record_deliveries(taken, "mid_turn")
        return render(taken, mid_turn=True)

    def record_tool_call(self, worker: str, tool: str, duration_ms: float, ok: bool, error: str | None) -> None:
        w = self.host.workers[worker]
        if ok and tool in WORK_TOOLS:
            w.work_calls += 1
        self.host.lag.record(SERVER, duration_ms)
        if tool not in self.tool_names:
            self.tool_names = self.tool_names | {tool}
        self.host.trace.write(
            ToolCallRow(worker_id=worker, tool=tool, source="mcp", duration_ms=duration_ms, ok=ok, error=error,
                        turn=w.turn, life=w.life)
        )

    async def _call(self, coro):
        """Turn service refusals into messages the model can act on."""
        try:
            return await coro
        except AGENT_REFUSALS as exc:
            raise ToolFailure(_plain(exc)) from None

    # -- board ----------------------------------------------------------------------------
    async def board_write(self, worker: str, type: str, text: str, detail: str | None) -> BoardEntry:
        await self.rates.take(worker, "board_write")
        entry = await self._call(
            self.services.board.awrite(BoardEntryIn(type=type, text=text, detail=detail, worker_id=worker))
        )
        self.host.workers[worker].board_writes += 1
        return entry

    async def board_read(self, worker: str, limit: int) -> list[BoardEntry]:
        return await self._call(self.services.board.arecent(_arg(limit, "limit", _BOARD.recent_limit)))

    async def board_unfold(self, worker: str, seq: int) -> BoardEntry:
        return await self._call(self.services.board.aunfold(_arg(seq, "seq")))

    async def board_grep(self, worker: str, pattern: str, regex: bool, limit: int) -> list[BoardEntry]:
        if not isinstance(regex, bool):
            raise ToolFailure(f"regex must be true or false, not {regex!r}")
        limit = _arg(limit, "limit", _BOARD.grep_limit_max)
        return await self._call(self.services.board.agrep(pattern, regex=regex, limit=limit))

    async def board_claims(self, worker: str, key: str) -> list[Lease]:
        if not isinstance(key, str):
            raise ToolFailure(f"key must be a text (a feature's name, as a CLAIM names it before its colon), "
                              f"not {key!r}")
        return await self._call(self.services.board.aclaims(key.strip() or None))

    async def _renew(self, worker: str) -> None:
        """A PR action renews the worker's open claims (rule `lease`; see agensh_ray/board/leases.py). Best
        effort: the action itself succeeded, and the next board write renews them anyway."""
        touch = getattr(self.services.board, "atouch", None)
        if touch is not None:
            try:
                await touch(worker)
            except Exception:  # a board restarting: not the agent's problem
                pass

    # -- chat -----------------------------------------------------------------------------
    async def send_dm(self, worker: str, to: str, text: str) -> ChatMessage:
        await self.rates.take(worker, "send_dm")
        return await self._call(self.services.chat.dm(worker, to, text))

    async def channel_post(self, worker: str, text: str) -> ChatMessage:
        await self.rates.take(worker, "channel_post")
        return await self._call(self.services.chat.post(worker, text))

    async def read_messages(self, worker: str, limit: int) -> list[ChatMessage]:
        return await self._call(self.services.chat.history(worker, _arg(limit, "limit")))  # the chat has the top

    # -- forge ----------------------------------------------------------------------------
    async def pr_create(self, worker: str, head: str, title: str, body: str) -> PullRequest:
        await self.rates.take(worker, "pr_create")
        _forge_texts(title=title, body=body, head=head)
        pr = await self._call(self.services.forge.pr_create(worker, head, title, body))
        await self._renew(worker)
        return pr

    async def pr_list(self, worker: str, state: str) -> list[PullRequest]:
        if state not in PR_STATES:
            raise ToolFailure(f"state must be open, merged, closed or all, not {state!r}")
        return await self._call(self.services.forge.pr_list(state))

    async def pr_view(self, worker: str, number: int) -> PullRequest:
        return await self._call(self.services.forge.pr_view(_arg(number, "number"), True))

    async def pr_review(self, worker: str, number: int, verdict: str, body: str) -> PullRequest:
        await self.rates.take(worker, "pr_review")
        if verdict not in VERDICTS:
            raise ToolFailure(f"verdict must be approve, comment or request_changes, not {verdict!r}")
        _forge_texts(review=body)
        pr = await self._call(self.services.forge.pr_review(_arg(number, "number"), worker, verdict, body))
        await self._renew(worker)
        return pr

    async def pr_comment(self, worker: str, number: int, body: str) -> PullRequest:
        await self.rates.take(worker, "pr_comment")
        _forge_texts(comment=body)
        pr = await self._call(self.services.forge.pr_comment(_arg(number, "number"), worker, body))
        await self._renew(worker)
        return pr

    async def pr_merge(self, worker: str, number: int) -> PullRequest:
        await self.rates.take(worker, "pr_merge")
        pr = await self._call(self.services.forge.pr_merge(_arg(number, "number"), worker))
        await self._renew(worker)
        return pr

    async def issue_view(self, worker: str, number: int) -> str:
        return fmt_issue(await self._call(self.services.forge.issue_view(_arg(number, "number"))))
