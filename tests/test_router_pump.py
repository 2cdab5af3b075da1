"""RouterPump without Ray: the real Board and EmbeddedChat as sources, hosts that hold a real
HostInbox, all in one event loop. A restart that resumes from the hosts' cursors, a host that fails
now and then, a host that is gone, and the backlog pause."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, defaultdict
from pathlib import Path

from agensh_ray.board import Board
from agensh_ray.errors import HostGone
from agensh_ray.models import BoardEntry, BoardEntryIn, ChatMessage, ForgeEvent
from agensh_ray.routing import SOURCES, HostInbox, RouterPump
from agensh_ray.services.chat.embedded import EmbeddedChat
from tests.support import await_for

HOSTS = {f"h{i}": [f"w{i}{k}" for k in range(2)] for i in range(3)}
WORKERS = [w for ws in HOSTS.values() for w in ws]
FAST = {"linger_s": 0.01, "cursor_sync_s": 0.05, "retry_s": 0.01}
"""Settings for tests: short pauses (the defaults are tuned for Ray calls, not for a test)."""


class LocalSources:
    """The pump's RouterSources over the real Board and EmbeddedChat and a list of forge events. Reads
    wait up to `poll_timeout_s` for something new (a long poll), and are logged with their cursor."""

    def __init__(self, root: Path, poll_timeout_s: float = 0.5, page: int = 1000):
        self.board = Board(root / "board.jsonl")
        self.chat = EmbeddedChat(root / "chat")
        for w in WORKERS:
            self.chat.add_user(w)
        self.forge: list[ForgeEvent] = []
        self.poll_timeout_s = poll_timeout_s
        self.page = page
        self.reads: list[tuple[str, int]] = []
        self._new = {s: asyncio.Event() for s in SOURCES}

    # -- what the test writes
    def write(self, worker: str, text: str, type: str = "FACT") -> BoardEntry:
        e = self.board.write(BoardEntryIn(type=type, text=text, worker_id=worker))
        self._new["board"].set()
        return e

    def dm(self, sender: str, to: str, text: str) -> ChatMessage:
        m = self.chat.dm(sender, to, text)
        self._new["chat"].set()
        return m

    def forge_event(self, actor: str, notify: list[str]) -> ForgeEvent:
        fe = ForgeEvent(seq=len(self.forge) + 1, ts=0, kind="pr_reviewed", actor=actor, pr=1, notify=notify)
        self.forge.append(fe)
        self._new["forge"].set()
        return fe

    def last(self) -> dict[str, int]:
        return {"board": self.board.last_seq, "chat": self.chat.last_seq, "forge": len(self.forge)}

    # -- RouterSources
    def _since(self, source: str, cursor: int) -> list:
        if source == "board":
            return self.board.since(cursor, self.page)
        if source == "chat":
            return self.chat.messages_since(cursor, self.page)
        return [fe for fe in self.forge if fe.seq > cursor][: self.page]

    async def read(self, source: str, cursor: int) -> list:
        self.reads.append((source, cursor))
        new = self._new[source]
        new.clear()  # one reader per source: cleared before the check, so a write after it wakes the wait
        got = self._since(source, cursor)
        if not got:
            try:
                await asyncio.wait_for(new.wait(), self.poll_timeout_s)
            except asyncio.TimeoutError:
                return []
            got = self._since(source, cursor)
        return got

    async def board_info(self) -> dict:
        return {"last_ts": self.board.last_ts, "claim_ttl_s": self.board.limits.claim_ttl_s}

    async def board_cursor_at(self, ts: int) -> int:
        return self.board.cursor_at(ts)

    async def board_since(self, cursor: int, limit: int) -> list[BoardEntry]:
        return self.board.since(cursor, limit)

    def close(self) -> None:
        self.board.close()
        self.chat.close()


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


def pump(sources: LocalSources, hosts: dict[str, LocalHost], policy: str = "all", **settings) -> RouterPump:
    return RouterPump("r0", sources, {h: (hosts[h], HOSTS[h]) for h in hosts}, policy, **{**FAST, **settings})


def caught_up(sources: LocalSources, hosts: list[LocalHost]):
    last = sources.last()
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


def write_some(sources: LocalSources, n: int, tag: str) -> tuple[list, list, list]:
    board = [sources.write(WORKERS[i % len(WORKERS)], f"{tag} finding {i}") for i in range(n)]
    dms = [sources.dm(WORKERS[i], WORKERS[(i + 3) % len(WORKERS)], f"{tag} dm {i}") for i in range(3)]
    forge = [sources.forge_event(WORKERS[0], [WORKERS[1], WORKERS[2], WORKERS[4], WORKERS[0]])]
    return board, dms, forge


async def test_every_event_exactly_once_per_worker_across_a_restart_from_the_hosts_cursors(tmp_path):
    sources, hosts = LocalSources(tmp_path), make_hosts()
    written: tuple[list, list, list] = ([], [], [])
    got: dict[str, Counter] = defaultdict(Counter)
    first = pump(sources, hosts)
    try:
        await first.ensure_started()
        for into, part in zip(written, write_some(sources, 10, "a")):
            into.extend(part)
        await await_for(caught_up(sources, list(hosts.values())), 10, "every host to get batch a")
        at_a = dict(hosts["h0"].inbox.cursors)
        for host in hosts.values():
            host.take(got, urgent_only=True)
        hosts["h0"].hold = asyncio.Event()  # h0 lags: what comes next waits at its door
        for into, part in zip(written, write_some(sources, 10, "b")):
            into.extend(part)
        await await_for(caught_up(sources, [hosts["h1"], hosts["h2"]]), 10, "h1 and h2 to get batch b")
        await await_for(lambda: hosts["h0"].held, 10, "a delivery to h0 to wait at its door")
    finally:
        await first.stop()  # the router goes away with a delivery to h0 in flight
    assert hosts["h0"].inbox.cursors == at_a
    for into, part in zip(written, write_some(sources, 10, "c")):
        into.extend(part)

    hosts["h0"].hold.set()
    n_reads = len(sources.reads)
    second = pump(sources, hosts)
    try:
        await second.ensure_started()
        await await_for(caught_up(sources, list(hosts.values())), 10, "every host to get batches b and c")
        for host in hosts.values():
            host.take(got)
        resumed_at = {s: next(c for src, c in sources.reads[n_reads:] if src == s) for s in SOURCES}
        assert resumed_at == at_a  # the lowest cursor of the hosts: h0's
        assert got == expected_for(*written, WORKERS)
        assert hosts["h1"].inbox.duplicates > 0 and hosts["h2"].inbox.duplicates > 0  # b came again, dropped
        assert hosts["h0"].inbox.duplicates == 0
        for p in (first, second):
            assert p.status()["failed_deliveries"] == 0 and p.status()["dead_hosts"] == []
    finally:
        await second.stop()
        sources.close()


async def test_a_failing_host_is_retried_and_counted(tmp_path, caplog):
    sources, hosts = LocalSources(tmp_path), make_hosts()
    hosts["h1"].fail = ["after", "before"]  # the answer lost after the events were queued; then refused
    p = pump(sources, hosts)
    try:
        with caplog.at_level(logging.ERROR, logger="agensh_ray.routing.pump"):
            await p.ensure_started()
            written = write_some(sources, 12, "x")
            await await_for(caught_up(sources, list(hosts.values())), 10, "every host to get everything")
            await await_for(lambda: hosts["h1"].calls >= 3, 10, "the third delivery to h1: the one that works")
        got: dict[str, Counter] = defaultdict(Counter)
        for host in hosts.values():
            host.take(got)
        assert got == expected_for(*written, WORKERS)
        status = p.status()
        assert status["failed_deliveries"] == 2 and status["dead_hosts"] == []
        assert hosts["h1"].inbox.duplicates > 0  # what the first call queued came again, and was dropped
        failures = [r.getMessage() for r in caplog.records if "deliver to h1 failed" in r.getMessage()]
        assert failures == ["router r0: deliver to h1 failed (1 failed deliveries so far); retrying",
                            "router r0: deliver to h1 failed (2 failed deliveries so far); retrying"]
    finally:
        await p.stop()
        sources.close()


async def test_a_gone_host_is_dropped_and_the_others_go_on(tmp_path):
    sources, hosts = LocalSources(tmp_path), make_hosts()
    hosts["h2"].gone = True  # gone before the router starts: its cursors cannot be read
    p = pump(sources, hosts)
    try:
        await p.ensure_started()
        assert p.status()["dead_hosts"] == ["h2"]
        first = write_some(sources, 5, "a")
        await await_for(caught_up(sources, [hosts["h0"], hosts["h1"]]), 10, "h0 and h1 to get batch a")
        hosts["h1"].gone = True  # gone mid-run: its next delivery says so
        second = write_some(sources, 5, "b")
        await await_for(lambda: p.status()["dead_hosts"] == ["h1", "h2"], 10, "the router to drop h1")
        third = write_some(sources, 5, "c")
        await await_for(caught_up(sources, [hosts["h0"]]), 10, "h0 to get everything")
        got: dict[str, Counter] = defaultdict(Counter)
        hosts["h0"].take(got)
        written = [a + b + c for a, b, c in zip(first, second, third)]
        assert got == expected_for(*written, HOSTS["h0"])
        assert p.status()["failed_deliveries"] == 0 and hosts["h2"].calls == 0
    finally:
        await p.stop()
        sources.close()


async def test_reading_pauses_while_a_host_backlog_is_over_the_limit(tmp_path):
    sources, hosts = LocalSources(tmp_path, page=10), make_hosts()
    board = [sources.write(WORKERS[i % len(WORKERS)], f"finding {i}") for i in range(200)]
    hosts["h0"].hold = asyncio.Event()  # h0 takes nothing until released
    p = pump(sources, hosts, max_backlog=20, linger_s=0.0)
    try:
        await p.ensure_started()
        await await_for(lambda: hosts["h0"].held and len(p.outboxes["h0"].events) > 20, 10,
                        "h0's outbox to pass the limit while a delivery waits at its door")
        assert p.status()["paused"]
        reads, backlog = len(sources.reads), p.status()["backlog"]
        for _ in range(100):  # the loop runs the pump's tasks: an unpaused read loop would read again
            await asyncio.sleep(0)
        assert len(sources.reads) == reads and p.status()["backlog"] == backlog
        assert 20 < len(p.outboxes["h0"].events) <= 20 + sources.page
        assert p.status()["cursors"]["board"] < board[-1].seq
        hosts["h0"].hold.set()
        await await_for(caught_up(sources, list(hosts.values())), 10, "every host to get all 200 entries")
        got: dict[str, Counter] = defaultdict(Counter)
        for host in hosts.values():
            host.take(got)
        assert got == expected_for(board, [], [], WORKERS)
        assert p.status()["backlog"] == 0 and p.status()["failed_deliveries"] == 0
    finally:
        await p.stop()
        sources.close()


async def test_a_restarted_pump_rebuilds_the_claims_for_the_relevant_policy(tmp_path):
    sources, hosts = LocalSources(tmp_path), make_hosts()
    first = pump(sources, hosts, "relevant")
    try:
        await first.ensure_started()
        sources.write("w00", "tac: textkit/commands/tac.py", "CLAIM")
        sources.write("w10", "the reference is a zipapp")
        await await_for(caught_up(sources, list(hosts.values())), 10, "every host to get the claim")
    finally:
        await first.stop()
    for host in hosts.values():
        host.take(defaultdict(Counter))
    second = pump(sources, hosts, "relevant")
    try:
        await second.ensure_started()
        assert set(second.fanout.claims.by_worker) == {"w00"}  # rebuilt from the board, nothing delivered
        hot = sources.write("w11", "tac drops a missing final newline", "OBSERVED")
        await await_for(caught_up(sources, list(hosts.values())), 10, "every host to get the entry")
        items = {(q.worker_id, q.priority) for host in hosts.values() for w in host.inbox.workers
                 for q in host.inbox.take(w, False) if q.event_id == hot.event_id}
        assert items == {("w00", "high"), ("w01", "low"), ("w10", "low"), ("w20", "low"), ("w21", "low")}
    finally:
        await second.stop()
        sources.close()
