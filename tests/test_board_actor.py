"""The board actor through its facade: reads, long poll, errors, group commit, crash safety."""

from __future__ import annotations

import asyncio
import os
import pickle
import signal
import threading
import time
import uuid

import pytest
import ray

from agensh_ray.actors.board import BoardHandle, get_or_create_board
from agensh_ray.board import BoardLimits, Row
from agensh_ray.errors import BoardError
from agensh_ray.models import BoardEntry, BoardEntryIn


def e(text: str, type: str = "FACT", worker: str = "w1", **kw) -> BoardEntryIn:
    return BoardEntryIn(type=type, text=text, worker_id=worker, **kw)


@pytest.fixture
def board(ray_session, tmp_path):
    h = get_or_create_board(f"board-{uuid.uuid4().hex[:8]}", str(tmp_path / "board.jsonl"))
    yield h
    h.kill()


def wait_until(cond, timeout=15.0, step=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(step)
    return False


def test_write_and_read_through_facade(board):
    a = board.write(e("first fact", detail="the long story"))
    assert isinstance(a, BoardEntry) and a.seq == 1 and a.request_id  # facade added an idempotency key
    res = board.write_batch([e("second"), e("bad", type="NOPE"), e("third", type="CLAIM")])
    assert [r.seq if isinstance(r, BoardEntry) else "err" for r in res] == [2, "err", 3]
    assert "unknown entry type 'NOPE'" in str(res[1])
    assert [x.text for x in board.recent()] == ["first fact", "second", "third"]
    assert [x.seq for x in board.since(1)] == [2, 3]
    assert [x.seq for x in board.grep("FACT|third")] == [3, 1]
    assert board.unfold(1).detail == "the long story"
    assert board.last_seq() == 3
    # the facade is picklable (passed to other actors)
    h2 = pickle.loads(pickle.dumps(board))
    assert isinstance(h2, BoardHandle)
    assert h2.last_seq() == 3


def test_board_errors_cross_with_their_message(board):
    with pytest.raises(BoardError) as ei:
        board.write(e("x" * 143, type="CLAIM"))
    assert str(ei.value) == "CLAIM text is 143 characters; the limit is 100 (put the rest in detail)"
    with pytest.raises(BoardError) as ei:
        board.grep("(")
    assert str(ei.value).startswith("invalid pattern '(':") and "Traceback" not in str(ei.value)
    with pytest.raises(BoardError, match="^no board entry 42"):
        board.unfold(42)


def test_wait_since_wakes_on_write(board):
    t0 = time.monotonic()
    assert board.wait_since(0, timeout_s=0.3) == []
    assert time.monotonic() - t0 >= 0.25
    ref = board.actor.wait_since.remote(0, 15.0, 100)
    time.sleep(0.2)
    t1 = time.monotonic()
    board.write(e("wake up"))
    got = ray.get(ref, timeout=15)
    assert [x.text for x in got] == ["wake up"]
    assert time.monotonic() - t1 < 5
    # already-available entries come back at once
    assert [x.seq for x in board.wait_since(0, timeout_s=10)] == [1]


def test_async_facade_and_group_commit(board):
    async def main():
        results = await asyncio.gather(*(board.awrite(e(f"concurrent {i}", worker=f"w{i}")) for i in range(40)))
        assert sorted(r.seq for r in results) == list(range(1, 41))
        info = await board.actor.info.remote()
        assert info["entries_committed"] == 40 and info["commits"] < 40  # concurrent writes shared fsyncs
        assert len(await board.arecent()) == 40
        assert [x.seq for x in await board.asince(38)] == [39, 40]
        assert len(await board.agrep(r"concurrent \d+", limit=5)) == 5
        assert (await board.aunfold(1)).seq == 1
        with pytest.raises(BoardError):
            await board.awrite(e("", type="FACT"))
        waiter = asyncio.ensure_future(board.await_since(40, 10.0))
        await asyncio.sleep(0.1)
        await board.awrite_batch([e("late")])
        assert [x.text for x in await waiter] == ["late"]

    asyncio.run(main())


def test_claim_ttl_with_scaled_clock(ray_session, tmp_path):
    h = get_or_create_board(
        f"board-{uuid.uuid4().hex[:8]}",
        str(tmp_path / "b.jsonl"),
        limits=BoardLimits(claim_ttl_s=60),
        time_scale=600.0,  # 60 board seconds pass in 0.1 s
    )
    try:
        h.write(e("mine: parser.py", type="CLAIM"))
        h.write(e("a fact"))
        assert wait_until(lambda: [x.text for x in h.recent()] == ["a fact"], timeout=10)
        assert len(h.grep("parser")) == 1
    finally:
        h.kill()


def test_get_or_create_returns_same_actor(ray_session, tmp_path):
    name = f"board-{uuid.uuid4().hex[:8]}"
    h1 = get_or_create_board(name, str(tmp_path / "b.jsonl"))
    try:
        h1.write(e("hello"))
        h2 = get_or_create_board(name, str(tmp_path / "b.jsonl"))
        assert h2.pid() == h1.pid() and h2.last_seq() == 1
    finally:
        h1.kill()


def test_sigkill_mid_stream_loses_nothing_acknowledged(ray_session, tmp_path):
    h = get_or_create_board(f"board-{uuid.uuid4().hex[:8]}", str(tmp_path / "board.jsonl"))
    acked: dict[str, int] = {}
    errors: list[BaseException] = []
    stop = threading.Event()

    def writer(wid: str) -> None:
        i = 0
        try:
            while not stop.is_set():
                rid = f"{wid}-{i}"
                batch = [e(f"{wid} entry {i}", worker=wid, request_id=rid)]
                if i % 3 == 0:  # some batches of several entries
                    batch += [e(f"{wid} entry {i}.{k}", worker=wid, request_id=f"{rid}.{k}") for k in range(3)]
                for r in h.write_batch(batch):
                    assert isinstance(r, BoardEntry), r
                    acked[r.request_id] = r.seq
                i += 1
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(f"w{k}",), daemon=True) for k in range(3)]
    for t in threads:
        t.start()
    try:
        assert wait_until(lambda: len(acked) >= 30, timeout=15), "no writes acknowledged"
        pid = h.pid()
        os.kill(pid, signal.SIGKILL)
        before_kill = len(acked)
        # writers block until the actor is back, then keep going
        assert wait_until(lambda: len(acked) >= before_kill + 30, timeout=20), "writes did not resume after restart"
        assert h.pid() != pid
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=20)
    try:
        assert not errors, errors
        entries = h.since(0, limit=1_000_000)
        seqs = [x.seq for x in entries]
        assert len(seqs) == len(set(seqs)) and seqs == sorted(seqs)
        by_rid: dict[str, list[int]] = {}
        for x in entries:
            by_rid.setdefault(x.request_id, []).append(x.seq)
        for rid, seq in acked.items():
            assert by_rid.get(rid) == [seq], (rid, seq, by_rid.get(rid))
        assert all(len(v) == 1 for v in by_rid.values())
    finally:
        h.kill()


def test_slow_grep_is_stopped_and_says_how_far_it_got(ray_session, tmp_path):
    h = get_or_create_board(f"board-{uuid.uuid4().hex[:8]}", str(tmp_path / "b.jsonl"),
                            limits=BoardLimits(grep_budget_s=0.0))
    try:
        h.write_batch([e(f"entry {i}") for i in range(3000)])
        with pytest.raises(BoardError, match=r"stopped after 0 s having searched the newest [\d,]+ of 3,000 entries"):
            h.grep(r"[xyz]{3}\d")  # no literal: a regex scan of every block
        assert [x.seq for x in h.grep("entry", limit=2)] == [3000, 2999]  # done inside the first block
    finally:
        h.kill()


def test_recent_view_fed_by_deliveries_answers_without_calls(ray_session, tmp_path):
    """A host's copy of the recent view follows the board events its router delivers: reads then
    cost no call, show this process's own writes at once, drop CLAIMs past their TTL, and go back to
    the board when the stream has a gap or stops."""
    writer = get_or_create_board(f"fed-{uuid.uuid4().hex[:6]}", tmp_path / "b.jsonl", time_scale=3600.0)  # TTL 1 s
    reader = BoardHandle(writer.actor, name=writer.name)

    def rows(entries):
        return [Row(x.seq, x.ts, x.type.value, x.text, x.worker_id, x.has_detail) for x in entries]

    async def main():
        first = [await writer.awrite(e(f"before {i}")) for i in range(3)]
        assert [x.seq for x in await reader.arecent()] == [1, 2, 3]  # the first read fetches
        fetches = reader._reader.fetches
        claim = await writer.awrite(e("parser", type="CLAIM", worker="w2"))
        more = [claim] + [await writer.awrite(e(f"after {i}")) for i in range(2)]
        reader.observe(rows(first[1:] + more), more[-1].seq)  # a replayed entry is skipped
        mine = await reader.awrite(e("my own write", worker="w9"))  # not delivered yet, seen at once
        view = await reader.arecent()
        assert [x.seq for x in view] == [1, 2, 3, 4, 5, 6, mine.seq] and reader._reader.fetches == fetches
        await asyncio.sleep(1.2)  # the CLAIM's TTL (1 schedule hour at x3600) passes
        reader.observe([], more[-1].seq)
        assert claim.seq not in [x.seq for x in await reader.arecent()] and reader._reader.fetches == fetches
        later = await writer.awrite(e("delivered late"))
        reader.observe(rows([later]), later.seq)  # skips `mine` (seq 7): a gap, the copy is not exact
        assert [x.seq for x in await reader.arecent()][-2:] == [mine.seq, later.seq]
        assert reader._reader.fetches == fetches + 1  # ... so that read asked the board

    asyncio.run(main())
