"""The board actor through its facade, across processes: the blocking and async methods over Ray,
pickling, the named actor, and crash safety under SIGKILL. What the service and the client do on
their own (group commit, long poll, grep budget, the fed view) is tested without Ray in
tests/test_board_service.py."""

from __future__ import annotations

import asyncio
import os
import pickle
import signal
import threading
import uuid

import pytest

from agensh_ray.actors.board import BoardHandle, get_or_create_board
from agensh_ray.board import BoardLimits
from agensh_ray.errors import BoardError
from agensh_ray.models import BoardEntry, BoardEntryIn
from agensh_ray.wire import Row
from tests.support import wait_for


def e(text: str, type: str = "FACT", worker: str = "w1", **kw) -> BoardEntryIn:
    return BoardEntryIn(type=type, text=text, worker_id=worker, **kw)


@pytest.fixture
def board(ray_session, tmp_path):
    h = get_or_create_board(f"board-{uuid.uuid4().hex[:8]}", str(tmp_path / "board.jsonl"))
    yield h
    h.kill()


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


def test_async_facade_over_the_actor(board):
    """The client's coroutines over the actor handle (AsyncProxy): concurrent writes share calls and
    fsyncs, reads and refusals come back across the process boundary."""

    async def main():
        results = await asyncio.gather(*(board.awrite(e(f"concurrent {i}", worker=f"w{i}")) for i in range(40)))
        assert sorted(r.seq for r in results) == list(range(1, 41))
        info = await board.ainfo()
        assert info["entries_committed"] == 40 and info["commits"] < 40  # concurrent writes shared fsyncs
        assert len(await board.arecent()) == 40
        assert [x.seq for x in await board.asince(38)] == [39, 40]
        assert len(await board.agrep(r"concurrent \d+", limit=5)) == 5
        assert (await board.aunfold(1)).seq == 1
        assert await board.alast_seq() == 40
        with pytest.raises(BoardError):
            await board.awrite(e("", type="FACT"))
        waiter = asyncio.ensure_future(board.await_since(40, 10.0))
        (late,) = await board.awrite_batch([e("late")])
        assert [x.text for x in await waiter] == ["late"]
        # a router's deliveries keep this process's copy of the view current: reads cost no call
        fetches = board.fetch_counts()[0]
        board.observe([Row(late.seq, late.ts, "FACT", "late", "w1")], late.seq)
        assert (await board.arecent())[-1].seq == late.seq and board.fetch_counts()[0] == fetches

    asyncio.run(main())


def test_time_scale_and_limits_reach_the_actor(ray_session, tmp_path):
    h = get_or_create_board(f"board-{uuid.uuid4().hex[:8]}", str(tmp_path / "b.jsonl"),
                            limits=BoardLimits(claim_ttl_s=60), time_scale=600.0)
    try:
        info = h.info()
        assert info["claim_ttl_s"] == pytest.approx(0.1) and info["log_path"] == str(tmp_path / "b.jsonl")
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
        wait_for(lambda: len(acked) >= 30, 15, "the first acknowledged writes")
        pid = h.pid()
        os.kill(pid, signal.SIGKILL)
        before_kill = len(acked)
        # writers block until the actor is back, then keep going
        wait_for(lambda: len(acked) >= before_kill + 30, 20, "writes to resume after the restart")
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
