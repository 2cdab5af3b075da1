"""The worker host: the logic of a WorkerActor, as a plain class.

A host runs K workers (1 in production). Per host: one MCP tool server, one
inbox (queues + source cursors), one trace writer. Per worker: a sealed
HOME, its own clone of the repository with its own forge credentials, an ACP
session with its agent, and a loop that starts turns:

- first turn: the worker prompt (prompts/worker.md) with its worker id;
- later turns: when events are queued (channel posts, forge notifications,
  urgent events that arrived between turns), after an idle nudge, after a
  turn that wrote nothing to the board (share-findings prompt), or at a
  wind-down notice;
- when the agent process dies: record it, restart it, resume with
  session/load where supported, else prime a new session with a hand-off
  summary (its claims, PRs and last board entries).
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agensh_ray.config import RunConfig
from agensh_ray.errors import AGENT_REFUSALS, AgentDied, ToolFailure, TurnFailed
from agensh_ray.handoff import handoff_summary
from agensh_ray.harness import Harness, get_harness
from agensh_ray.models import BoardEntry, BoardEntryIn, ChatMessage, Delivery, PullRequest, now_us
from agensh_ray.paths import PROMPTS_DIR
from agensh_ray.render import fmt_entry, fmt_pr, render
from agensh_ray.routing import HostInbox
from agensh_ray.session import AgentSession, SessionObserver, ToolCallRecord
from agensh_ray.tools import ToolServer
from agensh_ray.trace import DeliveryRow, LifecycleRow, ToolCallRow, TraceWriter, TurnRow, UsageRow

log = logging.getLogger(__name__)

PROMPTS = PROMPTS_DIR
MAX_RESTARTS = 5
LOCAL_KINDS = {"nudge", "share_findings", "wind_down", "handoff"}
WAKE_KINDS = {"dm", "forge", *LOCAL_KINDS}
"""What starts a turn for an idle worker. Board entries and channel posts wait for its next turn
(they would wake every idle worker on every write); mid-turn they arrive at once."""

NUDGE = "Keep working: gather context (board, PRs, messages), claim something open or review and merge a peer's PR."
SHARE = (
    "Your last turn wrote nothing to the board. If you learned anything (a FACT you verified, an OBSERVED "
    "detail, a FAIL), write it now; then continue."
)
WIND_DOWN = {
    0: "WIND-DOWN: {minutes:.0f} minutes left. No new features; check that the root build passes; merge open PRs.",
    1: "WIND-DOWN: {minutes:.0f} minutes left. Merge only what is ready, then stop.",
}


SEED_MAX_AGE_S = 30.0


def _git(args: list[str], env: dict[str, str]) -> None:
    res = subprocess.run(["git", *args], capture_output=True, text=True, env=env, timeout=300)
    if res.returncode != 0:
        raise RuntimeError(f"git {' '.join(args[:2])} failed: {res.stderr.strip()[-500:]}")


def worker_prompt(worker_id: str, workers: int) -> str:
    return (PROMPTS / "worker.md").read_text().format(worker_id=worker_id, workers=workers)


@dataclass
class WorkerState:
    id: str
    token: str
    workdir: Path
    home: Path
    session: AgentSession | None = None
    turn: int = 0
    in_turn: bool = False
    launched: bool = False
    stopped: bool = False
    crashed: int = 0
    last_turn_end: float = 0.0
    board_writes: int = 0
    """Board writes during the current turn."""
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task | None = None
    handoff: bool = False


class _Observer(SessionObserver):
    def __init__(self, host: "WorkerHost", w: WorkerState):
        self.host, self.w = host, w

    def on_tool_call(self, rec: ToolCallRecord) -> None:
        dur = (rec.finished - rec.started) * 1000 if rec.finished else None
        self.host.trace.write(
            ToolCallRow(
                worker_id=self.w.id,
                tool=rec.title or rec.kind or "?",
                source="agent",
                tool_call_id=rec.tool_call_id,
                duration_ms=dur,
                ok=rec.status != "failed",
                turn=self.w.turn,
            )
        )

    def on_usage(self, input_tokens: int, output_tokens: int, cost_usd: float) -> None:
        self.host.trace.write(
            UsageRow(
                worker_id=self.w.id,
                turn=self.w.turn,
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                cost_usd=cost_usd,
            )
        )


class WorkerHost:
    """Hosts workers; implements the `Infra` the tool server calls into.

    `services` gives async access to the shared services:
    ``services.board`` (awrite/arecent/aunfold/agrep), ``services.chat`` and
    ``services.forge`` (the Chat/Forge interfaces, awaited).
    """

    def __init__(
        self,
        host_id: str,
        worker_ids: list[str],
        cfg: RunConfig,
        run_dir: Path,
        run_id: str,
        services: Any,
        clone_urls: dict[str, str],
        start_wall: float,
        task_root: Path,
    ):
        self.host_id = host_id
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.services = services
        self.clone_urls = clone_urls
        self.start_wall = start_wall
        self.task_root = task_root
        self.harness: Harness = get_harness(cfg.harness)
        self.trace = TraceWriter(self.run_dir, f"host-{host_id}", run_id)
        self.inbox = HostInbox(worker_ids)
        self.workers: dict[str, WorkerState] = {}
        for w in worker_ids:
            base = self.run_dir / "workers" / w
            self.workers[w] = WorkerState(w, secrets.token_hex(8), base / "repo", base / "home")
        self.tools = ToolServer(self)
        # Simulation packing: the sim agent serves all of this host's workers from one process.
        self._mux = self.harness.name == "sim" and len(worker_ids) > 1
        self._shared = None
        self._seed_lock = threading.Lock()
        self._seed_at = 0.0
        self._stopping = asyncio.Event()
        self._wind_down_sent: set[int] = set()
        self._clock_task: asyncio.Task | None = None

    # -- lifecycle -------------------------------------------------------------------
    async def start(self) -> None:
        await self.tools.start()
        self._clock_task = asyncio.create_task(self._clock(), name=f"clock-{self.host_id}")

    def schedule_s(self) -> float:
        """Schedule seconds since the run started."""
        return (time.time() - self.start_wall) * self.cfg.time_scale

    async def launch(self, worker_id: str) -> None:
        w = self.workers[worker_id]
        if w.launched:
            return
        w.launched = True
        await asyncio.to_thread(self._prepare_workdir, w)
        w.task = asyncio.create_task(self._run_worker(w), name=f"worker-{w.id}")

    def _prepare_workdir(self, w: WorkerState) -> None:
        """The worker's own clone, with its own credentials in `origin`.

        One network fetch per host (into a seed mirror, refreshed when older than
        SEED_MAX_AGE_S); each worker then clones the seed locally (hardlinks) and points
        origin at the forge with its own token. 64 workers of a node thus cost one
        transfer from the forge, not 64."""
        w.home.mkdir(parents=True, exist_ok=True)
        if (w.workdir / ".git").exists():
            return
        env = self._git_env(w)
        seed = self.run_dir / "workers" / f"_{self.host_id}" / "seed.git"
        with self._seed_lock:
            if not seed.exists():
                seed.parent.mkdir(parents=True, exist_ok=True)
                _git(["clone", "-q", "--mirror", self.clone_urls[w.id], str(seed)], env)
                self._seed_at = time.monotonic()
            elif time.monotonic() - self._seed_at > SEED_MAX_AGE_S:
                _git(["-C", str(seed), "remote", "set-url", "origin", self.clone_urls[w.id]], env)
                _git(["-C", str(seed), "fetch", "-q", "--prune", "origin"], env)
                self._seed_at = time.monotonic()
        _git(["clone", "-q", str(seed), str(w.workdir)], env)
        _git(["-C", str(w.workdir), "remote", "set-url", "origin", self.clone_urls[w.id]], env)

    def _git_env(self, w: WorkerState) -> dict[str, str]:
        email = f"{w.id}@agensh.invalid"
        return {
            "GIT_AUTHOR_NAME": w.id,
            "GIT_AUTHOR_EMAIL": email,
            "GIT_COMMITTER_NAME": w.id,
            "GIT_COMMITTER_EMAIL": email,
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_CONFIG_NOSYSTEM": "1",
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(w.home),
        }

    def _agent_env(self, w: WorkerState, shared: bool = False) -> dict[str, str]:
        env = self._git_env(w)
        env.pop("HOME")
        if shared:  # one process for many workers: the agent sets each session's git identity itself
            for k in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL"):
                env.pop(k)
        if self.harness.name == "sim":
            sim = self.cfg.sim
            env.update(
                AGENSH_SIM_SEED=str(self.cfg.seed),
                AGENSH_SIM_THINK_S=str(self.cfg.wall(sim.think_s)),
                AGENSH_SIM_BUG_RATE=str(sim.bug_rate),
                AGENSH_SIM_OBSERVE_RATE=str(sim.observe_rate),
                AGENSH_SIM_VERIFY_MAIN_RATE=str(sim.verify_main_rate),
                AGENSH_SIM_TASK=str(self.task_root),
                PYTHONPATH=os.pathsep.join(p for p in sys.path if p),
            )
        return env

    def _lifecycle(self, w: WorkerState, event: str, detail: str = "") -> None:
        pid = w.session.pid if w.session else None
        self.trace.write(LifecycleRow(worker_id=w.id, event=event, detail=detail[:2000], host=self.host_id, pid=pid))

    async def _start_session(self, w: WorkerState) -> None:
        if self._mux:
            from agensh_ray.mux import MuxAgentSession, SharedAgent

            if self._shared is None:
                shared_env = self.harness.environment(home=self.run_dir / "workers" / f"_{self.host_id}",
                                                      extra=self._agent_env(w, shared=True))
                self._shared = SharedAgent(self.harness, shared_env, self.run_dir, self.run_dir / "logs",
                                           f"{self.host_id}.shared-agent")
            w.session = MuxAgentSession(self._shared, w.id, w.workdir, self.tools.url(w.id, w.token),
                                        _Observer(self, w), self._shared.env)
            await w.session.start()
            self._lifecycle(w, "started", f"harness={self.harness.name} (shared process)")
            return
        w.session = AgentSession(
            self.harness,
            w.id,
            w.workdir,
            w.home,
            self.tools.url(w.id, w.token),
            _Observer(self, w),
            extra_env=self._agent_env(w),
            log_dir=self.run_dir / "logs",
        )
        await w.session.start()
        self._lifecycle(w, "started", f"harness={self.harness.name}")

    async def _run_worker(self, w: WorkerState) -> None:
        try:
            await self._start_session(w)
        except Exception as exc:
            self._lifecycle(w, "crashed", f"start failed: {exc}")
            w.stopped = True
            log.error("worker %s could not start: %s", w.id, exc)
            return
        trigger = "first"
        try:
            while not self._stopping.is_set():
                if w.turn > 0:
                    trigger = await self._wait_for_reason(w)
                    if trigger is None:
                        break
                await self._one_turn(w, trigger)
        finally:
            w.stopped = True

    async def _wait_for_reason(self, w: WorkerState) -> str | None:
        """Block until there is a reason for a new turn; None when stopping."""
        nudge_wall = self.cfg.wall(self.cfg.routing.idle_nudge_s)
        while not self._stopping.is_set():
            kinds = self.inbox.kinds(w.id)
            if kinds & WAKE_KINDS:
                local = kinds & LOCAL_KINDS
                # A turn caused only by our own prompts is named after them (so no prompt loops).
                return "events" if (kinds & WAKE_KINDS) - LOCAL_KINDS else sorted(local)[0]
            remaining = w.last_turn_end + nudge_wall - time.monotonic()
            if remaining <= 0:
                self.inbox.push_local(self._local(w, "nudge", NUDGE))
                return "nudge"
            w.wake.clear()
            try:
                await asyncio.wait_for(w.wake.wait(), timeout=remaining)
            except asyncio.TimeoutError:
                pass
        return None

    def _local(self, w: WorkerState, kind: str, text: str, priority: str = "low") -> Delivery:
        return Delivery(
            event_id=f"{kind}:{w.id}:{now_us()}", worker_id=w.id, priority=priority, kind=kind, text=text,
            enqueue_ts=now_us(),
        )

    def _prompt_text(self, w: WorkerState, trigger: str) -> str:
        pending = self.inbox.take(w.id, urgent_only=False)
        self._record_deliveries(pending, "turn_start")
        body = render(pending, mid_turn=False)
        if trigger == "first":
            return worker_prompt(w.id, self.cfg.workers) + ("\n\n" + body if body else "")
        head = f"worker id: {w.id}\n"
        if w.handoff:
            w.handoff = False
            head = worker_prompt(w.id, self.cfg.workers) + "\n\n" + self._handoff_text(w) + "\n"
        return head + (body or "Continue.")

    def _handoff_text(self, w: WorkerState) -> str:
        return (
            "Your agent process restarted and lost its session. Before it died you were working as "
            f"{w.id}: read the board (board_grep '{w.id}') for your CLAIMs and pr_list for your PRs, "
            "then finish what you claimed."
        )

    async def _one_turn(self, w: WorkerState, trigger: str) -> None:
        w.turn += 1
        w.in_turn = True
        w.board_writes = 0
        text = self._prompt_text(w, trigger)
        self.trace.write(TurnRow(worker_id=w.id, turn=w.turn, phase="start", trigger=trigger))
        t0 = time.perf_counter()
        stop_reason = "error"
        try:
            stop_reason, _ = await w.session.prompt(text)
        except AgentDied as exc:
            stop_reason = "agent_died"
            await self._recover(w, str(exc))
        except TurnFailed as exc:  # the agent answered with an error (e.g. its model endpoint failed)
            stop_reason = "error"
            log.warning("turn %d of %s failed: %s", w.turn, w.id, exc)
            self._lifecycle(w, "turn_error", str(exc))
        except Exception as exc:
            stop_reason = "error"
            log.exception("turn %d of %s failed", w.turn, w.id)
            self._lifecycle(w, "turn_error", f"{type(exc).__name__}: {exc}")
        finally:
            w.in_turn = False
            w.last_turn_end = time.monotonic()
            self.trace.write(
                TurnRow(
                    worker_id=w.id,
                    turn=w.turn,
                    phase="end",
                    trigger=trigger,
                    stop_reason=stop_reason,
                    duration_ms=(time.perf_counter() - t0) * 1000,
                )
            )
        if (
            self.cfg.routing.share_findings
            and w.board_writes == 0
            and trigger not in LOCAL_KINDS
            and stop_reason == "end_turn"
        ):
            self.inbox.push_local(self._local(w, "share_findings", SHARE))

    async def _recover(self, w: WorkerState, why: str) -> None:
        w.crashed += 1
        self._lifecycle(w, "crashed", self.harness.redact(why, w.session.env if w.session else {}))
        if w.crashed > MAX_RESTARTS:
            self._lifecycle(w, "gave_up", f"{w.crashed} crashes")
            self._stopping_worker(w)
            return
        try:
            loaded = await w.session.restart()
        except Exception as exc:
            self._lifecycle(w, "gave_up", f"restart failed: {exc}")
            self._stopping_worker(w)
            return
        w.handoff = not loaded
        self._lifecycle(w, "restarted", "session loaded" if loaded else "new session with hand-off summary")
        text = "Resume your work." if loaded else await handoff_summary(w.id, self.services)
        self.inbox.push_local(self._local(w, "handoff", text, priority="low"))

    def _stopping_worker(self, w: WorkerState) -> None:
        w.stopped = True
        if w.task is not None:
            w.task.cancel()

    async def _clock(self) -> None:
        """Wind-down notices at T-45 and T-5 minutes (settings), to every worker of this host."""
        deadline = self.cfg.minutes * 60
        notices = sorted(self.cfg.routing.wind_down_s, reverse=True)
        while not self._stopping.is_set():
            now = self.schedule_s()
            for i, before in enumerate(notices):
                if i not in self._wind_down_sent and now >= deadline - before and before < deadline:
                    self._wind_down_sent.add(i)
                    text = WIND_DOWN[min(i, 1)].format(minutes=before / 60)
                    for w in self.workers.values():
                        if w.launched:
                            self.inbox.push_local(self._local(w, "wind_down", text, priority="high"))
                            w.wake.set()
            try:
                await asyncio.wait_for(self._stopping.wait(), timeout=0.5)
            except asyncio.TimeoutError:
                pass

    # -- router intake ---------------------------------------------------------------
    def deliver(self, deliveries: list[Delivery], cursors: dict[str, int]) -> int:
        observe = getattr(getattr(self.services, "board", None), "observe", None)
        if observe is not None:  # the host's copy of the recent view follows the board stream
            observe([r for d in deliveries if (r := getattr(d, "row", None)) is not None], cursors.get("board"))
        new = self.inbox.accept(deliveries, cursors)
        for d in deliveries:
            w = self.workers.get(d.worker_id)
            if w is not None:
                w.wake.set()
        return new

    def cursors(self) -> dict[str, int]:
        return dict(self.inbox.cursors)

    def _record_deliveries(self, deliveries: list[Delivery], via: str) -> None:
        now = now_us()
        for d in deliveries:
            self.trace.write(
                DeliveryRow(
                    worker_id=d.worker_id,
                    event_id=d.event_id,
                    kind=d.kind,
                    priority=d.priority,
                    via=via,
                    enqueue_ts=d.enqueue_ts,
                    latency_ms=(now - d.enqueue_ts) / 1000,
                )
            )

    def status(self) -> dict[str, int]:
        ws = self.workers.values()
        return {
            "launched": sum(w.launched for w in ws),
            "in_turn": sum(w.in_turn for w in ws),
            "idle": sum(w.launched and not w.in_turn and not w.stopped for w in ws),
            "stopped": sum(w.stopped for w in ws),
            "crashed": sum(w.crashed for w in ws),
            "turns": sum(w.turn for w in ws),
            "took_turn": sum(w.turn > 0 for w in ws),
            "queued": sum(len(q) for q in self.inbox.queues.values()),
        }

    def agent_pids(self) -> dict[str, int | None]:
        return {w.id: (w.session.pid if w.session else None) for w in self.workers.values()}

    async def stop(self) -> None:
        self._stopping.set()
        for w in self.workers.values():
            w.wake.set()
            if w.session is not None and w.in_turn:
                await w.session.cancel()
        for w in self.workers.values():
            if w.task is not None:
                try:
                    await asyncio.wait_for(w.task, timeout=10)
                except (asyncio.TimeoutError, asyncio.CancelledError):
                    w.task.cancel()
                except Exception:
                    log.exception("worker %s loop failed", w.id)
            if w.session is not None:
                await w.session.close()
                self._lifecycle(w, "stopped")
        if self._clock_task:
            self._clock_task.cancel()
        if self._shared is not None:
            await self._shared.close()
        await self.tools.close()
        self.trace.close()

    # -- Infra (called by the MCP tool server) ----------------------------------------
    def check_token(self, worker: str, token: str) -> bool:
        w = self.workers.get(worker)
        return w is not None and secrets.compare_digest(w.token, token)

    def pending_urgent(self, worker: str) -> str:
        taken = self.inbox.take(worker, urgent_only=True)
        self._record_deliveries(taken, "mid_turn")
        return render(taken, mid_turn=True)

    def record_tool_call(self, worker: str, tool: str, duration_ms: float, ok: bool, error: str | None) -> None:
        w = self.workers[worker]
        self.trace.write(
            ToolCallRow(worker_id=worker, tool=tool, source="mcp", duration_ms=duration_ms, ok=ok, error=error,
                        turn=w.turn)
        )

    async def _call(self, coro):
        """Turn service refusals into messages the model can act on."""
        try:
            return await coro
        except AGENT_REFUSALS as exc:
            raise ToolFailure(_plain(exc)) from None

    async def board_write(self, worker: str, type: str, text: str, detail: str | None) -> BoardEntry:
        entry = await self._call(
            self.services.board.awrite(BoardEntryIn(type=type, text=text, detail=detail, worker_id=worker))
        )
        self.workers[worker].board_writes += 1
        return entry

    async def board_read(self, worker: str, limit: int) -> list[BoardEntry]:
        return await self._call(self.services.board.arecent(max(1, min(limit, 2000))))

    async def board_unfold(self, worker: str, seq: int) -> BoardEntry:
        return await self._call(self.services.board.aunfold(seq))

    async def board_grep(self, worker: str, pattern: str, regex: bool, limit: int) -> list[BoardEntry]:
        return await self._call(self.services.board.agrep(pattern, regex=regex, limit=limit))

    async def send_dm(self, worker: str, to: str, text: str) -> ChatMessage:
        return await self._call(self.services.chat.dm(worker, to, text))

    async def channel_post(self, worker: str, text: str) -> ChatMessage:
        return await self._call(self.services.chat.post(worker, text))

    async def read_messages(self, worker: str, limit: int) -> list[ChatMessage]:
        return await self._call(self.services.chat.history(worker, limit))

    async def pr_create(self, worker: str, head: str, title: str, body: str) -> PullRequest:
        return await self._call(self.services.forge.pr_create(worker, head, title, body))

    async def pr_list(self, worker: str, state: str) -> list[PullRequest]:
        if state not in ("open", "merged", "closed", "all"):
            raise ToolFailure(f"state must be open, merged, closed or all, not {state!r}")
        return await self._call(self.services.forge.pr_list(state))

    async def pr_view(self, worker: str, number: int) -> PullRequest:
        return await self._call(self.services.forge.pr_view(number, True))

    async def pr_review(self, worker: str, number: int, verdict: str, body: str) -> PullRequest:
        if verdict not in ("approve", "comment", "request_changes"):
            raise ToolFailure(f"verdict must be approve, comment or request_changes, not {verdict!r}")
        return await self._call(self.services.forge.pr_review(number, worker, verdict, body))

    async def pr_comment(self, worker: str, number: int, body: str) -> PullRequest:
        return await self._call(self.services.forge.pr_comment(number, worker, body))

    async def pr_merge(self, worker: str, number: int) -> PullRequest:
        return await self._call(self.services.forge.pr_merge(number, worker))

    async def issue_view(self, worker: str, number: int) -> str:
        issue = await self._call(self.services.forge.issue_view(number))
        return f"Issue #{issue.number} [{issue.state}] {issue.title}\n\n{issue.body}"


def _plain(exc: BaseException) -> str:
    """The message of an exception that may have crossed a Ray boundary."""
    cause = getattr(exc, "cause", None)
    if cause is not None:
        return str(cause)
    text = str(exc)
    return text.splitlines()[-1] if "Traceback" in text else text
