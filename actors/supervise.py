"""The driver's view of its actors: calls with a deadline, and who died and came back.

Every actor of a run may die at any moment; Ray restarts the ones declared restartable (board,
routers, chat, forge, workers) and runs their constructors again, which reload durable state. For
the driver that means: a call may fail while the actor is away (`ActorUnavailableError`), or wait
until it is back. `call` retries such a call until a deadline, then raises `ActorAway` naming the
actor; `Watch` asks each actor for its pid once per progress tick, without ever blocking the loop on
one that is away, and reports each death (seen as "away", or as a new pid) and each comeback once,
as `Change`s the driver writes as `lifecycle` rows. An actor that answers `where()` (its pid and Ray node)
is also reported where it was first placed and on which node it came back.

Liveness, not only death (agensh_ray/liveness.py): what the Watch asks is each actor's `heartbeat()`, served
by a concurrency group of its own (`LIVENESS`) so it is never queued behind long calls, and answered with the
stall of the actor's event loop (`LoopProbe`). An actor silent for `heartbeat_s` is reported hung (away, a
`hung` change with how long); silent for `hung_kill_s` it is killed (`ray.kill(no_restart=False)`: Ray kills
the process, a stopped one included, and restarts it as after a death) and comes back through the same path.
Only an actor Ray holds ALIVE is killed: one Ray is restarting (a slow constructor, a reload) is left alone.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.exceptions import ActorDiedError, ActorUnavailableError, GetTimeoutError, RayActorError

from agensh_ray.liveness import Liveness, LoopProbe

log = logging.getLogger("agensh.supervise")

AWAY = (ActorUnavailableError, GetTimeoutError)
"""What a call to an actor that is restarting (or slow) raises: try again later."""


class ActorAway(RuntimeError):
    """An actor did not answer within the deadline (or is dead for good)."""


LIVENESS = {"liveness": 1}
"""The concurrency group every actor serves its heartbeat in (`ray.remote(concurrency_groups=LIVENESS)`)."""


def whereabouts() -> dict:
    """The calling actor's pid and Ray node id (hex): what each actor's `where()` answers the driver's Watch."""
    return {"pid": os.getpid(), "node": ray.get_runtime_context().get_node_id()}


def heartbeat(probe: LoopProbe | None) -> dict:
    """An actor's heartbeat answer: its whereabouts and how long its event loop has not run (`probe`)."""
    return {**whereabouts(), "stall_s": probe.stall_s() if probe is not None else 0.0}


def actor_alive(actor: Any) -> bool:
    """Whether Ray's control store holds `actor` ALIVE (not restarting, not dead); True if it cannot tell."""
    try:
        from ray._private.state import actors as actor_table

        return actor_table(actor_id=actor._actor_id.hex()).get("State", "ALIVE") == "ALIVE"
    except Exception:  # an older or newer Ray without this table: the kill goes ahead
        return True


def call(what: str, make_ref: Callable[[], Any], deadline_s: float = 120.0, attempt_s: float = 15.0) -> Any:
    """`ray.get(make_ref())`, sent again while the actor is away (each attempt waits up to `attempt_s`),
    for at most `deadline_s`; then `ActorAway` naming `what`. Only for calls that are safe to repeat
    (reads, idempotent writes). An actor dead for good raises at once."""
    end = time.monotonic() + deadline_s
    last: Exception | None = None
    while True:
        left = end - time.monotonic()
        if left <= 0:
            break
        try:
            return ray.get(make_ref(), timeout=min(attempt_s, left))
        except ActorDiedError as exc:
            raise ActorAway(f"the {what} actor is dead and will not be restarted: {exc}") from exc
        except AWAY as exc:
            last = exc
            time.sleep(min(0.5, max(0.0, end - time.monotonic())))
    raise ActorAway(f"the {what} actor did not answer for {deadline_s:.0f}s (restarting, or its node is lost): "
                    f"{type(last).__name__ if last else 'no answer'}")


@dataclass
class Change:
    """One actor's death or comeback, as the driver reports and traces it."""

    actor: str
    event: str
    """placed (its first answer) | died | hung (no heartbeat within the bound) | killed (hung past the kill
    bound) | kill_failed | restarted | answering | lost (dead for good)."""
    pid: int | None
    detail: str = ""
    node: str = ""
    """The Ray node id it runs on (died, lost: the one it ran on), if it answers `where()`."""


@dataclass
class _Watched:
    name: str
    ask: Callable[[], Any]
    """Sends the pid request (an ObjectRef)."""
    pid: int | None = None
    node: str = ""
    away: bool = False
    lost: bool = False
    pending: Any = None
    since: float = field(default_factory=time.monotonic)
    announce: list = field(default_factory=list)
    """Changes to report at the next poll (its placement, when its first answer came with `add`)."""
    handle: Any = None
    """The actor (to kill it when it hangs); None: never killed."""
    live: Liveness | None = None
    gone: bool = False
    """Its death (or the kill that ends its hang) was reported: its comeback is `restarted` only."""


class Watch:
    """The pids of a run's actors, polled without blocking; `restarts` counts comebacks."""

    def __init__(self, heartbeat_s: float = 10.0, hung_kill_s: float = 60.0,
                 kill: Callable[[Any], None] | None = None) -> None:
        self.actors: dict[str, _Watched] = {}
        self.restarts = 0
        self.kills = 0
        self.heartbeat_s, self.hung_kill_s = heartbeat_s, hung_kill_s
        self.kill = kill or (lambda actor: ray.kill(actor, no_restart=False))

    def hung(self) -> dict[str, float]:
        """The actors reported hung and still silent: name -> seconds silent."""
        now = time.monotonic()
        return {n: w.live.silent_s(now) for n, w in self.actors.items() if w.live is not None and w.live.hung}

    def add(self, name: str, ask: Callable[[], Any], first: Any = None, handle: Any = None) -> None:
        """Watch `name`; `ask()` sends a call that answers the actor's pid, or its `where()` (pid and node).
        `first`: an answer already had (taken as the actor started), so a death before the first poll is
        reported as one (a new pid), not read as the actor's first placement."""
        w = self.actors[name] = _Watched(name, ask, handle=handle,
                                         live=Liveness(self.heartbeat_s, self.hung_kill_s))
        if first is not None:
            node = (first.get("node") or "") if isinstance(first, dict) else ""
            w.pid, w.node = (first.get("pid") if isinstance(first, dict) else first), node
            if node:
                w.announce.append(Change(name, "placed", w.pid, f"placed on node {node[:12]}", node))

    def away(self) -> list[str]:
        return sorted(n for n, w in self.actors.items() if w.away and not w.lost)

    def poll(self, wait_s: float = 1.0) -> list[Change]:
        """Ask every actor that has no question pending, wait up to `wait_s` for the answers, and
        return what changed since the last poll."""
        changes: list[Change] = []
        for w in self.actors.values():
            changes += w.announce
            w.announce = []
            if w.pending is None and not w.lost:
                try:
                    w.pending = w.ask()
                    w.live.asked(time.monotonic())
                except RayActorError as exc:
                    changes += self._failed(w, exc)
        pending = {w.pending: w for w in self.actors.values() if w.pending is not None}
        if pending:
            ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=wait_s)
        else:
            ready = []
        for ref in ready:
            w = pending[ref]
            w.pending = None
            try:
                pid = ray.get(ref)
            except RayActorError as exc:
                changes += self._failed(w, exc)
                continue
            stall = float(pid.get("stall_s") or 0.0) if isinstance(pid, dict) else 0.0
            was_hung = w.live.hung
            if w.live.answered(time.monotonic(), stall) is False and stall >= w.live.hung_after_s:
                changes += self._judge(w)  # its process answers, its event loop does not run: still hung
                continue
            node = (pid.get("node") or "") if isinstance(pid, dict) else ""
            pid = pid.get("pid") if isinstance(pid, dict) else pid
            on = f" on node {node[:12]}" if node else ""
            if w.pid is None and node:
                changes.append(Change(w.name, "placed", pid, f"placed{on}", node))
            elif w.pid is not None and pid != w.pid:
                if not w.gone:  # died and came back between two polls (or while it looked hung)
                    changes.append(Change(w.name, "died", w.pid, "found restarted with a new process", w.node))
                self.restarts += 1
                changes.append(Change(w.name, "restarted", pid,
                                      (f"back after {time.monotonic() - w.since:.1f}s" if w.away else "restarted")
                                      + on, node))
            elif w.away:  # an answer from the same process: it was slow, not dead
                changes.append(Change(w.name, "answering", pid, "answers again (same process)"
                                      + (" after it hung" if was_hung else ""), node))
            w.pid, w.node, w.away, w.gone = pid, node or w.node, False, False
        for w in self.actors.values():
            if w.pending is not None and not w.lost:
                changes += self._judge(w)
        return changes

    def _judge(self, w: _Watched) -> list[Change]:
        """An actor silent past its bounds: reported hung, then killed (Ray restarts it)."""
        now = time.monotonic()
        out: list[Change] = []
        for due in w.live.step(now):
            silent = w.live.silent_s(now)
            if due == "hung":
                if not w.away:
                    w.away, w.since = True, now - silent
                out.append(Change(w.name, "hung", w.pid, f"no heartbeat for {silent:.1f}s (bound "
                                  f"{self.heartbeat_s:g}s); killed at {self.hung_kill_s:g}s if still silent", w.node))
            elif due == "kill" and w.handle is not None:
                if not actor_alive(w.handle):  # Ray is restarting it already: not hung, just slow to come back
                    w.live.killed_at = now
                    continue
                try:
                    self.kill(w.handle)
                except Exception as exc:  # noqa: BLE001 - said in the row; tried again at the next bound
                    out.append(Change(w.name, "kill_failed", w.pid, f"{type(exc).__name__}: {exc}", w.node))
                    continue
                self.kills += 1
                w.gone = True
                out.append(Change(w.name, "killed", w.pid, f"hung {silent:.1f}s (bound {self.hung_kill_s:g}s): "
                                  "killed, Ray restarts it", w.node))
        return out

    def _failed(self, w: _Watched, exc: Exception) -> list[Change]:
        w.live.reset()
        if isinstance(exc, ActorDiedError):
            w.lost, w.away = True, True
            return [Change(w.name, "lost", w.pid, f"dead for good: {str(exc).splitlines()[0][:300]}", w.node)]
        if w.away:
            return []
        w.away, w.since, w.gone = True, time.monotonic(), True
        return [Change(w.name, "died", w.pid, f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}", w.node)]
