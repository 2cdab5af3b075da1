"""TraceWriter: one writer's (an actor's) rows, buffered by table and written to Parquet.

No central writer: whoever produces a row writes it, into
``<run_dir>/trace/<table>/<writer>-<pid>-<nonce>-<n>.parquet``. Files are rewritten atomically at
every flush (so DuckDB can query a run still in progress) and roll by time window or row count
(so a long run leaves few, large files). The columns and their types come from the row models
(agensh_ray.trace.rows). A run on an object store: the files are written to the local staging copy and
this process's mirror ships them (agensh_ray/mirror.py).
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from agensh_ray import mirror
from agensh_ray.trace.rows import SCHEMAS, TABLES, TraceRow

log = logging.getLogger(__name__)


class TraceWriter:
    """Buffers rows per table and writes Parquet files for one writer (an actor).

    Files roll: every flush (each ``flush_interval_s``, so a run in progress is
    queryable) rewrites the current window's file with all of the window's rows
    (atomically, by rename), and a new window file starts every ``window_s``
    seconds or ``max_rows`` rows. A 6-hour run thus leaves tens of files per
    writer and table, not thousands: DuckDB reads few, large files fast.
    Thread-safe; ``close()`` flushes what is left and is idempotent.
    """

    def __init__(
        self,
        run_dir: str | Path,
        writer: str,
        run_id: str,
        flush_interval_s: float = 2.0,
        max_rows: int = 50_000,
        window_s: float = 300.0,
    ):
        self.run_dir = Path(run_dir)
        self.root = self.run_dir / "trace"
        # Unique per process incarnation: a restarted actor never overwrites its predecessor's files.
        self.writer = f"{writer}-{os.getpid()}-{secrets.token_hex(2)}"
        self.run_id = run_id
        self.max_rows = max_rows
        self.window_s = window_s
        self._cols: dict[str, dict[str, list]] = {t: _empty_columns(t) for t in TABLES}
        """Rows not yet converted to Arrow, column by column (Arrow builds a table from columns about
        ten times faster than from row dicts, and the conversion holds the GIL)."""
        self._chunks: dict[str, list[pa.Table]] = {t: [] for t in TABLES}
        """The current window's rows already converted (each row is converted once, not once per flush)."""
        self._count: dict[str, int] = {t: 0 for t in TABLES}
        """Rows in the current window."""
        self._dirty: set[str] = set()
        self._window: dict[str, int] = {t: 0 for t in TABLES}
        self._window_start: dict[str, float] = {t: time.monotonic() for t in TABLES}
        self._lock = threading.Lock()
        self._io_lock = threading.Lock()
        self._closed = threading.Event()
        self._full = threading.Event()
        """A table's window is full: the flush thread rolls it now, not the writer (whose thread may be
        an actor's event loop, stalled for tens of ms by a 50,000-row Parquet write)."""
        self._mirror = mirror.attach(self.run_dir, f"trace/*/{self.writer}-*.parquet")
        """A run on an object store: this process's mirror ships these files (agensh_ray/mirror.py)."""
        self._thread = None
        if flush_interval_s > 0:
            self._thread = threading.Thread(
                target=self._flush_loop, args=(flush_interval_s,), name=f"trace-{writer}", daemon=True
            )
            self._thread.start()

    def write(self, row: TraceRow) -> None:
        self.write_fields(_TABLE_OF[type(row)], row.model_dump())

    def write_fields(self, table: str, data: dict) -> None:
        """A row given as its fields (the hot path of the board: its rows come from entries it has
        already validated, and a model per row would cost more than the write itself). Columns with a
        constant default may be left out; `ts` (a per-row default) must be given. `data` is taken over,
        not copied. The table's Arrow schema still types every column at the next flush."""
        data["run_id"] = self.run_id
        defaults = _DEFAULTS[table]
        with self._lock:
            columns = self._cols[table]
            if not data.keys() <= columns.keys():
                raise ValueError(f"trace table {table!r} has no column(s) {sorted(data.keys() - columns.keys())}")
            for name, column in columns.items():
                column.append(data[name] if name in data else defaults.get(name))
            self._dirty.add(table)
            self._count[table] += 1
            full = self._count[table] >= self.max_rows
        if full:
            if self._thread is not None and not self._closed.is_set():
                self._full.set()
            else:
                self.flush(table)

    def flush(self, only: str | None = None) -> None:
        with self._io_lock:  # one writer of the files at a time, in window order
            with self._lock:
                tables = [only] if only else list(TABLES)
                jobs = []
                now = time.monotonic()
                for table in tables:
                    if table not in self._dirty:
                        continue
                    self._dirty.discard(table)
                    cols, self._cols[table] = self._cols[table], _empty_columns(table)
                    if cols["run_id"]:
                        self._chunks[table].append(pa.Table.from_pydict(cols, schema=SCHEMAS[table]))
                    jobs.append((table, pa.concat_tables(self._chunks[table]), self._window[table]))
                    if self._count[table] >= self.max_rows or now - self._window_start[table] >= self.window_s:
                        self._chunks[table] = []
                        self._count[table] = 0
                        self._window[table] += 1
                        self._window_start[table] = now
            for table, arrow, n in jobs:
                self._write_file(table, arrow, n)

    def _write_file(self, table: str, arrow: pa.Table, n: int) -> None:
        folder = self.root / table
        folder.mkdir(parents=True, exist_ok=True)
        final = folder / f"{self.writer}-{n:05d}.parquet"
        tmp = folder / f".{final.name}.tmp"
        pq.write_table(arrow, tmp)
        tmp.replace(final)  # readers see the old or the new file, never half of one

    def _flush_loop(self, interval: float) -> None:
        while not self._closed.is_set():
            self._full.wait(interval)
            self._full.clear()
            if self._closed.is_set():
                return
            try:
                self.flush()
            except Exception:  # a failed flush must not kill the writer thread
                log.exception("trace flush failed for %s", self.writer)

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        self._full.set()  # wake the flush thread so it ends
        self.flush()
        if self._mirror is not None:  # what this process wrote, shipped now (bounded: the store may be away)
            self._mirror.flush(timeout_s=10.0)


_TABLE_OF = {model: table for table, model in TABLES.items()}
_DEFAULTS = {
    table: {name: f.default for name, f in model.model_fields.items() if f.default_factory is None and not f.is_required()}
    for table, model in TABLES.items()
}
"""The constant defaults of each table's columns (what `write_fields` fills in)."""


def _empty_columns(table: str) -> dict[str, list]:
    return {name: [] for name in SCHEMAS[table].names}


