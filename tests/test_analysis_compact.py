"""Compaction of a run's trace: fewer files, the same answers, safe to interrupt."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from agensh_ray.analysis.compact import JOURNAL, compact_run
from agensh_ray.analysis.views import connect, run_query
from agensh_ray.trace import BoardRow, LifecycleRow, TraceWriter, TurnRow

FIXTURES = Path(__file__).parent / "fixtures"


def answers(run: Path, queries=("roles", "idle", "hotspots", "merges")) -> dict:
    con = connect(run)
    return {q: sorted(map(repr, run_query(con, q)[1])) for q in queries}


def many_small_files(run: Path, flushes: int = 12) -> None:
    """What a writer without rolling windows (window_s=0, as before they existed) leaves: a file per flush."""
    shutil.copytree(FIXTURES / "run_small", run)
    w = TraceWriter(run, "host-h001", "run_small", flush_interval_s=0, window_s=0)
    for i in range(flushes):
        w.write(TurnRow(worker_id="w009", turn=i + 1, phase="start", trigger="events"))
        w.write(TurnRow(worker_id="w009", turn=i + 1, phase="end", stop_reason="end_turn"))
        w.write(BoardRow(worker_id="w009", seq=100 + i, type="FACT", text=f"fact {i}"))
        w.flush()
    w.write(LifecycleRow(worker_id="w009", event="started"))
    w.close()


def test_compaction_keeps_every_answer_with_fewer_files(tmp_path):
    run = tmp_path / "run"
    many_small_files(run)
    before = answers(run)
    res = compact_run(run, min_age_s=0)
    assert res["turns"] == (13, 2) and res["board"] == (13, 2)  # the fixture's file + one compacted file
    assert res["lifecycle"] == (2, 2)  # too few files to bother
    assert answers(run) == before
    assert compact_run(run, min_age_s=0)["turns"] == (2, 2)  # idempotent


def test_an_interrupted_compaction_is_finished_without_duplicates(tmp_path):
    run = tmp_path / "run"
    many_small_files(run)
    before = answers(run)
    folder = run / "trace" / "turns"
    sources = sorted(p.name for p in folder.glob("host-h001-*.parquet"))
    shutil.copytree(folder, tmp_path / "backup")
    compact_run(run, min_age_s=0)
    compacted = next(folder.glob("*-compact-*.parquet"))
    # as if it stopped after the rename: sources back, journal still there
    for name in sources:
        shutil.copy(tmp_path / "backup" / name, folder / name)
    (folder / JOURNAL).write_text(json.dumps({"final": compacted.name, "tmp": "." + compacted.name + ".tmp",
                                              "sources": sources}))
    compact_run(run, min_age_s=0)
    assert not (folder / JOURNAL).exists()
    assert answers(run) == before


def test_a_live_run_keeps_its_newest_files(tmp_path):
    run = tmp_path / "run"
    many_small_files(run)
    res = compact_run(run)  # no summary.json: only files older than 2 minutes
    assert res["turns"] == (13, 13)
