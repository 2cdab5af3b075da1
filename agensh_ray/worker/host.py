"""The worker host: the logic of a WorkerActor, as a plain class.

A host runs K workers (1 in production; up to 64 to simulate scale on a small
machine). Per host: one MCP tool server and its backend (backend.py), one
inbox (the workers' queues and the per-source cursors that make delivery
exactly-once under router replays), one trace writer, the clones of its
workers (workdir.py), and one clock loop that asks each worker's `TurnClock`
which of the host's own prompts are due (idle nudge, wind-down notices) and
queues them. Per worker: its sealed HOME and clone, its agent session and the
loop that takes its turns (turns.py).

With the `sim` harness and several workers, one sim process serves all of the
host's ACP sessions (agent/mux.py); every real CLI gets a process per worker.

Each agent process runs in its own sandbox (agent/sandbox.py) unless the run
turns it off: its workdir and HOME writable, the toolchain read-only, its
forge, MCP tools and model reachable. The shared sim process gets one sandbox
with all its host's workdirs and HOMEs (the host's workers can see each
other's clones there; simulation only).

Each sandbox has its resource limits (agent/limits.py, `SandboxConfig.limits`):
a cgroup per agent process, a bounded /tmp, and the host's limits loop, which
every second reads what the kernel enforced in each group (a process killed
at the memory limit, forks refused at the process limit) and measures each
worker's workdir and HOME when due; each limit reached is a `limit_reached`
lifecycle row and a message to the agent, and at the disk limit the agent's
turn is stopped.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from pathlib import Path
from typing import Any

from agensh_ray import prompts
from agensh_ray.agent import sandbox
from agensh_ray.agent.handoff import handoff_summary
from agensh_ray.agent.harness import Harness, get_harness
from agensh_ray.agent.limits import DiskWatch, ProcessLimits
from agensh_ray.agent.mux import MuxSession, SharedAgent
from agensh_ray.agent.session import ProcessSession
from agensh_ray.config import RunConfig
from agensh_ray.errors import HarnessError
from agensh_ray.lag import CpuWait, ToolLag
from agensh_ray.models import BoardEntryIn, Delivery, GatewayEndpoint, now_us
from agensh_ray.routing import HIGH, HostInbox, TurnClock
from agensh_ray.seams import AgentSession
from agensh_ray.stopping import turn_buckets
from agensh_ray.tools import ToolServer
from agensh_ray.trace import DeliveryRow, LifecycleRow, TraceWriter
from agensh_ray.worker.backend import ToolsBackend
from agensh_ray.worker.turns import TraceObserver, Worker
from agensh_ray.worker.workdir import Workdirs, agent_env, sandbox_policy

log = logging.getLogger(__name__)

CLOCK_MAX_SLEEP_S = 1.0
"""The clock loop looks at least this often (wall seconds), e.g. for workers launched since."""
LIMITS_POLL_S = 1.0
"""How often the limits loop reads what the kernel enforced in the agents' cgroups (wall seconds)."""


class WorkerHost:
    """Hosts workers. `services` gives async access to the shared services (`agensh_ray.seams.Services`)."""

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
        self.run_id = run_id
        self.node = ""
        """The Ray node it runs on (set by its actor; the lifecycle rows carry it)."""
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.services = services
        self.clone_urls = clone_urls
        self.start_wall = start_wall
        """When the run's schedule started (wall clock); the driver moves it once every host and router is up."""
        self.task_root = task_root
        self.harness: Harness = get_harness(cfg.harness)
        try:
            self.model: str | None = cfg.model or self.harness.choose_model(None)
            """The model its agents use (in the `turns` trace); the driver resolved it (RunConfig.model)."""
        except HarnessError:  # an unreadable secrets file: the agents' start says so
            self.model = None
        self.trace = TraceWriter(self.run_dir, f"host-{host_id}", run_id)
        self.inbox = HostInbox(worker_ids)
        self.workers: dict[str, Worker] = {}
        for w in worker_ids:
            base = self.run_dir / "workers" / w
            self.workers[w] = Worker(self, w, secrets.token_hex(8), base / "repo", base / "home")
        self.workdirs = Workdirs(self.run_dir, host_id, sandboxed=cfg.sandbox.enabled)
        self.backend = ToolsBackend(self)
        self.lag = ToolLag()
        """Its workers' MCP tool calls as the agents and the tool server timed them (agensh_ray/lag.py)."""
        self.cpu = CpuWait()
        """Its process tree's time on a CPU and waiting for one (agensh_ray/lag.py)."""
        self.tools = ToolServer(self.backend, without=cfg.tools_off)
        self.shared = self.harness.name == "sim" and len(worker_ids) > 1
        """Simulation packing: one sim process serves all of this host's workers (agent/mux.py)."""
        self._shared_agent: SharedAgent | None = None
        self.gateway = getattr(services, "gateway", None)
        """The node's model gateway (`agensh_ray.seams.GatewayAccess`), or None: agents reach their provider."""
        self.endpoints: dict[str, GatewayEndpoint] = {}
        self._network_noted = False
        self.stopping = asyncio.Event()
        self._clock_event: asyncio.Event | None = None
        self._clock_task: asyncio.Task | None = None
        self._limits_task: asyncio.Task | None = None
        self.limits = cfg.sandbox.limits if cfg.sandbox.enabled else None
        """Each sandbox's resource limits (None: none)."""
        self.started = False
        """`start` ran (False in a host process that was restarted until the driver starts it again)."""

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        if self.gateway is not None and not self.shared:
            self.endpoints = await self.gateway.endpoint(list(self.workers))
        if self.cfg.sandbox.enabled:
            await asyncio.to_thread(sandbox.require)  # SandboxUnavailable says why, on this node
        await self.tools.start()
        self._clock_event = asyncio.Event()
        self._clock_task = asyncio.create_task(self._clock(), name=f"clock-{self.host_id}")
        if self.limits is not None:
            self._limits_task = asyncio.create_task(self._watch_limits(), name=f"limits-{self.host_id}")
        self.started = True

    def schedule_s(self) -> float:
        """Schedule seconds since the run started."""
        return (time.time() - self.start_wall) * self.cfg.time_scale

    async def launch(self, worker_id: str, again: bool = False) -> None:
        """Start a worker. One that ran before (`again`, or its clone is here: launched by a host process or a
        driver that died) goes on from its clone, if it survived, with a hand-off summary."""
        w = self.workers[worker_id]
        if w.launched:
            return
        w.launched = True
        w.clock = TurnClock.from_config(self.cfg.routing, self.cfg.minutes * 60, now_s=self.schedule_s(),
                                        board=self.cfg.board_tools)
        if self.limits is not None and self.limits.disk_mib and not self.shared:
            # not under simulation packing (the shared sim process is our own code, and already sees every
            # workdir of its host): 1,024 sim workers' walks would cost a core's tenth (0.7 ms each per 5 s)
            w.disk = DiskWatch(self.limits, [w.workdir, w.home])
        kept = self.workdirs.kept(w.workdir)
        resumed = again or kept
        # a kept clone is recovered first (a killed git's lock files would fail setting its remote)
        fixed = await asyncio.to_thread(self.workdirs.recover, w.id, w.workdir, w.home) if kept else ""
        await asyncio.to_thread(self.workdirs.prepare, w.id, w.workdir, w.home, self.clone_urls[w.id])
        if resumed:
            # What it claimed and had not finished is open again (its session, which knew, is gone).
            await self.release_claims(w, "its host or the run's driver died before the work was finished")
            clone = "clone kept" if kept else "its clone was not on this node: cloned anew (unpushed work lost)"
            self.lifecycle(w, "resumed", f"its host or the run's driver was restarted: {clone}"
                           + (f" ({fixed})" if fixed else "") + ", new session with hand-off summary")
            text = await handoff_summary(w.id, self.services)
            self.push(w, "handoff", text + (f"\n\nYour clone, left by your previous session: {fixed}." if fixed else ""),
                      "low")
        w.task = asyncio.create_task(w.run(), name=f"worker-{w.id}")
        self.clock_changed()

    async def open_session(self, w: Worker) -> AgentSession:
        """The worker's agent session, started: on a process of its own, or on the host's shared sim process."""
        observer = TraceObserver(self, w)
        url = self.tools.url(w.id, w.token)
        if self.shared:
            if self._shared_agent is None:
                home = self.run_dir / "workers" / f"_{self.host_id}" / "home"  # not the seed mirror beside it
                env = self.harness.environment(home=home,
                                               extra=agent_env(self.cfg, w.id, w.home, self.task_root, shared=True))
                writable = [home]
                for other in self.workers.values():
                    for d in (other.workdir, other.home):
                        d.mkdir(parents=True, exist_ok=True)  # cloned into later, through the same mount
                        writable.append(d)
                endpoints = {f"forge ({o})": self.clone_urls[o] for o in self.workers}
                policy = sandbox_policy(self.cfg, self.harness, env, writable=writable, chdir=home,
                                        endpoints={**endpoints, "tools": self.tools.url("any", "")},
                                        run_dir=self.run_dir, task_root=self.task_root, hostname=self.host_id)
                self._note_network(policy)
                limits = (ProcessLimits(self.limits, self.run_id, f"{self.host_id}-shared", scale=len(self.workers))
                          if self.limits is not None and policy is not None else None)
                self._shared_agent = SharedAgent(self.harness, env, home, self.run_dir / "logs",
                                                 f"{self.host_id}.shared-agent", sandbox=policy, limits=limits)
            session: AgentSession = MuxSession(self._shared_agent, w.id, w.workdir, url, observer)
        else:
            extra = agent_env(self.cfg, w.id, w.home, self.task_root)
            gateway = self.endpoints.get(w.id)
            env = self.harness.environment(home=w.home, extra=extra, gateway=gateway)
            policy = sandbox_policy(self.cfg, self.harness, env,
                                    writable=[w.workdir, w.home], chdir=w.workdir,
                                    endpoints={"forge": self.clone_urls[w.id], "tools": url},
                                    run_dir=self.run_dir, task_root=self.task_root, hostname=w.id)
            self._note_network(policy)
            limits = (ProcessLimits(self.limits, self.run_id, w.id)
                      if self.limits is not None and policy is not None else None)
            session = ProcessSession(self.harness, w.id, w.workdir, w.home, url, observer, extra_env=extra,
                                     log_dir=self.run_dir / "logs", gateway=gateway, sandbox=policy,
                                     model=self.model, limits=limits)
        if w.disk is not None:
            session.client.full = lambda: w.disk.over
        w.session = session
        await session.start()
        self.cpu.rescan()  # the new agent's processes count from their start, not from the next walk of /proc
        return session

    async def release_claims(self, w: Worker, why: str) -> None:
        """A FAIL "release ..." on the board, on the worker's behalf, for each CLAIM it made since its last
        PATCH_SUMMARY (claim rule `lease`: each claim it holds open): its peers may take that work."""
        try:
            board = self.services.board
            if self.cfg.claims == "lease":  # its open claims, from the board's index (exact at any board size)
                for c in await board.aclaims():
                    if c.worker == w.id:  # ("release <its text>" has its key: agensh_ray/board/leases.py)
                        subject = c.text[len("claim "):] if c.text.lower().startswith("claim ") else c.text
                        text = f"release {subject}"[:70] + f": {w.id} stopped"
                        await board.awrite(BoardEntryIn(worker_id=w.id, type="FAIL", text=text[:100], detail=why))
                return
            claims = [e for e in await board.agrep(".", regex=True, limit=500, type="CLAIM") if e.worker_id == w.id]
            done = [e.seq for e in await board.agrep(".", regex=True, limit=500, type="PATCH_SUMMARY")
                    if e.worker_id == w.id]
            for c in claims:
                if not done or c.seq > max(done):
                    subject = c.text[len("claim "):] if c.text.lower().startswith("claim ") else c.text
                    text = f"release {subject}"[:70] + f": {w.id} stopped"
                    await board.awrite(BoardEntryIn(worker_id=w.id, type="FAIL", text=text[:100], detail=why))
        except Exception as exc:  # the stop goes on: the lifecycle row says what could not be released
            log.warning("releasing the claims of %s failed: %s", w.id, exc)
            self.lifecycle(w, "release_failed", f"{type(exc).__name__}: {exc}")

    def _note_network(self, policy: sandbox.SandboxPolicy | None) -> None:
        """Say once per host when a sandbox shares the host's network, and why."""
        if policy is not None and policy.network == "shared" and not self._network_noted:
            self._network_noted = True
            log.warning("host %s: sandboxed agents keep the host's network: %s", self.host_id, policy.note)

    def lifecycle(self, w: Worker, event: str, detail: str = "") -> None:
        pid = w.session.pid if w.session else None
        self.trace.write(LifecycleRow(worker_id=w.id, event=event, detail=detail[:2000], host=self.host_id, pid=pid,
                                      node=self.node))

    # -- resource limits ---------------------------------------------------------------------
    async def _watch_limits(self) -> None:
        """What the kernel enforced in each agent's cgroup, and each worker's disk when due (agent/limits.py)."""
        while not self.stopping.is_set():
            try:
                await self.check_limits()
            except Exception:  # the next round looks again
                log.exception("host %s: checking the workers' limits failed", self.host_id)
            due = [w.disk.next_at for w in self.workers.values() if w.disk is not None and w.session is not None]
            pause = min(LIMITS_POLL_S, min(due, default=float("inf")) - time.monotonic())
            try:
                await asyncio.wait_for(self.stopping.wait(), max(0.05, pause))
            except TimeoutError:
                pass

    async def check_limits(self) -> None:
        seen: set[int] = set()
        for w in list(self.workers.values()):
            if w.stopped or w.session is None:
                continue
            process = w.session.process
            if process is not None and process.alive and id(process) not in seen:  # a dead one: `crashed` says
                seen.add(id(process))
                events = process.limit_events()
                # the shared sim process serves every worker of the host: each is told
                for other in (self.workers.values() if self.shared else [w]):
                    for what in events:
                        self.limit_reached(other, what)
            if w.disk is not None and w.disk.due(time.monotonic()):
                over = await asyncio.to_thread(w.disk.measure, time.monotonic())
                if over is not None:
                    await self.stop_for_disk(w, over)

    def limit_reached(self, w: Worker, what: str) -> None:
        """A `limit_reached` row, and the agent told (with its next tool result, or its next turn's prompt)."""
        self.lifecycle(w, "limit_reached", what)
        self.push(w, "limit", prompts.limit(what), HIGH)

    async def stop_for_disk(self, w: Worker, what: str) -> None:
        """The worker is at its disk limit: its turn stopped (ACP cancel), the commands it runs killed (not the
        shared sim process's: they may be another worker's), its fs/* writes refused while it stays over."""
        killed = 0
        session = w.session
        if session is not None:
            killed += session.client.kill_terminals()
            if not self.shared and session.process is not None:
                killed += session.process.kill_commands()
            if w.in_turn:
                await session.cancel()
        self.limit_reached(w, f"{what} (turn stopped, {killed} command(s) killed)" if w.in_turn or killed else what)

    # -- the host's own prompts ------------------------------------------------------------
    def push(self, w: Worker, kind: str, text: str, priority: str = "low") -> None:
        """Queue a prompt the host makes itself (nudge, share-findings, wind-down, hand-off) and wake the worker."""
        ts = now_us()
        self.inbox.push_local(Delivery(event_id=f"{kind}:{w.id}:{ts}", worker_id=w.id, priority=priority, kind=kind,
                                       text=text, enqueue_ts=ts))
        w.wake.set()

    def clock_changed(self) -> None:
        """A turn ended or a worker was launched: the clock loop looks again now."""
        if self._clock_event is not None:
            self._clock_event.set()

    async def _clock(self) -> None:
        """Queues what each worker's TurnClock says is due, then sleeps until the next thing is."""
        while not self.stopping.is_set():
            now = self.schedule_s()
            nxt = float("inf")
            for w in self.workers.values():
                if w.clock is None or w.stopped:
                    continue
                for due in w.clock.due(now):
                    if due.kind == "wind_down":
                        self.push(w, "wind_down", prompts.wind_down(due.minutes_left, due.last), HIGH)
                    else:
                        self.push(w, due.kind, prompts.nudge(), due.priority)
                nxt = min(nxt, w.clock.next_due_in(now))
            self._clock_event.clear()
            try:
                await asyncio.wait_for(self._clock_event.wait(),
                                       min(CLOCK_MAX_SLEEP_S, self.cfg.wall(nxt)) + 0.001)
            except TimeoutError:
                pass

    # -- router intake ---------------------------------------------------------------------
    def deliver(self, deliveries: list[Any], cursors: dict[str, int]) -> int:
        """A router's batch (routing Events, or Deliveries): queued once per worker; a replay is dropped."""
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

    def record_deliveries(self, deliveries: list[Any], via: str) -> None:
        now = now_us()
        for d in deliveries:
            self.trace.write(DeliveryRow(worker_id=d.worker_id, event_id=d.event_id, kind=d.kind, priority=d.priority,
                                         via=via, enqueue_ts=d.enqueue_ts, latency_ms=(now - d.enqueue_ts) / 1000))

    # -- what the driver asks -----------------------------------------------------------------
    def status(self) -> dict[str, int]:
        """Counts the driver adds up over hosts. `took_turn`: workers that started a turn; `finished_turn`:
        workers that finished one or will take none (stopped); `last_turn_le_<N>s`: workers whose last
        finished turn took at most N wall seconds (agensh_ray/stopping.py); `writes_waited` / `writes_refused`:
        writes its workers' write rates held up or refused (agensh_ray/worker/rates.py)."""
        ws = self.workers.values()
        return {
            "launched": sum(w.launched for w in ws),
            "in_turn": sum(w.in_turn for w in ws),
            "idle": sum(w.launched and not w.in_turn and not w.stopped for w in ws),
            "stopped": sum(w.stopped for w in ws),
            "crashed": sum(w.crashed for w in ws),
            "turn_errors": sum(w.turn_errors for w in ws),
            "model_errors": sum(w.model_errors for w in ws),
            "usage_turns": sum(w.usage_turns for w in ws),
            "turns_finished": sum(w.turns_finished for w in ws),
            "reported_tokens": sum(w.tokens for w in ws),
            "reported_cost_usd": sum(w.cost_usd for w in ws),
            "backing_off": sum(w.backing_off() for w in ws),
            "budget_stopped": sum(w.stop_reason is not None for w in ws),
            "settled": sum(w.settled is not None for w in ws),
            "turns": sum(w.turn for w in ws),
            "took_turn": sum(w.turn > 0 for w in ws),
            "finished_turn": sum(w.turns_finished > 0 or w.stopped for w in ws),
            **turn_buckets([w.last_turn_s for w in ws if w.turns_finished]),
            "queued": self.inbox.queued(),
            "writes_waited": self.backend.rates.waited,
            "writes_refused": self.backend.rates.refused,
            **self.lag.counts,  # the clock (agensh_ray/lag.py): tool latency histograms and CPU wait
            **self.cpu.counters(),
        }

    def agent_pids(self) -> dict[str, int | None]:
        """Each worker's agent CLI's own process (inside its sandbox, below bwrap and the relay; the host's shared
        sim process for a packed host), as this machine sees it; None if it has none running."""
        out: dict[str, int | None] = {}
        for w in self.workers.values():
            process = w.session.process if w.session else None
            out[w.id] = process.agent_pid() if process is not None and process.alive else None
        return out

    async def stop(self) -> None:
        self.stopping.set()
        for w in self.workers.values():
            w.wake.set()
            if w.session is not None and w.in_turn:
                await w.session.cancel()
        for w in self.workers.values():
            if w.task is not None:
                try:
                    await asyncio.wait_for(w.task, timeout=10)
                except (TimeoutError, asyncio.CancelledError):
                    w.task.cancel()
                except Exception:
                    log.exception("worker %s loop failed", w.id)
            if w.session is not None and not w.closed:
                await w.session.close()
                w.lifecycle("stopped")
        # No forge token left in a clone once its agent has stopped (a host killed outright leaves them: the
        # run folder is the operator's, like the forge's own state).
        forgets = [asyncio.to_thread(self.workdirs.forget_credentials, w.id, w.workdir, w.home, self.clone_urls[w.id])
                   for w in self.workers.values() if w.launched]
        for res in await asyncio.gather(*forgets, return_exceptions=True):
            if isinstance(res, Exception):
                log.warning("could not take a token out of a clone: %s", res)
        self.clock_changed()
        if self._clock_task:
            self._clock_task.cancel()
        if self._limits_task:
            self._limits_task.cancel()
        if self._shared_agent is not None:
            await self._shared_agent.close()
        await self.tools.close()
        self.trace.close()
