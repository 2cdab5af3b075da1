"""The trace reconciled from the durable logs (no Ray): the board, chat and forge each write, at start
and at close, the rows of logged entries no trace file holds; `python -m agensh_ray.reconcile` does
it for a run whose driver was killed. Exactly once, whatever was lost, and idempotent."""

from __future__ import annotations

import asyncio
import json

import pyarrow.parquet as pq

from agensh_ray.board import BoardService
from agensh_ray.models import BoardEntryIn
from agensh_ray.reconcile import main, reconcile_run
from agensh_ray.services.chat.embedded import EmbeddedChat
from agensh_ray.services.chat.feed import ChatFeed
from agensh_ray.services.forge.embedded import EmbeddedForge
from agensh_ray.services.forge.traced import ForgeTracer
from agensh_ray.trace import BoardRow, TraceWriter
from agensh_ray.trace.reconcile import missing_seqs, traced_seqs


def _seqs(run_dir, table):
    out = []
    for path in sorted((run_dir / "trace" / table).glob("*.parquet")):
        out += pq.read_table(path, columns=["seq"]).column("seq").to_pylist()
    return sorted(out)


def _make_run(run_dir, starter):
    """A run folder with a board, chat and forge log of a few entries each, fully traced."""
    board = BoardService(str(run_dir / "board" / "board.jsonl"), run_dir=str(run_dir), run_id="r")

    async def write():
        for i in range(6):
            await board.write(BoardEntryIn(worker_id="w001", type="FACT", text=f"fact {i}"))
    asyncio.run(write())
    board.close()
    chat = ChatFeed(EmbeddedChat(run_dir / "chat"), TraceWriter(run_dir, "chat", "r"))
    for u in ("w001", "w002"):
        chat.add_user(u)

    async def talk():
        await chat.post("w001", "hello")
        await chat.dm("w001", "w002", "take tac?")
        await chat.dm("w002", "w001", "yes")
    asyncio.run(talk())
    chat.close()
    (starter / "README.md").write_text("starter\n")
    forge = EmbeddedForge(run_dir / "forge")
    forge.init_repo(starter, "the task", "build it")
    forge.add_user("w001")
    tracer = ForgeTracer(forge, TraceWriter(run_dir, "forge", "r"))
    tracer.close()
    return run_dir


def test_each_owner_writes_what_the_trace_lacks_exactly_once(tmp_path):
    run_dir = _make_run(tmp_path / "run", tmp_path)
    logged = {t: _seqs(run_dir, t) for t in ("board", "messages", "forge")}
    assert logged["board"] == [1, 2, 3, 4, 5, 6] and logged["messages"] == [1, 2, 3]
    # what a SIGKILL between commit and flush loses: some of the files
    for table in ("board", "messages", "forge"):
        for path in (run_dir / "trace" / table).glob("*.parquet"):
            path.unlink()
    assert traced_seqs(run_dir, "board") == set()
    assert missing_seqs(run_dir, "board", [1, 2, 3]) == [1, 2, 3]

    added = reconcile_run(run_dir)
    assert added == {"board": 6, "messages": 3, "forge": len(logged["forge"])}
    for table, seqs in logged.items():
        assert _seqs(run_dir, table) == seqs, table
    assert reconcile_run(run_dir) == {"board": 0, "messages": 0, "forge": 0}  # idempotent
    for table, seqs in logged.items():
        assert _seqs(run_dir, table) == seqs, table


def test_a_restarted_board_writes_only_the_missing_rows(tmp_path):
    run_dir = tmp_path / "run"
    board = BoardService(str(run_dir / "board" / "board.jsonl"), run_dir=str(run_dir), run_id="r")

    async def write(n):
        return [await board.write(BoardEntryIn(worker_id="w001", type="FACT", text=f"fact {i}")) for i in range(n)]
    entries = asyncio.run(write(7))
    board.close()
    # the predecessor flushed the rows of seqs 1-4 and died with 5-7 in its buffer
    for path in (run_dir / "trace" / "board").glob("*.parquet"):
        path.unlink()
    old = TraceWriter(run_dir, "board", "r", flush_interval_s=0)
    for e in entries[:4]:
        old.write(BoardRow(ts=e.ts, worker_id=e.worker_id, event_id=e.event_id, seq=e.seq, type=e.type.value,
                           text=e.text))
    old.close()
    again = BoardService(str(run_dir / "board" / "board.jsonl"), run_dir=str(run_dir), run_id="r")
    assert again.reconciled == 3
    again.close()
    assert _seqs(run_dir, "board") == list(range(1, 8))


def test_the_command_line(tmp_path, capsys):
    run_dir = _make_run(tmp_path / "run", tmp_path)
    assert main([str(run_dir)]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == {"board": 0, "messages": 0, "forge": 0}
    empty = tmp_path / "empty"
    empty.mkdir()
    import pytest

    with pytest.raises(SystemExit) as e:
        main([str(empty)])
    assert e.value.code == 2
    assert "holds no board, chat or forge log" in capsys.readouterr().err
