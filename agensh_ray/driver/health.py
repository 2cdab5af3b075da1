"""What the driver knows of the run's health, for `Run` (mixed in): the hosts' counters (a host that is
away counts with its last answer; one Ray restarted is started again and its workers launched anew),
the deaths and comebacks of every actor (`actors/supervise.py`'s Watch) as lifecycle rows, and the
progress line that shows it all. Expects `Run`'s attributes (hosts, board, forge, watch, ...).
"""

from __future__ import annotations

import logging
import time
from collections import Counter

import ray

from agensh_ray.actors.supervise import ActorAway, call
from agensh_ray.trace import LifecycleRow

log = logging.getLogger("agensh.run")


def reported_cost(st: dict) -> float | None:
    """The run's cost as its agents reported it, from the hosts' counters; None (unknown) unless every finished
    turn reported its usage (Claude Code and Codex report none: a sum of what others said would read as the
    whole cost) and a cost came with the tokens (Copilot CLI reports tokens only)."""
    if not st.get("turns_finished") or st.get("usage_turns", 0) < st.get("turns_finished", 0):
        return None
    cost = float(st.get("reported_cost_usd", 0.0))
    return None if cost == 0 and st.get("reported_tokens") else cost  # tokens but no price (Copilot CLI)


def gateway_cost_text(g: dict) -> str:
    """The gateway's dollars as the progress line shows them: "$X" when every answered call was priced, "cost
    unknown" when none was, "$X + unknown (N calls unpriced)" in between (a model with no price, or a provider
    that reported no usage: those calls cost something we cannot tell)."""
    unknown = int(g.get("cost_unknown", 0))
    usd = float(g.get("usd", 0.0))
    if not unknown:
        return f"${usd:.2f}"
    if usd == 0:
        return f"cost unknown ({unknown} calls unpriced)"
    return f"${usd:.2f} + unknown ({unknown} calls unpriced)"


def gateway_cost_summary(g: dict) -> dict:
    """summary.json's cost fields from the gateway's counters: `model_cost_usd` is null unless every answered call
    was priced; `model_cost_usd_known` is the part that was, `model_calls_cost_unknown` how many were not."""
    unknown = int(g.get("cost_unknown", 0))
    usd = round(float(g.get("usd", 0.0)), 6)
    return {"model_cost_usd": None if unknown else usd, "model_cost_usd_known": usd,
            "model_calls_cost_unknown": unknown}


def score_text(last) -> str:
    """The progress line's score: the last checkpoint's official score; when main ships files that change the
    test runner and its strict score differs (or is unknown), that too, and which files."""
    if last is None:
        return "-"
    text = f"{last.score:.0%}"
    files = getattr(last, "runner_files", None) or []
    if files and last.strict_score != last.score:
        strict = "unknown" if last.strict_score is None else f"{last.strict_score:.0%}"
        shown = ", ".join(files[:3]) + (f" +{len(files) - 3} more" if len(files) > 3 else "")
        text += f" (strict {strict} without the test-runner files main ships: {shown})"
    return text


QUEUED_AFTER_S = 30.0
"""A host away longer than this, with fewer agent slots free than it needs, is said to be queued."""


def queued_note(away_hosts: dict[str, int], free_slots: float) -> str:
    """" (queued: ...)" when the away hosts (host id -> workers) need more agent slots than are free: Ray starts
    them when a node with room joins (or one frees up); "" when they fit (they are just being restarted)."""
    need = sum(away_hosts.values())
    if need <= free_slots:
        return ""
    return (f" (queued: {len(away_hosts)} host(s) need {need} agent slots, {free_slots:g} free; they start "
            "again when a node with room joins)")


class Health:
    def _status(self) -> dict:
        """The hosts' counters summed. Never blocks on a host that is away (its last answer counts) and
        starts again any host Ray has restarted (its `started` is 0)."""
        for hid, (h, _) in self.hosts.items():
            if hid not in self._host_asks:
                self._host_asks[hid] = h.status.remote()
        asks = {ref: hid for hid, ref in self._host_asks.items()}
        ready, _ = ray.wait(list(asks), num_returns=len(asks), timeout=2.0)
        for ref in ready:
            hid = asks[ref]
            del self._host_asks[hid]
            try:
                answer = ray.get(ref)
            except Exception as exc:  # away: the watch reports it; the last answer counts meanwhile
                log.info("status of host %s: %s", hid, type(exc).__name__)
                continue
            if not answer.pop("started", 1):
                self._restart_host(hid)
            pid = answer.pop("pid", None)
            self._host_status[hid] = self._host_lives.add(hid, answer, pid)  # lag counters over the host's lives
        st = Counter()
        for s in self._host_status.values():
            st.update(s)
        return dict(st)

    def _restart_host(self, hid: str) -> None:
        """A host Ray restarted: start it, give it the schedule, launch again the workers it had."""
        h, ws = self.hosts[hid]
        again = [w for w in ws if w in self._launched]
        try:
            call(f"host {hid}", h.start.remote, deadline_s=60)
            call(f"host {hid}", lambda: h.set_start.remote(self.start_wall), deadline_s=30)
            where = call(f"host {hid}", h.where.remote, deadline_s=30)
        except ActorAway as exc:
            self.say(f"host {hid} could not be started again: {exc}")
            return
        for w in again:
            h.launch.remote(w, True)
        node = where.get("node", "")
        self._lifecycle(f"host {hid}", "resumed", where.get("pid"),
                        f"started again on node {node[:12]}; launched again: {', '.join(again) or 'none'}", node)
        self.say(f"host {hid} was restarted on node {node[:12]}: {len(again)} worker(s) resume with a hand-off summary")

    def _lifecycle(self, actor: str, event: str, pid: int | None, detail: str, node: str = "") -> None:
        """A placement, death or restart of one of the run's actors, as a lifecycle row (worker_id null, host = the
        actor, node = its Ray node)."""
        self.driver_trace.write(LifecycleRow(event=f"actor_{event}", detail=detail, host=actor, pid=pid, node=node))

    def _supervise(self) -> None:
        """Record the actors that died or came back since the last tick."""
        for ch in self.watch.poll(wait_s=1.0):
            self._lifecycle(ch.actor, ch.event, ch.pid, ch.detail, ch.node)
            if ch.event in ("died", "hung", "killed", "kill_failed", "restarted", "lost"):
                self.say(f"{ch.actor} {ch.event}" + (f" (pid {ch.pid})" if ch.pid else "") + f": {ch.detail}")

    def _progress(self, st: dict) -> str:
        """One progress line; reads the board and forge incrementally by cursor."""
        hung = self.watch.hung()  # not asked while hung: counted once it answers again (or is back)
        try:
            if "board" in hung:
                raise ActorAway("the board is hung")
            board = call("board", lambda: self.board.actor.since_rows.remote(self._board_cursor, 100_000), 10, 5)
        except ActorAway:
            board = []  # away: counted at the next tick
        for e in board:
            self._types[e.type] += 1
            self._board_cursor = e.seq
        try:
            if "forge" in hung:
                raise ActorAway("the forge is hung")
            forge = call("forge", lambda: self.forge.events_since.remote(self._forge_cursor, 100_000), 10, 5)
        except ActorAway:
            forge = []
        for ev in forge:
            self._forge_cursor = ev.seq
            if ev.kind == "pr_opened":
                self._prs_open += 1
            elif ev.kind in ("pr_merged", "pr_closed"):
                self._prs_open -= 1
                self._prs_merged += ev.kind == "pr_merged"
        board = ", ".join(f"{t} {n}" for t, n in sorted(self._types.items()))
        away = self.watch.away()
        actors = (f" | {self.watch.restarts} actors restarted" if self.watch.restarts else "") + (
            f" | away: {', '.join(away)}{self._queued(away)}{self._hung_note()}" if away else "")
        score = score_text(getattr(self, "checkpoints", None) and self.checkpoints.last) + (
            self.checkpoints.note() if getattr(self, "checkpoints", None) else "")
        self._open_prs = self._prs_open
        self._board_total = sum(self._types.values())
        self._forge_events = self._forge_cursor
        model = ""
        if self.gateways is not None:
            g = self.gateways.status()
            model = (f" | model {g.get('calls', 0)} calls, {g.get('retries', 0)} retried, "
                     f"{g.get('gave_up', 0) + g.get('cut', 0) + g.get('error', 0)} failed, {gateway_cost_text(g)}")
        elif self.cfg.harness != "sim" and st.get("turns_finished"):
            cost = reported_cost(st)
            model = " | cost " + ("unknown (the agents report no cost)" if cost is None else f"${cost:.2f}")
        return (
            f"workers {st.get('launched', 0)}/{len(self.workers)} up, {st.get('in_turn', 0)} in a turn, "
            f"{st.get('idle', 0)} idle, {st.get('crashed', 0)} crashed, {st.get('turn_errors', 0)} turn errors, "
            f"{st.get('model_errors', 0)} model errors"
            + (f", {st['budget_stopped']} stopped at budget" if st.get("budget_stopped") else "")
            + (f", {st.get('writes_waited', 0)} writes slowed and {st['writes_refused']} refused by the write rates"
               if st.get("writes_refused") or st.get("writes_waited") else "")
            + f" | board {self._board_total} ({board or 'empty'}) | "
            f"PRs {self._prs_merged} merged, {self._prs_open} open | score {score}{model}{actors}"
        )

    def _hung_note(self) -> str:
        """" (hung: forge 12s, ...)": the away actors that are alive but silent, and for how long."""
        hung = self.watch.hung()
        return f" (hung: {', '.join(f'{n} {s:.0f}s' for n, s in sorted(hung.items()))})" if hung else ""

    def _queued(self, away: list[str]) -> str:
        """What the progress line adds when hosts are away for want of room (their node lost, the rest full)."""
        now = time.monotonic()  # a host away this long is waiting for room, not still starting
        hosts = [a.split(" ", 1)[1] for a in away if a.startswith("host ") and a.split(" ", 1)[1] in self.hosts
                 and now - self.watch.actors[a].since > QUEUED_AFTER_S]
        if not hosts or self._slots is None:
            return ""
        try:
            free = ray.available_resources().get("agent_slot", 0.0)
        except Exception:  # the GCS is away too: said next tick
            return ""
        return queued_note({h: len(self.hosts[h][1]) for h in hosts}, free)

    def _model_summary(self) -> dict:
        """What the model gateway counted; without one, what the agents reported: their cost is unknown (None)
        unless every turn reported its usage (nothing for the sim)."""
        if self.gateways is None:
            if self.cfg.harness == "sim":
                return {}
            st = getattr(self, "_last_status", {})
            cost = reported_cost(st)
            return {"model_tokens_reported": st.get("reported_tokens", 0),
                    "model_cost_usd": None if cost is None else round(cost, 6),
                    "turns_without_usage": st.get("turns_finished", 0) - st.get("usage_turns", 0)}
        g = self.gateways.status()
        return {"model_calls": g.get("calls", 0), "model_retries": g.get("retries", 0),
                "model_tokens": g.get("tokens", 0), **gateway_cost_summary(g)}
