"""The run driver: creates the actors, paces the launch, prints progress, scores main, and writes the
summary. It decides nothing about the work: the workers organise themselves through the board, the
chat and the forge."""

from __future__ import annotations

import logging
import os
import secrets
import signal
import sys
import time
from collections import Counter
from datetime import datetime, timezone

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from agensh_ray.actors.supervise import Watch, call
from agensh_ray.board import BoardLimits
from agensh_ray.config import RunConfig, worker_ids
from agensh_ray.driver.clock import Clock
from agensh_ray.driver.ending import SCORE_WITHIN_S, STOP_WITHIN_S, Ending
from agensh_ray.driver.health import Health
from agensh_ray.driver.resume import Resume
from agensh_ray.driver.shipping import Shipping
from agensh_ray.driver.slots import Slots
from agensh_ray.driver.summary import Summary
from agensh_ray.driver.waiting import Waiting
from agensh_ray.errors import ForcedStop, HarnessError
from agensh_ray.lag import HostLives
from agensh_ray.paths import PROJECT_ROOT
from agensh_ray.placement import (check_capacity, check_services_resource, host_options, launch_offsets,
                                  services_resources)
from agensh_ray.stopping import DoneRule, Interrupts
from agensh_ray.task import Task
from agensh_ray.task.checkpoint import Checkpoints
from agensh_ray.task.reference import REFERENCE_DIR, ignore_references
from agensh_ray.trace import TraceWriter, write_schema_files

log = logging.getLogger("agensh.run")


SHIP_EXCLUDES = [".git", ".venv", "runs", "node_modules", ".ci/node", "**/__pycache__", "*.egg-info"]


class Run(Health, Ending, Summary, Shipping, Resume, Slots, Waiting, Clock):
    def __init__(self, cfg: RunConfig, task: Task, out=sys.stdout, verbose: bool = False):
        self.cfg = cfg
        self.verbose = verbose
        self.task = task
        self.out = out
        self.run_id = cfg.run_id or datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        self.run_dir = self._locate()  # an object-store run: its local staging copy (driver/shipping.py)
        self.workers = worker_ids(cfg.workers)
        self.t0 = 0.0
        self._types: Counter = Counter()
        self._board_cursor = self._forge_cursor = 0
        self._prs_open = self._prs_merged = 0
        self._owns_ray = False
        self.gateways = None
        self.watch = Watch(cfg.liveness.heartbeat_s, cfg.liveness.hung_kill_s)
        """The run's actors' heartbeats: deaths, hangs (killed past the bound) and restarts, as lifecycle rows and
        on the progress line."""
        self._launched: set[str] = set()
        self._host_status: dict[str, dict] = {}
        self._host_lives = HostLives()
        """Each host's last answer (a host that is away counts with it)."""
        self._host_asks: dict[str, object] = {}
        self.prior = None
        """Resuming (`--resume`): the previous driver's state (driver/resume.py)."""

    def say(self, text: str) -> None:
        self._said_at = time.time()
        elapsed = self._said_at - self.t0 if self.t0 else 0.0
        print(f"[{elapsed:6.1f}s] {text}", file=self.out, flush=True)

    # -- bootstrap -------------------------------------------------------------------
    def _init_ray(self) -> None:
        if ray.is_initialized():
            return
        # Actor logs stay in Ray's session log folder unless --verbose: the driver prints progress lines.
        kwargs = dict(include_dashboard=False, log_to_driver=self.verbose, logging_level=logging.WARNING)
        # Ray 2.52+ turns token authentication on for a local cluster it starts (the token in ~/.ray/auth_token)
        # and warns about it on every start; nothing for the user to do here (the README says so).
        logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)
        if self.cfg.address:
            # The project ships to every node through the runtime env (same code as this driver), unless
            # the nodes already have it here.
            runtime_env = {"working_dir": str(PROJECT_ROOT), "excludes": SHIP_EXCLUDES} if self.cfg.ship_code else {}
            ray.init(address=self.cfg.address, namespace="agensh", runtime_env=runtime_env, **kwargs)
        else:
            ray.init(address="local", num_cpus=max(2, os.cpu_count() or 2), namespace="agensh", **kwargs)
        self._owns_ray = True

    def _bootstrap(self) -> None:
        from agensh_ray.actors.board import get_or_create_board
        from agensh_ray.actors.services import make_services

        rd = str(self.run_dir)
        # The board, chat, forge and routers: on the nodes of the type --services-resource names (Ray restarts
        # them on another one when theirs is lost), else pinned to the driver's node (the head of a cluster);
        # Ray's default would place them on any node.
        res = services_resources(self.cfg)
        self.on_head = None if res else NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(),
                                                                       soft=False)
        self.placement = {"resources": res} if res else {"scheduling_strategy": self.on_head}
        starter = self.run_dir / "starter"
        if self.prior is not None:  # a new run built its starter and reference before Ray started (_execute)
            self.say("the board: " + ("still running, reattached" if self._board_alive() else
                                      "gone with the previous driver's Ray, started again from its log"))
        ignore_references(self.run_dir)
        write_schema_files(self.run_dir)  # every table queryable from the DuckDB CLI, even if never written
        self._doing("starting the board, chat and forge (Ray actors, each a new process) and the task's repository")
        self.board = get_or_create_board(
            f"board-{self.run_id}", str(self.run_dir / "board" / "board.jsonl"),
            limits=BoardLimits(claim_ttl_s=self.cfg.claim_ttl_s, claim_rule=self.cfg.claims,
                               claim_floor_wall_s=self.cfg.claim_floor_wall_s), time_scale=self.cfg.time_scale,
            run_dir=rd, run_id=self.run_id, **self.placement,
        )
        # by --forge/--chat name
        # The forge keeps only hashes of its tokens; it makes them from this key, which stays in memory
        # (and in the forge actor's arguments, so a restarted forge issues the same tokens).
        self.chat, self.forge = make_services(self.cfg, self.run_dir, self.run_id, forge_key=secrets.token_hex(32),
                                              **self.placement)
        ray.get(self.forge.init_repo.remote(str(starter), self.task.title, self.task.text()))
        ray.get([self.chat.add_user.remote(w) for w in self.workers])
        ray.get([self.forge.add_user.remote(w) for w in [*self.workers, "admin"]])
        self.clone_urls = dict(zip(self.workers, ray.get([self.forge.clone_url.remote(w) for w in self.workers])))
        self.driver_trace = TraceWriter(self.run_dir, "driver", self.run_id)
        if self.cfg.gateway.enabled:  # one per node, before the hosts that look theirs up by name
            from agensh_ray.actors.gateway import Gateways

            self._doing("starting the model gateway on each node")
            self.gateways = Gateways(self.cfg, self.run_dir, self.run_id, self.placement)
        self.checkpoints = Checkpoints(self.task, self.run_dir, self.driver_trace, self.cfg.time_scale,
                                       every_s=self.cfg.score_every_s)
        if self.prior is not None:
            self._resume_checkpoints()
        self.watch.add("board", lambda: self.board.actor.heartbeat.remote(), handle=self.board.actor)
        self.watch.add("chat", lambda: self.chat.heartbeat.remote(), handle=self.chat)
        self.watch.add("forge", lambda: self.forge.heartbeat.remote(), handle=self.forge)

    def _start_hosts(self) -> bool:
        """The WorkerActors (in the run's reserved slots) and the routers; False if interrupted while waiting
        for slots."""
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from agensh_ray.actors.router import RouterActor
        from agensh_ray.actors.worker import WorkerActor

        k = self.cfg.workers_per_actor
        groups = [self.workers[i : i + k] for i in range(0, len(self.workers), k)]
        total = self._slots
        self._doing(f"reserving {len(self.workers)} agent slots", announce=False)  # Slots says it when it waits
        if not self._reserve_slots([len(ws) for ws in groups]):
            return False
        cfg_json = self.cfg.model_dump_json()
        self.hosts: dict[str, tuple] = {}
        start_wall = time.time()
        self.start_wall = start_wall
        self.hosts_wall = start_wall  # this driver's hosts count from here (their lag counters: driver/clock.py)
        for i, ws in enumerate(groups):
            hid = f"h{i:03d}"
            opts = host_options(self.cfg, len(ws), total)
            if self.slot_group is not None:  # its bundle: Ray places it again there if the node is lost
                opts["scheduling_strategy"] = PlacementGroupSchedulingStrategy(self.slot_group, i)
            handle = WorkerActor.options(name=f"host-{self.run_id}-{hid}", **opts).remote(
                hid, ws, cfg_json, str(self.run_dir), self.run_id, f"board-{self.run_id}", f"chat-{self.run_id}",
                f"forge-{self.run_id}",
                {w: self.clone_urls[w] for w in ws}, start_wall, str(self.task.root or ""),
            )
            self.hosts[hid] = (handle, ws)
        starts = [h.start.remote() for h, _ in self.hosts.values()]
        self._doing(f"starting {len(starts)} WorkerActors (each a new process; its workers' clones made)",
                    lambda: f"{len(ray.wait(starts, num_returns=len(starts), timeout=0)[0])}/{len(starts)} up")
        ray.get(starts)
        if self.prior is not None:  # delivery starts at the sources' heads: what came before is in the hand-offs
            heads = self._heads()
            ray.get([h.seed_cursors.remote(heads) for h, _ in self.hosts.values()])
        for (hid, (h, _)), where in zip(self.hosts.items(), ray.get([h.where.remote() for h, _ in self.hosts.values()])):
            self.watch.add(f"host {hid}", lambda h=h: h.heartbeat.remote(), where, handle=h)
        # The baseline has no routers: nothing to route to a lone agent (its host queues its own prompts).
        n = 0 if self.cfg.baseline else max(1, min(self.cfg.routing.routers, len(self.hosts)))
        slices: list[dict] = [{} for _ in range(n)]
        for i, (hid, (_, ws)) in enumerate(self.hosts.items() if n else ()):
            slices[i % n][hid] = (f"host-{self.run_id}-{hid}", ws)
        self.routers = [
            RouterActor.options(name=f"router-{self.run_id}-{i}", **self.placement).remote(
                f"r{i}", s, f"board-{self.run_id}", f"chat-{self.run_id}", f"forge-{self.run_id}",
                self.cfg.routing.policy, self.cfg.routing.poll_timeout_s,
                linger_s=self.cfg.routing.linger_s, ship_interval_s=self.cfg.routing.ship_interval_s,
            )
            for i, s in enumerate(slices)
        ]
        self._doing(f"starting {len(self.routers)} RouterActors")
        ray.get([r.ensure_started.remote() for r in self.routers])
        for i, (r, where) in enumerate(zip(self.routers, ray.get([r.where.remote() for r in self.routers]))):
            self.watch.add(f"router r{i}", lambda r=r: r.heartbeat.remote(), where, handle=r)
        self.host_of = {w: h for h, (_, ws) in self.hosts.items() for w in ws}
        # The schedule (launch offsets, wind-down, deadline) starts now that the hosts and routers are
        # up: their start-up on a loaded machine (each a new process; tens of seconds at load 15) must
        # not eat into the run, or a short run's deadline passes before its first turn ends.
        # A resumed run keeps its schedule: the time its driver was down is run time.
        self.start_wall = self.prior.start_wall if self.prior is not None else time.time()
        self.checkpoints.start_wall = self.start_wall
        ray.get([h.set_start.remote(self.start_wall) for h, _ in self.hosts.values()])
        self._save_state()
        return True

    # -- running ---------------------------------------------------------------------
    def _score(self, checkpoint: str) -> None:
        """Score main by ProgramBench's rules (agensh_ray/task/checkpoint.py): periodic ones in the
        background (on their grid, late while one runs, missed and recorded when the next one's time or the
        deadline comes first), the final
        one here (after a running one on main's commit, which it cancels if main moved on); main unchanged
        since the last one repeats its result."""
        try:  # no checkpoint failure ends the run: it is recorded (checkpoints.failure) and the run goes on
            url = self.forge_url()
        except Exception as exc:
            self.checkpoints.failure(checkpoint, exc)
            if checkpoint == "final":
                self._final_score = self.checkpoints.fallback()
            return
        if checkpoint == "final":
            self._final_score = self.checkpoints.final(url)
        else:
            self.checkpoints.periodic(url, deadline_wall=self.start_wall + self.cfg.deadline_wall_s)

    def forge_url(self) -> str:
        """main's clone URL for the checkpoints (the admin's)."""
        return call("forge", lambda: self.forge.clone_url.remote("admin"), deadline_s=self.cfg.liveness.hung_kill_s)

    @property
    def last_score(self) -> float | None:
        last = getattr(self, "checkpoints", None) and self.checkpoints.last
        return last.score if last else None

    def _loop(self) -> str:
        """Launch, show progress, score; return why the run ended: "deadline", "done", "budget" (the
        gateway's run cap) or "interrupted" (SIGINT/SIGTERM)."""
        cfg = self.cfg
        offsets = [cfg.wall(s) for s in launch_offsets(cfg, len(self.workers))]
        t_start = self.start_wall
        deadline = t_start + cfg.deadline_wall_s
        next_launch = 0
        next_progress = 0.0
        done = DoneRule(len(self.workers), cfg.wall(cfg.routing.idle_nudge_s))
        while True:
            if self.interrupts.requested:
                self.say(f"{self.interrupts.name}: stopping the run")
                return "interrupted"
            now = time.time()
            while next_launch < len(self.workers) and now - t_start >= offsets[next_launch]:
                w = self.workers[next_launch]
                self.hosts[self.host_of[w]][0].launch.remote(w)
                self._launched.add(w)
                next_launch += 1
            if now >= next_progress:
                for r in self.routers:  # a restarted router resumes here
                    r.ensure_started.remote()
                self._supervise()
                st = self._status()
                self.say(self._progress(st) + self._clock_tick(st))  # driver/clock.py: machine-bound?
                self._turn_errors = st.get("turn_errors", 0)
                self._last_status = st
                next_progress = now + 5.0
                if self.gateways is not None and (why := self.gateways.signal()):
                    self.say(f"{why}: stopping as at the deadline")
                    return "budget"
                if cfg.baseline and next_launch == len(self.workers) and st.get("stopped", 0) >= len(self.workers):
                    # agensh_ray/worker/keep_going.py: the stop hook let the agent stop (idle turns), or it is
                    # gone (crashed for good, stopped at its budget cap): no agent is left either way
                    if st.get("settled", 0) >= len(self.workers):
                        self.say(f"the baseline agent stopped after {cfg.baseline_idle_turns} turns in a row "
                                 "without work: the run is done")
                        return "done"
                    self.say("the baseline agent is gone (crashed for good or stopped at its budget cap): "
                             "stopping as at the deadline")
                    return "deadline"
                if cfg.stop_when_done and not cfg.baseline and next_launch == len(self.workers):
                    # agensh_ray/stopping.py: every worker finished a turn, the task was worked on, no PR
                    # open, and a quiet period (idle-nudge cycles, observed turn lengths) with no new work.
                    worked = bool(self._board_total or self._prs_open or self._prs_merged
                                  or (self.last_score or 0) > 0)
                    activity = (self._board_total, self._forge_events, self._open_prs, self.watch.restarts)
                    if self.watch.away():  # a part is dead, hung or restarting: its workers' work does not show yet
                        done.quiet_since = None
                    elif done.check(now, st, activity, self._open_prs, worked):
                        self.say(f"{done.quiet_s:.0f} s passed with no new work after every worker finished a "
                                 "turn: the organization is done")
                        return "done"
            if self.checkpoints.due(now):  # on its grid; one due while another runs starts when that one ends
                self._score("periodic")
            if now >= deadline:
                self.say("deadline reached")
                return "deadline"
            time.sleep(0.2)

    # -- the whole run ---------------------------------------------------------------
    def execute(self) -> dict | None:
        self.interrupts = Interrupts(self.say)
        self.interrupts.install()
        try:
            return self._execute()
        finally:
            self.interrupts.restore()

    def _execute(self) -> dict | None:
        self._prepare_folder()
        self.t0 = time.time()
        self._load_state()  # resuming: the first driver's clock
        self.say(
            f"run {self.run_id}: {len(self.workers)} workers, harness {self.cfg.harness}, task {self.task.name}, "
            f"{self.cfg.minutes:g} schedule minutes at time scale {self.cfg.time_scale:g} -> {self.where}"
        )
        if self.prior is not None:
            left = self.prior.start_wall + self.cfg.deadline_wall_s - time.time()
            self.say(f"resuming: the previous driver (pid {self.prior.pid} on {self.prior.hostname}) is gone; the "
                     f"schedule goes on from its start, " + (f"{left:.0f} s to the deadline" if left > 0 else
                                                             "its deadline has passed: scoring main as it stands"))
            budget = self.cfg.gateway.budget
            if self.cfg.gateway.enabled and any(v is not None for v in (budget.worker_usd, budget.worker_tokens,
                                                                        budget.run_usd, budget.run_tokens)):
                self.say("note: the gateway's budgets count from this resume; what was spent before it (the "
                         "llm_calls table) is not counted against them")
        else:
            (self.run_dir / "config.json").write_text(self.cfg.model_dump_json(indent=2))
        from agensh_ray.agent.harness import gateway_decision

        on, why = gateway_decision(self.cfg.harness, self.cfg.gateway.enabled)
        self.cfg = self.cfg.model_copy(update={"gateway": self.cfg.gateway.model_copy(update={"enabled": on})})
        self.say(f"model gateway: {why}")
        if on:
            from agensh_ray.services.gateway import unpriced_budget

            if problem := unpriced_budget(self.cfg):
                raise HarnessError(problem)
        if self.cfg.sandbox.enabled:
            from agensh_ray import bubblewrap

            self.say(f"sandbox: {bubblewrap.find().describe()}")
        else:
            self.say("sandbox: off (--no-sandbox): the agents run as this user, unconfined")
        if self.prior is None:
            (self.run_dir / "config.json").write_text(self.cfg.model_dump_json(indent=2))
        self._heartbeat(True)
        if self.prior is None:  # a resumed run has them, and its forge its repo
            # Before Ray starts: a task this machine cannot build (no compiler, say) is refused with build.sh's
            # reason, in seconds. The execute-only reference is built once; each host copies it into its clones.
            self._doing(f"building the task's reference program ({self.task.name}) and the starter repository")
            try:
                self.task.materialize_starter(self.run_dir / "starter")
                self.task.build_reference(self.run_dir / REFERENCE_DIR / self.task.program)
            except BaseException:
                self._heartbeat(False)
                raise
        ended, summary = "interrupted", None
        try:
            self._doing(f"connecting to Ray at {self.cfg.address}" if self.cfg.address else
                        "starting Ray (a local cluster of one node on this machine)",
                        announce=not ray.is_initialized())  # else a test's (or a notebook's) Ray
            self._start_ray()
            if self.prior is not None:  # before the capacity check: the old driver's slots are freed with them
                self._clear_stale_actors()
            self._slots = ray.cluster_resources().get("agent_slot")
            nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
            check_capacity(self.cfg, self._slots, ray.available_resources().get("agent_slot"), nodes)
            check_services_resource(self.cfg, ray.cluster_resources())
            slots = f", {self._slots:.0f} agent slots" if self._slots is not None else ""
            self.say(f"ray ready ({nodes} node(s){slots}); bootstrapping board, chat, forge (issue #1 = the task)")
            self._bootstrap()
            if self.deadline_passed:  # no worker is started only to be stopped: main is scored as it stands
                ended = "deadline"
            elif not self.interrupts.requested and self._start_hosts():
                self.say(f"{len(self.hosts)} WorkerActors, {len(self.routers)} RouterActors up; launching workers")
                self._doing("")  # the progress line comes every 5 s
                ended = self._loop()
                self.checkpoints.end_grid()  # periodic ones due and not started: recorded missed
            # Workers first (their agents stop, their last pushes land), then routers, then the services.
            interrupted = ended == "interrupted"
            self.say("stopping workers" + (f" (at most {STOP_WITHIN_S:.0f} s)" if interrupted else ""))
            self._doing("stopping the workers (their agents stop, their last pushes land)", announce=False)
            self._call_all([h.stop.remote() for h, _ in getattr(self, "hosts", {}).values()],
                           STOP_WITHIN_S if interrupted else 120, "stopping the workers")
            self._doing("stopping the routers", announce=False)
            self._call_all([r.stop.remote() for r in getattr(self, "routers", [])],
                           STOP_WITHIN_S if interrupted else 120, "stopping the routers")
            self._doing("scoring main one last time (the final checkpoint: the task's hidden tests in the sandbox)",
                        announce=not interrupted)  # interrupted: _final says it, with its bound
            self._final(SCORE_WITHIN_S if interrupted else None)
            self._doing("closing the board, chat and forge (their traces written)", announce=False)
            summary = {**self._summary(), "ended": ended}
        except ForcedStop as stop:
            self.say(f"{signal.Signals(stop.signum).name} again: forced stop (actors killed, no final score)")
            self._teardown(force=True)
            self._write_partial_summary("interrupted")
            self._ship_final(None, within=10.0)  # forced: a short try; the rest stays in the staging copy
            self._ship_summary()
            return None
        except BaseException:
            self._teardown()
            raise
        self._teardown()
        self._count_from_trace(summary)  # every trace writer closed now
        if self.interrupts.requested:
            summary["signal"] = self.interrupts.name
        self._ship_final(summary)
        self._print_summary(summary)
        self._ship_summary()
        return summary

    def _teardown(self, force: bool = False) -> None:
        """Stop the services (closing them: their traces flushed) and kill every actor. Forced (a second
        signal, before or meanwhile): the actors are killed without closing, then Ray shut down."""
        if getattr(self, "checkpoints", None) is not None:
            self.checkpoints.abandon()  # one still running (an interrupted run's) loses its forge now
        if not force:
            try:
                self._close_services()
            except ForcedStop:
                self.say("forced stop: killing the actors without closing them")
                force = True
        if force:
            self._kill_all()
        self._release_slots()  # after the hosts are gone: the next run (an experiment's cell) may take them
        if getattr(self, "driver_trace", None) is not None:
            self.driver_trace.close()
        if self._owns_ray:
            ray.shutdown()
        self._heartbeat(False)

    def _close_services(self) -> None:
        if self.gateways is not None:
            self.gateways.stop()
        for r in getattr(self, "routers", []):
            ray.kill(r, no_restart=True)
        for name in ("chat", "forge"):
            actor = getattr(self, name, None)
            if actor is not None:
                try:
                    ray.get(actor.close.remote(), timeout=30)
                except Exception:
                    log.exception("closing %s failed", name)
                ray.kill(actor, no_restart=True)
        for h, _ in getattr(self, "hosts", {}).values():
            ray.kill(h, no_restart=True)
        if getattr(self, "board", None) is not None:
            try:
                ray.get(self.board.actor.close.remote(), timeout=30)
            except Exception:
                log.exception("closing the board trace failed")
            self.board.kill()
