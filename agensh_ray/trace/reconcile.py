"""The trace made to agree with a durable log: the seqs a table already holds, and what is missing.

Three tables mirror a durable log: `board` (the board's `board.jsonl`), `messages` (the chat's log)
and `forge` (the forge's event log). Their rows are written by the actor that owns the log, from
memory, and flushed every few seconds: an actor that dies takes its unflushed rows with it, while
the log kept the entries. So whoever owns a log (the actor at construction, which is also its
restart, and at close) asks `missing_seqs` which of the log's seqs no Parquet file of the table
holds yet, and writes exactly those. Idempotent: run twice, the second run writes nothing.

Read from the files on disk, never from a writer's buffer: call it after the owner's own writer
has flushed (or before it has written anything, at construction).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

import pyarrow.parquet as pq

log = logging.getLogger(__name__)


def traced_seqs(run_dir: str | Path, table: str) -> set[int]:
    """The `seq` values in every Parquet file of `table` in the run's trace (unreadable files skipped,
    with a warning: a file is written to a temporary name and renamed, so a torn one is not expected)."""
    folder = Path(run_dir) / "trace" / table
    seqs: set[int] = set()
    for path in sorted(folder.glob("*.parquet")) if folder.is_dir() else []:
        if path.name.startswith("."):
            continue
        try:
            column = pq.read_table(path, columns=["seq"]).column("seq")
        except Exception as exc:  # a file being replaced: the next reconciliation sees it
            log.warning("cannot read %s while reconciling the trace: %s", path, exc)
            continue
        seqs.update(s for s in column.to_pylist() if s is not None)
    return seqs


def missing_seqs(run_dir: str | Path, table: str, logged: Iterable[int]) -> list[int]:
    """The seqs of `logged` (what the durable log holds) that `table` does not hold yet, in order."""
    have = traced_seqs(run_dir, table)
    return sorted(s for s in set(logged) if s not in have)
