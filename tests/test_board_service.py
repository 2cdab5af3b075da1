"""The board service and its client without Ray: BoardClient(BoardService(...)) in one event loop, real
files. Group commit, the long poll, the grep in its thread and its budget, the client's recent-view copy
(fetched by delta, fed by deliveries) and request-id idempotency."""

from __future__ import annotations

import asyncio
import re
import time

import pyarrow.parquet as pq
import pytest

from agensh_ray.board import BoardClient, BoardLimits, BoardService
from agensh_ray.board.client import BoardTimeout, wire_request
from agensh_ray.errors import BoardError
from agensh_ray.models import BoardEntry, BoardEntryIn
from agensh_ray.wire import Row, entries_from_acks
from tests.support import await_for


class Clock:
    """A clock the test moves (the board's UTC seconds, or the client's monotonic seconds)."""

    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def e(text: str, type: str = "FACT", worker: str = "w1", **kw) -> BoardEntryIn:
    return BoardEntryIn(type=type, text=text, worker_id=worker, **kw)


def rows(entries: list[BoardEntry]) -> list[Row]:
    """Entries as a router delivers them (without details)."""
    return [Row(x.seq, x.ts, x.type.value, x.text, x.worker_id, x.has_detail) for x in entries]


@pytest.fixture
async def service(tmp_path):
    svc = BoardService(str(tmp_path / "board.jsonl"))
    yield svc
    svc.close()


async def test_group_commit_shares_fsyncs_across_concurrent_writes(service):
    wires = [[wire_request(e(f"concurrent {i}", worker=f"w{i}"))] for i in range(40)]
    acks = await asyncio.gather(*(service.write_acks(w) for w in wires))
    assert sorted(a[0][0] for a in acks) == list(range(1, 41))
    info = await service.info()
    assert info["entries_committed"] == 40 and info["commits"] < 40  # concurrent writes shared fsyncs
    assert info["write_ms_p50"] is not None and info["last_seq"] == 40
    # the same through a client: concurrent writes leave in shared calls, then share fsyncs
    client = BoardClient(service)
    written = await asyncio.gather(*(client.awrite(e(f"client {i}", worker=f"w{i}")) for i in range(40)))
    assert sorted(x.seq for x in written) == list(range(41, 81))
    info2 = await service.info()
    assert info2["entries_committed"] == 80 and info2["commits"] - info["commits"] < 40
    assert len(service.board.since(0, 1000)) == 80  # all of them durable and visible


async def test_client_reads_writes_and_raises_the_boards_refusals(service):
    client = BoardClient(service)
    first = await client.awrite(e("first fact", detail="the long story"))
    assert first.seq == 1 and first.request_id  # the client added an idempotency key
    res = await client.awrite_batch([e("second"), e("bad", type="NOPE"), e("third", type="CLAIM")])
    assert [r.seq if isinstance(r, BoardEntry) else "err" for r in res] == [2, "err", 3]
    assert "unknown entry type 'NOPE'" in str(res[1])
    assert [x.text for x in await client.arecent()] == ["first fact", "second", "third"]
    assert [x.text for x in await client.arecent(2)] == ["second", "third"]
    assert [x.seq for x in await client.asince(1)] == [2, 3]
    assert [x.seq for x in await client.agrep("FACT|third")] == [3, 1]
    assert (await client.aunfold(1)).detail == "the long story"
    assert await client.alast_seq() == 3
    assert await client.acursor_at(first.ts + 1) >= 1
    with pytest.raises(BoardError) as ei:
        await client.awrite(e("x" * 143, type="CLAIM"))
    assert str(ei.value) == "CLAIM text is 143 characters; the limit is 100 (put the rest in detail)"
    with pytest.raises(BoardError) as ei:
        await client.agrep("(")
    assert str(ei.value).startswith("invalid pattern '(':")
    with pytest.raises(BoardError, match="^no board entry 42"):
        await client.aunfold(42)
    with pytest.raises(BoardError):
        await client.awrite(e("", type="FACT"))


async def test_wait_since_wakes_on_a_write(service):
    client = BoardClient(service)
    assert await service.wait_since_rows(0, timeout_s=0.05) == []  # nothing comes: [] at the timeout
    waiter = asyncio.create_task(client.await_since(0, 30.0))
    for _ in range(5):
        await asyncio.sleep(0)  # let it reach its wait
    assert not waiter.done()
    await client.awrite(e("wake up"))
    got = await asyncio.wait_for(waiter, 5)  # woken by the commit, long before its 30 s
    assert [x.text for x in got] == ["wake up"]
    assert [x.seq for x in await client.await_since(0, 30.0)] == [1]  # already there: at once


async def test_slow_grep_is_stopped_at_its_budget_while_writes_go_on(tmp_path):
    import random

    svc = BoardService(str(tmp_path / "b.jsonl"), limits=BoardLimits(grep_budget_s=0.05))
    client = BoardClient(svc)
    try:
        rnd = random.Random(5)  # text on which RE2's DFA gives up for this pattern: its slowest speed
        await svc.write_acks([wire_request(e("".join(rnd.choice("ab") for _ in range(90)))) for i in range(30 * 1024)])
        t0 = time.monotonic()
        grep = asyncio.create_task(client.agrep(r"[ab]*a[ab]{20}c"))  # no literal: a regex scan
        writes = 0
        while not grep.done():  # the search runs in a thread: writes are served meanwhile
            await client.awrite(e(f"written during the grep {writes}"))
            writes += 1
        took = time.monotonic() - t0
        with pytest.raises(BoardError, match=r"^grep '.*' stopped after \d+\.\d\d s having searched the newest "
                                             r"[\d,]+ of 30,720 entries; a pattern with a plain word") as ei:
            grep.result()
        said = float(re.search(r"stopped after (\S+) s", str(ei.value)).group(1))
        assert 0.05 <= said <= took + 0.01  # the time it really ran (to the hundredth it prints)
        assert writes >= 1
        assert [x.text for x in await client.agrep("during the grep", regex=False, limit=1)] == [
            f"written during the grep {writes - 1}"]
    finally:
        svc.close()


async def test_grep_with_no_budget_is_answered_at_once_and_its_thread_stops(tmp_path):
    svc = BoardService(str(tmp_path / "b.jsonl"), limits=BoardLimits(grep_budget_s=0.0))
    try:
        await svc.write_acks([wire_request(e(f"entry {i}")) for i in range(3000)])
        t0 = time.monotonic()
        err = await svc.grep(r"[xyz]{3}\d")
        assert isinstance(err, BoardError)
        took = time.monotonic() - t0
        start, said, searched, rest = re.fullmatch(
            r"(.*) stopped after (\d+\.\d\d) s having searched the newest ([\d,]+) of (.*)", str(err)).groups()
        assert start == "grep '[xyz]{3}\\\\d'" and float(said) <= took + 0.01
        assert int(searched.replace(",", "")) in (0, 952, 1976, 3000)  # whole blocks: 3,000 - 2 x 1,024, ...
        assert rest == ("3,000 entries; a pattern with a plain word in it (or regex=false) searches an index and "
                        "is fast")
        await await_for(lambda: svc._greps_running == 0, 30, "the grep's thread to stop")
    finally:
        svc.close()


async def test_grep_is_answered_at_its_budget_while_its_thread_is_inside_one_long_regex_call(tmp_path):
    import random

    svc = BoardService(str(tmp_path / "b.jsonl"), limits=BoardLimits(grep_budget_s=0.02))
    try:
        rnd = random.Random(7)  # 8,000 characters of a and b: RE2's DFA gives up, one entry costs it ~0.2-0.5 s
        await svc.write_acks([wire_request(e(f"ab {i}", detail="".join(rnd.choice("ab") for _ in range(8000))))
                              for i in range(40)])
        pattern = r"[ab]*a[ab]{600}c|[ab]*b[ab]{600}d|[ab]*a[ab]{600}d|[ab]*b[ab]{550}c"  # an RE2 call per entry
        err = await svc.grep(pattern)
        assert (await svc.info())["greps_running"] == 1  # answered while the thread is still inside its first RE2 call
        assert re.fullmatch(r"grep '.*' stopped after \d+\.\d\d s having searched the newest 0 of 40 entries; .*",
                            str(err)), err
        await await_for(lambda: svc._greps_running == 0, 30, "the grep's thread to stop after that call")
        assert (await svc.info())["greps_started"] == 1
    finally:
        svc.close()


async def test_request_ids_make_writes_idempotent(tmp_path):
    path = str(tmp_path / "b.jsonl")
    svc = BoardService(path)
    client = BoardClient(svc)
    a = await client.awrite(e("once", request_id="r-1"))
    b = await client.awrite(e("a retry with other text", request_id="r-1"))
    assert b == a and b.text == "once" and await client.alast_seq() == 1
    other = await client.awrite(e("same key, other writer", worker="w2", request_id="r-1"))
    assert other.seq == 2  # a request id is per writer
    # A call re-sent as is (what Ray does after the board restarted): the client gave the entry a key.
    wire = [wire_request(e("resent"))]
    first = entries_from_acks(wire, await svc.write_acks(wire))
    again = entries_from_acks(wire, await svc.write_acks(wire))
    assert first[0].seq == again[0].seq == 3 and again[0].text == "resent"
    svc.close()
    restarted = BoardService(path)  # the log reloaded: the keys are still known
    try:
        assert entries_from_acks(wire, await restarted.write_acks(wire))[0].seq == 3
        assert await restarted.last_seq() == 3
    finally:
        restarted.close()


async def test_claim_ttl_follows_the_time_scale(tmp_path):
    clock = Clock(1_700_000_000.0)
    svc = BoardService(str(tmp_path / "b.jsonl"), BoardLimits(claim_ttl_s=60), time_scale=600.0, clock=clock)
    mono = Clock(100.0)
    client = BoardClient(svc, clock=mono, wall=clock)
    try:
        assert (await svc.info())["claim_ttl_s"] == pytest.approx(0.1)  # 60 schedule seconds at x600
        await client.awrite(e("mine: parser.py", type="CLAIM"))
        await client.awrite(e("a fact"))
        assert [x.type.value for x in await client.arecent()] == ["CLAIM", "FACT"]
        clock.t += 0.2
        mono.t += client.view.RECENT_MAX_AGE_S  # the copy may answer for this long after a fetch
        assert [x.text for x in await client.arecent()] == ["a fact"]
        assert len(await client.agrep("parser")) == 1  # grep still finds it
    finally:
        svc.close()


async def test_fed_view_answers_without_a_call_and_falls_back_after_a_gap(tmp_path):
    """A host's copy of the recent view follows the board events its router delivers: reads then
    cost no call, show this process's own writes at once, drop CLAIMs past their TTL, and go back to
    the board when the stream has a gap or stops."""
    wall, mono = Clock(1_700_000_000.0), Clock(100.0)
    svc = BoardService(str(tmp_path / "b.jsonl"), BoardLimits(claim_ttl_s=3600), clock=wall)
    writer = BoardClient(svc, wall=wall)
    reader = BoardClient(svc, clock=mono, wall=wall)
    try:
        first = [await writer.awrite(e(f"before {i}")) for i in range(3)]
        assert [x.seq for x in await reader.arecent()] == [1, 2, 3]  # the first read fetches
        fetches = reader.fetch_counts()[0]
        claim = await writer.awrite(e("parser", type="CLAIM", worker="w2"))
        more = [claim] + [await writer.awrite(e(f"after {i}")) for i in range(2)]
        reader.observe(rows(first[1:] + more), more[-1].seq)  # a replayed entry is skipped
        mine = await reader.awrite(e("my own write", worker="w9"))  # not delivered yet, seen at once
        assert [x.seq for x in await reader.arecent()] == [1, 2, 3, 4, 5, 6, mine.seq]
        assert reader.fetch_counts()[0] == fetches  # ... without a call
        wall.t += 3601  # the CLAIM's TTL passes
        mono.t += 1
        reader.observe([], more[-1].seq)
        assert claim.seq not in [x.seq for x in await reader.arecent()] and reader.fetch_counts()[0] == fetches
        later = await writer.awrite(e("delivered late"))
        reader.observe(rows([later]), later.seq)  # skips `mine` (seq 7): a gap, the copy is not exact
        assert [x.seq for x in await reader.arecent()][-2:] == [mine.seq, later.seq]
        assert reader.fetch_counts()[0] == fetches + 1  # ... so that read asked the board
        # fed again from the fetch on, until deliveries stop for FED_MAX_AGE_S
        last = await writer.awrite(e("fed again"))
        reader.observe(rows([last]), last.seq)
        assert (await reader.arecent())[-1].seq == last.seq and reader.fetch_counts()[0] == fetches + 1
        mono.t += reader.view.FED_MAX_AGE_S
        assert (await reader.arecent())[-1].seq == last.seq and reader.fetch_counts()[0] == fetches + 2
    finally:
        svc.close()


async def test_concurrent_readers_share_one_fetch(service):
    mono = Clock(100.0)
    writer, reader = BoardClient(service), BoardClient(service, clock=mono)
    await writer.awrite_batch([e(f"entry {i}") for i in range(10)])
    views = await asyncio.gather(*(reader.arecent() for _ in range(64)))
    assert all([x.seq for x in v] == list(range(1, 11)) for v in views)
    fetches, got = reader.fetch_counts()
    assert fetches <= 2 and got == 10  # 64 readers, one or two small deltas
    await writer.awrite(e("newer"))
    assert (await reader.arecent())[-1].text == "entry 9"  # a young copy answers (RECENT_MAX_AGE_S)...
    mono.t += reader.view.RECENT_MAX_AGE_S
    assert (await reader.arecent())[-1].text == "newer"  # ... then the next read fetches
    assert reader.fetch_counts() == (fetches + 1, 11)  # only the new entry came


async def test_committed_entries_land_in_the_board_trace(tmp_path):
    svc = BoardService(str(tmp_path / "b.jsonl"), run_dir=str(tmp_path / "run"), run_id="t1")
    client = BoardClient(svc)
    await client.awrite(e("traced", detail="more"))
    await client.awrite_batch([e("also traced", type="CLAIM", worker="w2")])
    svc.close()
    files = await await_for(lambda: list((tmp_path / "run" / "trace" / "board").glob("*.parquet")), 10,
                            "the board trace files")
    table = pq.read_table(files).to_pylist()
    assert sorted((r["seq"], r["type"], r["text"], r["has_detail"], r["event_id"], r["run_id"]) for r in table) == [
        (1, "FACT", "traced", True, "board:1", "t1"), (2, "CLAIM", "also traced", False, "board:2", "t1")]


class LosesCalls:
    """The board service behind a remote that loses its first `n` calls of one method (never answers
    them), as Ray has done with calls in flight to an async actor that restarted."""

    def __init__(self, service: BoardService, method: str, n: int = 1) -> None:
        self.service, self.method, self.lost = service, method, n

    def __getattr__(self, name: str):
        real = getattr(self.service, name)
        if name != self.method:
            return real

        async def call(*args):
            if self.lost > 0:
                self.lost -= 1
                await asyncio.Event().wait()  # never answered
            return await real(*args)

        return call


async def test_a_lost_board_call_times_out_and_strands_no_other_caller(service):
    """A write whose call is never answered fails with BoardTimeout after the client's deadline, and
    the writes queued behind it in the process (the coalescer's senders) still go through; sent again,
    the lost write is written once. The same for a lost read."""
    writer = BoardClient(LosesCalls(service, "write_acks"), deadline_s=0.3)
    lost = e("lost in flight")
    first = asyncio.ensure_future(writer.awrite(lost))
    await asyncio.sleep(0.01)
    later = await asyncio.wait_for(asyncio.gather(*(writer.awrite(e(f"later {i}")) for i in range(5))), 5)
    assert [x.text for x in later] == [f"later {i}" for i in range(5)]
    with pytest.raises(BoardTimeout, match="did not answer a write within 0.3 s"):
        await first
    assert (await writer.awrite(lost)).text == "lost in flight"
    assert [x.text for x in service.board.since(0, 100)].count("lost in flight") == 1

    reader = BoardClient(LosesCalls(service, "recent_delta"), deadline_s=0.3)
    with pytest.raises(BoardTimeout, match="a read"):
        await reader.arecent()
    assert len(await reader.arecent()) == 6
    poller = BoardClient(LosesCalls(service, "wait_since_rows"), deadline_s=0.3)
    with pytest.raises(BoardTimeout, match="a long poll within 0.4 s"):
        await poller.await_since(6, timeout_s=0.1)
