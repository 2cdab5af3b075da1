"""RouterPump without Ray, all in one event loop: `ServiceSources` over the real board service and
client, the EmbeddedChat and a forge event list; hosts that hold a real HostInbox. A restart that
resumes from the hosts' cursors, a host that fails now and then, a host that is gone, the backlog
pause, the claims rebuild."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, defaultdict
from pathlib import Path

from agensh_ray.board import BoardClient, BoardService
from agensh_ray.errors import HostGone
from agensh_ray.models import BoardEntry, BoardEntryIn, ChatMessage, ForgeEvent
from agensh_ray.routing import SOURCES, HostInbox, RouterPump, ServiceSources
from agensh_ray.services.chat.embedded import EmbeddedChat
from tests.support import await_for

HOSTS = {f"h{i}": [f"w{i}{k}" for k in range(2)] for i in range(3)}
WORKERS = [w for ws in HOSTS.values() for w in ws]
FAST = {"linger_s": 0.01, "cursor_sync_s": 0.05, "retry_s": 0.01}
"""Settings for tests: short pauses (the defaults are tuned for Ray calls, not for a test)."""


class LocalChat:
    """The EmbeddedChat with the long poll the chat actor adds (`wait_since`)."""

    def __init__(self, root: Path):
        self.chat = EmbeddedChat(root)
        for w in WORKERS:
            self.chat.add_user(w)
        self._new = asyncio.Event()

    def dm(self, sender: str, to: str, text: str) -> ChatMessage:
        m = self.chat.dm(sender, to, text)
        self._new.set()
        return m

    async def wait_since(self, cursor: int, timeout_s: float, limit: int = 1000) -> list[ChatMessage]:
        self._new.clear()  # one reader: cleared before the check, so a message after it ends the wait
        got = self.chat.messages_since(cursor, limit)
        if not got:
            try:
                await asyncio.wait_for(self._new.wait(), timeout_s)
            except asyncio.TimeoutError:
                return []
            got = self.chat.messages_since(cursor, limit)
        return got


class LocalForge:
    """Forge events by cursor, as the forge actor answers `events_since`."""

    def __init__(self) -> None:
        self.events: list[ForgeEvent] = []

    def add(self, actor: str, notify: list[str]) -> ForgeEvent:
        fe = ForgeEvent(seq=len(self.events) + 1, ts=0, kind="pr_reviewed", actor=actor, pr=1, notify=notify)
        self.events.append(fe)
        return fe

    async def events_since(self, cursor: int, limit: int = 1000) -> list[ForgeEvent]:
        return [fe for fe in self.events if fe.seq > cursor][:limit]


class Services:
    """The pump's sources as in a run (`ServiceSources`), over in-process services: the real board
    service behind the real board client (long poll, claims window), a chat and a forge. Every read is
    logged with its cursor."""

    def __init__(self, root: Path):
        self.board_service = BoardService(str(root / "board.jsonl"))
        self.board = BoardClient(self.board_service)
        self.chat = LocalChat(root / "chat")
        self.forge = LocalForge()
        self.sources = ServiceSources(self.board, self.chat, self.forge, poll_timeout_s=0.5, forge_poll_s=0.02)
        self.reads: list[tuple[str, int]] = []

    # what the test writes
    async def write(self, worker: str, text: str, type: str = "FACT") -> BoardEntry:
        return await self.board.awrite(BoardEntryIn(type=type, text=text, worker_id=worker))

    def last(self) -> dict[str, int]:
        return {"board": self.board_service.board.last_seq, "chat": self.chat.chat.last_seq,
                "forge": len(self.forge.events)}

    # RouterSources
    async def read(self, source: str, cursor: int) -> list:
        self.reads.append((source, cursor))
        return await self.sources.read(source, cursor)

    async def board_info(self) -> dict:
        return await self.sources.board_info()

    async def board_cursor_at(self, ts: int) -> int:
        return await self.sources.board_cursor_at(ts)

    async def board_since(self, cursor: int, limit: int) -> list[BoardEntry]:
        return await self.sources.board_since(cursor, limit)

    async def close(self) -> None:
        self.board_service.close()
        self.chat.chat.close()


class LocalHost:
    """A worker host as the pump's HostLink: a real HostInbox. `hold` (an asyncio.Event, None: open)
    keeps deliveries waiting at the door until it is set, as a lagging host does; `fail` lists what
    the next calls do: "after" accepts and then raises, "before" raises without accepting."""

    def __init__(self, workers: list[str]):
        self.inbox = HostInbox(workers)
        self.hold: asyncio.Event | None = None
        self.held = False
        self.fail: list[str] = []
        self.gone = False
        self.calls = 0

    async def deliver(self, events: list, cursors: dict[str, int]) -> int:
        self.calls += 1
        if self.gone:
            raise HostGone("host actor died")
        if self.hold is not None:
            self.held = True
            await self.hold.wait()
            self.held = False
        how = self.fail.pop(0) if self.fail else None
        if how == "before":
            raise ConnectionError("host busy")
        new = self.inbox.accept(events, cursors)
        if how == "after":
            raise TypeError("the answer could not be sent")
        return new

    async def cursors(self) -> dict[str, int]:
        if self.gone:
            raise HostGone("host actor died")
        return dict(self.inbox.cursors)

    def take(self, got: dict[str, Counter], urgent_only: bool = False) -> None:
        for w in self.inbox.workers:
            for q in self.inbox.take(w, urgent_only):
                got[w][q.event_id] += 1


def make_hosts() -> dict[str, LocalHost]:
    return {h: LocalHost(ws) for h, ws in HOSTS.items()}


def pump(services: Services, hosts: dict[str, LocalHost], policy: str = "all", **settings) -> RouterPump:
    return RouterPump("r0", services, {h: (hosts[h], HOSTS[h]) for h in hosts}, policy, **{**FAST, **settings})


def caught_up(services: Services, hosts: list[LocalHost]):
    last = services.last()
    return lambda: all(all(host.inbox.cursors[s] >= last[s] for s in SOURCES) for host in hosts)


def expected_for(board: list[BoardEntry], dms: list[ChatMessage], forge: list[ForgeEvent],
                 workers: list[str]) -> dict[str, Counter]:
    want: dict[str, Counter] = {w: Counter() for w in workers}
    for e in board:
        for w in workers:
            if w != e.worker_id:
                want[w][e.event_id] += 1
    for m in dms:
        if m.to in want:
            want[m.to][m.event_id] += 1
    for fe in forge:
        for w in dict.fromkeys(fe.notify):
            if w in want and w != fe.actor:
                want[w][fe.event_id] += 1
    return want


async def write_some(services: Services, n: int, tag: str, into: tuple[list, list, list] | None = None
                     ) -> tuple[list, list, list]:
    """n board entries, 3 DMs (one to a worker of each host) and a forge event notifying 3 workers."""
    board = [await services.write(WORKERS[i % len(WORKERS)], f"{tag} finding {i}") for i in range(n)]
    dms = [services.chat.dm(WORKERS[i], WORKERS[(i + 3) % len(WORKERS)], f"{tag} dm {i}") for i in range(3)]
    forge = [services.forge.add(WORKERS[0], [WORKERS[1], WORKERS[2], WORKERS[4], WORKERS[0]])]
    if into is not None:
        for acc, part in zip(into, (board, dms, forge)):
            acc.extend(part)
    return board, dms, forge


def taken(hosts: list[LocalHost], urgent_only: bool = False, got: dict[str, Counter] | None = None
          ) -> dict[str, Counter]:
    got = defaultdict(Counter) if got is None else got
    for host in hosts:
        host.take(got, urgent_only)
    return got


async def test_every_event_exactly_once_per_worker_across_a_restart_from_the_hosts_cursors(tmp_path):
    services, hosts = Services(tmp_path), make_hosts()
    written: tuple[list, list, list] = ([], [], [])
    got: dict[str, Counter] = defaultdict(Counter)
    first = pump(services, hosts)
    try:
        await first.ensure_started()
        await write_some(services, 10, "a", written)
        await await_for(caught_up(services, list(hosts.values())), 10, "every host to get batch a")
        at_a = dict(hosts["h0"].inbox.cursors)
        taken(list(hosts.values()), urgent_only=True, got=got)
        hosts["h0"].hold = asyncio.Event()  # h0 lags: what comes next waits at its door
        await write_some(services, 10, "b", written)
        await await_for(caught_up(services, [hosts["h1"], hosts["h2"]]), 10, "h1 and h2 to get batch b")
        await await_for(lambda: hosts["h0"].held, 10, "a delivery to h0 to wait at its door")
    finally:
        await first.stop()  # the router goes away with a delivery to h0 in flight
    assert hosts["h0"].inbox.cursors == at_a
    await write_some(services, 10, "c", written)

    hosts["h0"].hold.set()
    n_reads = len(services.reads)
    second = pump(services, hosts)
    try:
        await second.ensure_started()
        await await_for(caught_up(services, list(hosts.values())), 10, "every host to get batches b and c")
        taken(list(hosts.values()), got=got)
        resumed_at = {s: next(c for src, c in services.reads[n_reads:] if src == s) for s in SOURCES}
        assert resumed_at == at_a  # the lowest cursor of the hosts: h0's
        assert got == expected_for(*written, WORKERS)
        assert hosts["h1"].inbox.duplicates > 0 and hosts["h2"].inbox.duplicates > 0  # b came again, dropped
        assert hosts["h0"].inbox.duplicates == 0
        for p in (first, second):
            assert p.status()["failed_deliveries"] == 0 and p.status()["dead_hosts"] == []
    finally:
        await second.stop()
        await services.close()


async def test_a_failing_host_is_retried_and_counted(tmp_path, caplog):
    services, hosts = Services(tmp_path), make_hosts()
    hosts["h1"].fail = ["after", "before"]  # the answer lost after the events were queued; then refused
    p = pump(services, hosts)
    try:
        with caplog.at_level(logging.ERROR, logger="agensh_ray.routing.pump"):
            await p.ensure_started()
            written = await write_some(services, 12, "x")
            await await_for(caught_up(services, list(hosts.values())), 10, "every host to get everything")
            await await_for(lambda: hosts["h1"].calls >= 3, 10, "the third delivery to h1: the one that works")
        assert taken(list(hosts.values())) == expected_for(*written, WORKERS)
        status = p.status()
        assert status["failed_deliveries"] == 2 and status["dead_hosts"] == []
        assert hosts["h1"].inbox.duplicates > 0  # what the first call queued came again, and was dropped
        failures = [r.getMessage() for r in caplog.records if "deliver to h1 failed" in r.getMessage()]
        assert failures == ["router r0: deliver to h1 failed (1 failed deliveries so far); retrying",
                            "router r0: deliver to h1 failed (2 failed deliveries so far); retrying"]
    finally:
        await p.stop()
        await services.close()


async def test_a_gone_host_is_dropped_and_the_others_go_on(tmp_path):
    services, hosts = Services(tmp_path), make_hosts()
    hosts["h2"].gone = True  # gone before the router starts: its cursors cannot be read
    p = pump(services, hosts)
    written: tuple[list, list, list] = ([], [], [])
    try:
        await p.ensure_started()
        assert p.status()["dead_hosts"] == ["h2"]
        await write_some(services, 5, "a", written)
        await await_for(caught_up(services, [hosts["h0"], hosts["h1"]]), 10, "h0 and h1 to get batch a")
        hosts["h1"].gone = True  # gone mid-run: its next delivery says so
        await write_some(services, 5, "b", written)
        await await_for(lambda: p.status()["dead_hosts"] == ["h1", "h2"], 10, "the router to drop h1")
        await write_some(services, 5, "c", written)
        await await_for(caught_up(services, [hosts["h0"]]), 10, "h0 to get everything")
        assert taken([hosts["h0"]]) == expected_for(*written, HOSTS["h0"])
        assert p.status()["failed_deliveries"] == 0 and hosts["h2"].calls == 0
    finally:
        await p.stop()
        await services.close()


async def test_reading_pauses_while_a_host_backlog_is_over_the_limit(tmp_path):
    services, hosts = Services(tmp_path), make_hosts()
    hosts["h0"].hold = asyncio.Event()  # h0 takes nothing until released
    p = pump(services, hosts, max_backlog=20, linger_s=0.0)
    try:
        await p.ensure_started()
        board = [await services.write(WORKERS[i % len(WORKERS)], f"finding {i}") for i in range(30)]
        await await_for(lambda: hosts["h0"].held and len(p.outboxes["h0"].events) > 20, 10,
                        "h0's outbox to pass the limit while a delivery waits at its door")
        assert p.status()["paused"]
        reads = len(services.reads)
        board += [await services.write(WORKERS[i % len(WORKERS)], f"later finding {i}") for i in range(30)]
        for _ in range(100):  # the loop runs the pump's tasks: an unpaused read loop would read again
            await asyncio.sleep(0)
        assert len(services.reads) == reads and p.status()["cursors"]["board"] < board[-1].seq
        hosts["h0"].hold.set()
        await await_for(caught_up(services, list(hosts.values())), 10, "every host to get all 60 entries")
        assert taken(list(hosts.values())) == expected_for(board, [], [], WORKERS)
        assert p.status()["backlog"] == 0 and not p.status()["paused"] and p.status()["failed_deliveries"] == 0
    finally:
        await p.stop()
        await services.close()


async def test_a_restarted_pump_rebuilds_the_claims_for_the_relevant_policy(tmp_path):
    services, hosts = Services(tmp_path), make_hosts()
    first = pump(services, hosts, "relevant")
    try:
        await first.ensure_started()
        await services.write("w00", "tac: textkit/commands/tac.py", "CLAIM")
        await services.write("w10", "the reference is a zipapp")
        await await_for(caught_up(services, list(hosts.values())), 10, "every host to get the claim")
    finally:
        await first.stop()
    taken(list(hosts.values()))
    second = pump(services, hosts, "relevant")
    try:
        await second.ensure_started()
        assert set(second.fanout.claims.by_worker) == {"w00"}  # rebuilt from the board, nothing delivered
        hot = await services.write("w11", "tac drops a missing final newline", "OBSERVED")
        await await_for(caught_up(services, list(hosts.values())), 10, "every host to get the entry")
        items = {(q.worker_id, q.priority) for host in hosts.values() for w in host.inbox.workers
                 for q in host.inbox.take(w, False) if q.event_id == hot.event_id}
        assert items == {("w00", "high"), ("w01", "low"), ("w10", "low"), ("w20", "low"), ("w21", "low")}
    finally:
        await second.stop()
        await services.close()


async def test_an_empty_forge_read_waits_before_it_returns(tmp_path):
    """The forge has no long poll: without the wait, the pump's forge loop would spin."""
    services = Services(tmp_path)
    try:
        sources = ServiceSources(services.board, services.chat, services.forge, poll_timeout_s=0.5, forge_poll_s=0.2)
        t0 = time.monotonic()
        assert await sources.read("forge", 0) == []
        assert time.monotonic() - t0 >= 0.2
        fe = services.forge.add("w00", ["w01"])
        assert await sources.read("forge", 0) == [fe]
    finally:
        await services.close()
