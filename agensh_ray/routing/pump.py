"""RouterPump: what a RouterActor does, as a plain asyncio class. It reads the durable sources by
cursor and pushes events to its hosts (see `Fanout`), one batched call per host. The sources
(`RouterSources`) and the hosts (`HostLink`, see agensh_ray/seams.py) are injected: Ray actors in a
run (actors/router.py), plain in-process objects in tests.

Three source loops (board and chat by long poll, forge by polling) feed one outbox per host; a
sender per host keeps one `deliver(events, cursors)` call in flight and sends everything that piled
up meanwhile in the next one, so a burst costs a few calls per host, not one per event, and a slow
or dead host never holds up the others. A Ray call costs about a millisecond of CPU on each side,
far more than routing an event, so the loops trade a little latency for fewer calls: a source is
read at most every `linger_s` (150 ms; a RoutingConfig setting, like `ship_interval_s`, an optional
extra spacing of the calls to one host), and a host that got no events learns the new cursors only
every `cursor_sync_s`. The read loops pause while any outbox holds more than `max_backlog` events.

No loss, no duplicate: each host keeps a cursor per source and drops events at or below it. A
restarted pump (its actor restarts itself) resumes: it asks the hosts for their cursors and reads
again from the lowest; what a host already has is dropped by that host. A host that raises
`HostGone` is dropped; any other delivery error is retried and counted (`failed_deliveries`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from agensh_ray.errors import HostAway, HostGone
from agensh_ray.routing.fanout import Fanout
from agensh_ray.seams import HostLink, RouterSources
from agensh_ray.wire import SOURCES, Event

log = logging.getLogger(__name__)

RESUME_PAGE = 10_000
"""Board entries per read when rebuilding the claims view after a restart."""

RETRY_S = 0.5
"""Pause after a failed read or delivery before the next try."""


class _Outbox:
    """What waits for one host: events in source order and the cursors they bring the host to."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.cursors: dict[str, int] = {}
        self.sent: dict[str, int] = {}
        self.ready = asyncio.Event()
        self.drained = asyncio.Event()
        self.drained.set()
        self.dead = False
        self.calls = 0


class RouterPump:
    """Routes the sources' events to the hosts of one router; `start()` on a running loop, then the
    loops run by themselves until `stop()`.

    hosts: host id -> (its link, its worker ids). The settings are `RoutingConfig`'s (see above).
    """

    def __init__(self, router_id: str, sources: RouterSources, hosts: dict[str, tuple[HostLink, list[str]]],
                 policy: str = "all", *, max_backlog: int = 20_000, linger_s: float = 0.15,
                 ship_interval_s: float = 0.0, cursor_sync_s: float = 1.0, retry_s: float = RETRY_S):
        self.router_id = router_id
        self.sources = sources
        self.links = {h: link for h, (link, _) in hosts.items()}
        self.fanout = Fanout({h: list(ws) for h, (_, ws) in hosts.items()}, policy=policy)
        self.max_backlog = max_backlog
        self.linger_s = linger_s
        """Pause after each read that returned something, so the next read carries what arrived
        meanwhile: at most 1/linger_s reads per source and second."""
        self.ship_interval_s = ship_interval_s
        """At most one deliver call per host per interval (events wait at most this long)."""
        self.cursor_sync_s = cursor_sync_s
        """A host that got no events still learns the read position this often (only a restarted
        router needs it, to resume close to where it stopped)."""
        self.retry_s = retry_s
        self.cursors: dict[str, int] = {}
        self.shipped = 0
        self.failed_deliveries = 0
        """Deliver calls that raised (not HostGone) and were retried: a healthy run has none."""
        self.outboxes = {h: _Outbox() for h in self.links}
        self._tasks: list[asyncio.Task] = []
        self._stopping = False
        self._resumed: asyncio.Task | None = None

    # -- start / resume --------------------------------------------------------------
    def start(self) -> None:
        """Schedule the resume (then the loops) on the running loop; idempotent."""
        if self._resumed is None:
            self._resumed = asyncio.get_running_loop().create_task(self._resume(), name="resume")

    async def ensure_started(self) -> None:
        """Wait until the loops run (`start` schedules them); a failed resume is retried once."""
        self.start()
        assert self._resumed is not None
        try:
            await asyncio.shield(self._resumed)
        except Exception:
            log.exception("router %s: resume failed; retrying", self.router_id)
            self._resumed = asyncio.get_running_loop().create_task(self._resume(), name="resume")
            await asyncio.shield(self._resumed)

    async def _resume(self) -> None:
        got: dict[str, dict[str, int]] = {}
        for h, link in self.links.items():
            try:
                got[h] = await link.cursors()
            except HostGone:
                log.warning("router %s: host %s is gone; not routing to it", self.router_id, h)
                self.outboxes[h].dead = True
            except Exception as exc:  # a host being restarted: it starts empty and takes what comes next
                log.warning("router %s: host %s did not give its cursors (%s); routing from here on",
                            self.router_id, h, exc)
        for src in SOURCES:
            self.cursors[src] = min((c.get(src, 0) for c in got.values()), default=0)
        for h, c in got.items():
            self.outboxes[h].sent = dict(c)
        await self._claim_rule()
        if self.fanout.policy == "relevant" and self.cursors["board"]:
            await self._rebuild_claims(self.cursors["board"])
        self._tasks = [asyncio.create_task(self._read_loop(s), name=s) for s in SOURCES]
        self._tasks += [asyncio.create_task(self._send_loop(h), name=f"send-{h}") for h in self.links]

    async def _claim_rule(self) -> None:
        """Follow the board's claim rule; under `lease`, start the overlap push's claim book from the board's
        open claims (its index: nothing is replayed)."""
        try:
            info = await self.sources.board_info()
            self.fanout.use_leases(info.get("claim_ttl_s", self.fanout.claim_ttl_s), info.get("claim_rule", "legacy"))
            if self.fanout.leases is not None:
                self.fanout.seed(await self.sources.board_claims(), info.get("last_seq", 0))
        except Exception as exc:  # a board restarting: no overlap push until this router resumes again
            log.warning("router %s: no claims from the board (%s); no claim overlap push", self.router_id, exc)
            self.fanout.use_leases(self.fanout.claim_ttl_s, "legacy")

    async def _rebuild_claims(self, upto: int) -> None:
        """Replay the claim-relevant window of the board into the claims view (nothing is delivered)."""
        info = await self.sources.board_info()
        self.fanout.claim_ttl_s = info.get("claim_ttl_s", self.fanout.claim_ttl_s)
        cursor = await self.sources.board_cursor_at(info["last_ts"] - int(self.fanout.claim_ttl_s * 1e6))
        while cursor < upto:
            page = await self.sources.board_since(cursor, min(RESUME_PAGE, upto - cursor))
            if not page:
                break
            for e in page:
                self.fanout.track(e)
            cursor = page[-1].seq

    # -- reading -----------------------------------------------------------------------
    async def _read_loop(self, src: str) -> None:
        while not self._stopping:
            try:
                for ob in self.outboxes.values():
                    if not ob.dead:
                        await ob.drained.wait()
                batch = await self.sources.read(src, self.cursors[src])
                if not batch:
                    continue
                per_host = self.fanout.split(src, batch)
                cursor = batch[-1].seq
                for h, ob in self.outboxes.items():
                    if ob.dead:
                        continue
                    evs = per_host.get(h)
                    ob.cursors[src] = cursor
                    if evs:
                        ob.events.extend(evs)
                        if len(ob.events) > self.max_backlog:
                            ob.drained.clear()
                        ob.ready.set()
                self.cursors[src] = cursor
                if self.linger_s > 0:
                    await asyncio.sleep(self.linger_s)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("router %s: %s loop failed; retrying", self.router_id, src)
                await asyncio.sleep(self.retry_s)

    # -- sending -----------------------------------------------------------------------
    async def _send_loop(self, h: str) -> None:
        ob, link = self.outboxes[h], self.links[h]
        loop = asyncio.get_running_loop()
        last = 0.0
        while not self._stopping and not ob.dead:
            try:
                await asyncio.wait_for(ob.ready.wait(), self.cursor_sync_s)
            except asyncio.TimeoutError:  # no events for this host lately: just the cursors, if they moved
                if all(ob.sent.get(s, 0) >= c for s, c in ob.cursors.items()):
                    continue
            wait = last + self.ship_interval_s - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)  # let more pile up: one call carries them all
            ob.ready.clear()
            last = loop.time()
            events, ob.events = ob.events, []
            cursors = dict(ob.cursors)
            ob.drained.set()
            try:
                await link.deliver(events, cursors)
            except asyncio.CancelledError:
                raise
            except HostGone:
                log.warning("router %s: host %s died; not routing to it any more", self.router_id, h)
                ob.dead, ob.events = True, []
                ob.drained.set()
                return
            except Exception as exc:
                self.failed_deliveries += 1
                say = log.warning if isinstance(exc, HostAway) else log.exception  # restarting: no traceback
                say("router %s: deliver to %s failed (%d failed deliveries so far); retrying",
                    self.router_id, h, self.failed_deliveries)
                ob.events[:0] = events  # the host drops whatever of it arrived
                ob.ready.set()
                await asyncio.sleep(self.retry_s)
                continue
            ob.sent = cursors
            ob.calls += 1
            self.shipped += len(events)

    # -- control -----------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        return {
            "cursors": dict(self.cursors),
            "shipped": self.shipped,
            "calls": sum(ob.calls for ob in self.outboxes.values()),
            "backlog": sum(len(ob.events) for ob in self.outboxes.values()),
            "paused": any(not ob.drained.is_set() for ob in self.outboxes.values() if not ob.dead),
            "failed_deliveries": self.failed_deliveries,
            "dead_hosts": sorted(h for h, ob in self.outboxes.items() if ob.dead),
            "time": time.time(),
        }

    async def stop(self) -> None:
        """Stop the loops (a delivery in flight is abandoned: the host's cursor says what arrived)."""
        self._stopping = True
        tasks = [*self._tasks, *([self._resumed] if self._resumed is not None else [])]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
