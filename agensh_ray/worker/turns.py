"""One worker's life inside its host: start its agent session, then take turns
until the run stops, and bring the agent back when its process dies.

When a turn starts:
- first turn: the worker prompt (prompts/worker.md) with its worker id;
- later turns: when events that wake a worker are queued (DMs, forge
  notifications, the host's own prompts: nudge, share-findings, wind-down,
  hand-off). Board entries and channel posts wait for the next turn (they
  would wake every idle worker on every write); mid-turn they arrive at once.

When the host's own prompts are due is the worker's `TurnClock`'s decision
(routing/turn_clock.py); this loop tells the clock when turns start and end.

When the agent process dies: record it, restart it, resume with session/load
where supported, else start a new session with the worker prompt and the
hand-off summary (agent/handoff.py). A turn that passes its deadline
(`RunConfig.turn_deadline_wall_s`: the agent hung) is killed and handled the
same way, after a `turn_deadline` row.

Through the model gateway, each turn's end asks it what the agent's model
calls met (`TurnReport`). A turn that ended on a failing model is a
`turn_error` with the provider's status (an agent CLI may end such a turn
normally, with the error only in its text), and the worker waits before its
next turn, longer for each such turn in a row, instead of prompting a dead
endpoint. A worker at its budget cap is stopped: its claims released on the
board, a `stopped` row saying why; the run goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from agensh_ray import prompts
from agensh_ray.agent.client import SessionObserver, ToolCallRecord
from agensh_ray.agent.handoff import handoff_summary
from agensh_ray.agent.limits import DiskWatch
from agensh_ray.errors import AgentDied, TurnDeadline, TurnFailed
from agensh_ray.lag import AGENT, tool_name
from agensh_ray.models import TurnReport, now_us
from agensh_ray.render import render
from agensh_ray.routing import HIGH, TurnClock
from agensh_ray.seams import AgentSession
from agensh_ray.trace import MODEL_ERROR, ToolCallRow, TurnRow, UsageRow
from agensh_ray.worker import give_up
from agensh_ray.worker.keep_going import KeepGoing, fingerprint

if TYPE_CHECKING:
    from agensh_ray.worker.host import WorkerHost

log = logging.getLogger(__name__)

MAX_RESTARTS = 5
"""Agent crashes a worker survives; after that it stops (a `gave_up` lifecycle row)."""
KILLED_AT_LIMIT = "agent killed: "
"""How the reason of an agent death a resource limit caused starts (agent/session.py)."""
HOST_KINDS = TurnClock.HOST_KINDS
"""Prompts the host makes itself (nudge, share_findings, wind_down, handoff)."""
WAKE_KINDS = {"dm", "forge", *HOST_KINDS}
"""What starts a turn for an idle worker."""


class TraceObserver(SessionObserver):
    """What a worker's agent session sees, as trace rows."""

    def __init__(self, host: WorkerHost, worker: Worker):
        self.host, self.worker = host, worker

    def on_tool_call(self, rec: ToolCallRecord) -> None:
        if rec.kind == "edit" and rec.status != "failed":
            self.worker.work_calls += 1
        dur = (rec.finished - rec.started) * 1000 if rec.finished else None
        if tool_name(rec.title, self.host.backend.tool_names):  # one of our MCP tools, as the agent waited for it
            self.host.lag.record(AGENT, dur)
        self.host.trace.write(ToolCallRow(
            worker_id=self.worker.id, tool=rec.title or rec.kind or "?", source="agent", tool_call_id=rec.tool_call_id,
            duration_ms=dur, ok=rec.status != "failed", turn=self.worker.turn,
            life=self.worker.life,
        ))

    def on_permission(self, title: str, allowed: bool, reason: str) -> None:
        """A refused permission request: traced, and the reason queued for the agent's next tool result (ACP
        tells the agent only that it was refused)."""
        if not allowed:
            self.worker.lifecycle("refused", f"{title}: {reason}")
            self.host.push(self.worker, "refused", prompts.refused(title or "a tool call", reason), HIGH)

    def on_refused(self, what: str, reason: str) -> None:
        """A terminal command or file access refused (the agent read the reason in the error it got)."""
        self.worker.lifecycle("refused", f"{what}: {reason}")

    def on_usage(self, input_tokens: int, output_tokens: int, cost_usd: float) -> None:
        w = self.worker
        w.usage_turns += 1
        w.tokens += input_tokens + output_tokens
        w.cost_usd += cost_usd
        self.host.trace.write(UsageRow(worker_id=w.id, turn=w.turn, life=w.life, input_tokens=input_tokens,
                                       output_tokens=output_tokens, cost_usd=cost_usd))


@dataclass(eq=False)
class Worker:
    """One worker: its identity and place on disk, its session, and where it is in its life."""

    host: WorkerHost
    id: str
    token: str
    """The secret in its MCP URL (the tool server checks it)."""
    workdir: Path
    home: Path
    session: AgentSession | None = None
    clock: TurnClock | None = None
    """When the host's prompts are due (made at launch)."""
    turn: int = 0
    """Turns started (the one in progress included)."""
    life: str = field(default_factory=lambda: secrets.token_hex(6))
    """This life's random id (a new Worker per launch: a resumed driver or a restarted host counts turns from 1
    again), in its turn rows' event ids `turn:<worker>:<life>:<turn>:<phase>` (docs/trace.md)."""
    turns_finished: int = 0
    """Turns that ended (however they ended)."""
    last_turn_s: float = 0.0
    """Wall seconds the last finished turn took."""
    in_turn: bool = False
    launched: bool = False
    stopped: bool = False
    crashed: int = 0
    board_writes: int = 0
    """Board writes during the current turn."""
    handoff: bool = False
    """The next turn opens a new session: it starts with the worker prompt."""
    turn_errors: int = 0
    model_errors: int = 0
    """Turns that ended on a failing model: the gateway saw its model calls fail, or the agent answered the turn
    with an error (codex-acp and claude-code-acp do when their model fails)."""
    usage_turns: int = 0
    """Turns whose usage the agent reported (Claude Code and Codex report none: their cost is unknown)."""
    tokens: int = 0
    cost_usd: float = 0.0
    """Tokens and cost as the agent reported them."""
    model_failures: int = 0
    """Turns in a row that ended on a failing model (the backoff doubles with each)."""
    ended_after_give_up: str | None = None
    """This turn was "cancelled" or its agent "stopped" by the worker after the gateway gave up (give_up.py)."""
    resume_at: float = 0.0
    """Schedule second before which no turn starts (backing off a failing model)."""
    stop_reason: str | None = None
    """Why the worker was stopped before the run's end (a budget cap)."""
    settled: str | None = None
    """Why a baseline worker stopped taking turns (its stop hook let it stop: keep_going.py)."""
    work_calls: int = 0
    """Edits and forge writes during the current turn (the baseline's stop hook)."""
    disk: DiskWatch | None = None
    """Its disk watcher (workdir and HOME against `LimitsConfig.disk_mib`), None without a disk limit."""
    keep_going: KeepGoing | None = None
    """The baseline's stop hook (None in a multi-agent run)."""
    closed: bool = False
    """Its session is closed and its `stopped` row written."""
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task | None = None

    # -- the loop -----------------------------------------------------------------------
    async def run(self) -> None:
        host = self.host
        try:
            self.session = await host.open_session(self)
            sandboxed = getattr(self.session, "sandbox", None)
            limited = getattr(self.session.process, "limits", None)
            self.lifecycle("started", f"harness={host.harness.name}" + (" (shared process)" if host.shared else "")
                           + (f"; sandbox: {sandboxed.note}" if sandboxed else "; no sandbox")
                           + (f"; limits: {limited.describe()}" if limited else ""))
        except Exception as exc:
            self.lifecycle("crashed", f"start failed: {exc}")
            self.stopped = True
            log.error("worker %s could not start: %s", self.id, exc)
            return
        trigger: str | None = "first"
        try:
            while not host.stopping.is_set() and self.stop_reason is None and self.settled is None:
                if self.turn > 0:
                    trigger = await self.wait_for_reason()
                    if trigger is None:
                        break
                await self.one_turn(trigger)
            if self.stop_reason is not None or self.settled is not None:
                await self.stop_early()
        finally:
            self.stopped = True

    def backing_off(self) -> bool:
        return not self.stopped and self.resume_at > self.host.schedule_s()

    async def wait_for_reason(self) -> str | None:
        """Block until something queued wakes this worker; None when the host stops. The turn is named after
        the host's own prompts when only they woke it (so a prompt never answers a prompt). No turn starts
        while the worker backs off a failing model."""
        while not self.host.stopping.is_set():
            pause = self.host.cfg.wall(self.resume_at - self.host.schedule_s())
            if pause > 0:
                try:
                    await asyncio.wait_for(self.host.stopping.wait(), pause)
                except asyncio.TimeoutError:
                    pass
                continue
            kinds = self.host.inbox.kinds(self.id) & WAKE_KINDS
            if kinds:
                return "events" if kinds - HOST_KINDS else sorted(kinds)[0]
            self.wake.clear()
            await self.wake.wait()
        return None

    def prompt_text(self, trigger: str) -> str:
        host = self.host
        pending = host.inbox.take(self.id, urgent_only=False)
        host.record_deliveries(pending, "turn_start")
        body = render(pending, mid_turn=False)
        if trigger == "first" or self.handoff:  # a new session knows nothing yet
            self.handoff = False
            cfg = host.cfg
            first = prompts.baseline(self.id) if cfg.baseline else prompts.worker(
                self.id, cfg.workers, prompts.claims(cfg.claims, cfg.claim_life_wall_s, cfg.time_scale))
            return first + ("\n\n" + body if body else "")
        return f"worker id: {self.id}\n" + (body or "Continue.")

    async def one_turn(self, trigger: str) -> None:
        host = self.host
        self.turn += 1
        self.in_turn = True
        self.board_writes = 0
        self.work_calls = 0
        before = await asyncio.to_thread(fingerprint, self.workdir) if host.cfg.baseline else ""
        self.clock.turn_started(host.schedule_s())
        text = self.prompt_text(trigger)
        host.trace.write(TurnRow(worker_id=self.id, event_id=self.turn_id("start"), turn=self.turn, phase="start",
                                 trigger=trigger, model=host.model))
        t0 = time.perf_counter()
        since = now_us()
        stop_reason = "error"
        failure: str | None = None
        self.ended_after_give_up = None
        if host.gateway is not None and not host.shared:  # a give-up of an earlier turn whose final report never
            with contextlib.suppress(asyncio.TimeoutError):  # reached the gateway is dropped (its ts < since), or
                await asyncio.wait_for(self.model_report(since), 5)  # it would refuse this turn's first calls
        watch = (asyncio.create_task(give_up.watch(self, since))
                 if host.gateway is not None and not host.shared else None)  # a model the gateway gave up on
        try:
            stop_reason, _ = await self.session.prompt(text, deadline_s=host.cfg.turn_deadline_wall_s,
                                                       stopped_s=host.cfg.liveness.agent_stopped_s)
        except AgentDied as exc:
            stop_reason = "agent_died"
            if isinstance(exc, TurnDeadline):  # hung (a stuck call, a SIGSTOP): killed, then back like a crash
                stop_reason = "turn_deadline"
                live = host.cfg.liveness
                bound = (f"deadline {live.turn_deadline_min:g} schedule min, at least {live.turn_floor_wall_s:g} wall s"
                         if not exc.stopped else
                         f"an agent stopped {live.agent_stopped_s:g} wall s is killed")
                self.lifecycle("turn_deadline", f"{exc} ({bound})")
            await self.recover(str(exc))
        except TurnFailed as exc:  # the agent answered with an error (e.g. its model endpoint failed)
            log.warning("turn %d of %s failed: %s", self.turn, self.id, exc)
            failure = str(exc)
            if host.cfg.harness != "sim":  # the sim calls no model: its failed turns are turn errors only
                self.model_errors += 1
                failure = MODEL_ERROR + failure
        except Exception as exc:
            log.exception("turn %d of %s failed", self.turn, self.id)
            failure = f"{type(exc).__name__}: {exc}"
        finally:
            if watch is not None:
                watch.cancel()
            self.in_turn = False
            self.last_turn_s = time.perf_counter() - t0
            self.turns_finished += 1
            host.trace.write(TurnRow(worker_id=self.id, event_id=self.turn_id("end"), turn=self.turn, phase="end",
                                     trigger=trigger, model=host.model, stop_reason=stop_reason,
                                     duration_ms=self.last_turn_s * 1000))
        await self.after_turn(since, failure)
        if host.cfg.baseline:
            await self.stop_hook(before, stop_reason)
        due = self.clock.turn_ended(host.schedule_s(), self.board_writes, trigger, stop_reason)
        if due is not None:
            host.push(self, due.kind, prompts.share_findings(), due.priority)
        host.clock_changed()

    async def stop_hook(self, before: str, stop_reason: str) -> None:
        """The baseline's: tell the agent to keep going, or let it stop (keep_going.py)."""
        host = self.host
        if self.keep_going is None:
            self.keep_going = KeepGoing(host.cfg.baseline_idle_turns)
        worked = self.work_calls > 0 or await asyncio.to_thread(fingerprint, self.workdir) != before
        left_s = host.cfg.minutes * 60 - host.schedule_s()
        verdict = self.keep_going.turn_ended(worked, stop_reason, left_s > 0)
        if verdict == "keep_going":
            host.push(self, "keep_going", prompts.keep_going(left_s / 60), "low")
        elif verdict == "stop":
            self.settled = self.keep_going.why_stop

    async def after_turn(self, since_us: int, failure: str | None) -> None:
        """A `turn_error` row for a failed turn (with what the gateway saw of its model calls), the backoff of
        a failing model, and the stop of a worker at its budget cap."""
        report = await self.model_report(since_us, final=True)
        model_failed = report is not None and report.failed > 0 and report.last_failed and report.budget is None
        if model_failed:
            cfg = self.host.cfg.gateway
            self.model_failures += 1
            wait = min(cfg.failure_backoff_s * 2 ** (self.model_failures - 1), cfg.failure_backoff_max_s)
            self.resume_at = self.host.schedule_s() + wait
            gave_up = "" if not report.gave_up else (
                f"; the gateway gave up, {report.refused_after_give_up} calls refused after it"
                + {"cancelled": ", the worker cancelled the turn", "stopped": ", the worker stopped the agent"}.get(
                    self.ended_after_give_up or "", ""))
            detail = (f"model calls failed ({report.failed} of {report.calls} this turn{gave_up}): {report.error}; "
                      f"no new turn for {wait:.0f} schedule s")
            if failure is None:  # an agent's error answer was counted already
                self.model_errors += 1
            said = failure.removeprefix(MODEL_ERROR) if failure else None
            failure = MODEL_ERROR + detail + (f"; the agent said: {said}" if said else "")
        elif report is not None and report.calls:
            self.model_failures = 0
        if failure is not None and (report is None or report.budget is None):  # at a cap, `stopped` says why
            self.turn_errors += 1
            self.lifecycle("turn_error", failure)
        if report is not None and report.budget is not None:
            self.stop_reason = report.budget

    async def model_report(self, since_us: int, final: bool = False) -> TurnReport | None:
        gateway = self.host.gateway
        if gateway is None or self.host.shared:
            return None
        try:
            return await gateway.turn_report(self.id, since_us, final)
        except Exception as exc:  # the turn is over either way; the gateway's own trace has its calls
            log.warning("no model report for %s: %s", self.id, exc)
            return None

    async def stop_early(self) -> None:
        """Stop this worker while the run goes on (its budget is spent): claims released, session closed."""
        why = self.stop_reason or self.settled or "stopped"
        await self.host.release_claims(self, why)
        if self.session is not None:
            await self.session.close()
        self.closed = True
        self.lifecycle("stopped", why)
        log.warning("worker %s stopped: %s", self.id, why)

    async def recover(self, why: str) -> None:
        host = self.host
        self.crashed += 1
        self.lifecycle("crashed", host.harness.redact(why, self.session.env if self.session else {}))
        if self.crashed > MAX_RESTARTS:
            self.lifecycle("gave_up", f"{self.crashed} crashes")
            self.stop()
            return
        try:
            loaded = await self.session.restart()
        except Exception as exc:
            self.lifecycle("gave_up", f"restart failed: {exc}")
            self.stop()
            return
        self.handoff = not loaded
        self.lifecycle("restarted", "session loaded" if loaded else "new session with hand-off summary")
        text = prompts.resume() if loaded else await handoff_summary(self.id, host.services)
        if why.startswith(KILLED_AT_LIMIT):  # a limit of its sandbox killed it (agent/limits.py): it is told which
            cause = why[len(KILLED_AT_LIMIT):].split(";")[0]
            text = prompts.limit(f"{cause}; the kernel killed your previous agent process. Run fewer or smaller "
                                 "things at once.") + "\n\n" + text
        host.push(self, "handoff", text, "low")

    def stop(self) -> None:
        self.stopped = True
        if self.task is not None:
            self.task.cancel()

    def lifecycle(self, event: str, detail: str = "") -> None:
        self.host.lifecycle(self, event, detail)

    def turn_id(self, phase: str) -> str:
        return f"turn:{self.id}:{self.life}:{self.turn}:{phase}"
