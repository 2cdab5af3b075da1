"""The run trace: one pydantic row model per table, written to Parquet by
whoever produced the row (no central writer).

Layout: ``<run_dir>/trace/<table>/<writer>-<n>.parquet``. Each writer buffers
rows and flushes a new file every ``flush_interval_s`` seconds (so DuckDB can
query a run still in progress) or when a table's buffer reaches ``max_rows``.
The Arrow schema of every table is derived from its row model, so the models
below are the single documentation of the trace's columns.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
import types
import typing
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, Field

from agensh_ray.models import now_us

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1


class TraceRow(BaseModel):
    """Columns every table has."""

    run_id: str = ""
    """The run this row belongs to (filled in by the writer)."""
    ts: int = Field(default_factory=now_us)
    """When it happened, UTC microseconds (stored as timestamp[us, UTC])."""
    worker_id: str | None = None
    """The worker concerned, if any."""
    event_id: str = ""
    """Idempotent id of the event this row records (e.g. board:17, chat:4)."""
    schema_version: int = SCHEMA_VERSION
    """Version of this trace schema."""


class BoardRow(TraceRow):
    seq: int
    """Board sequence number."""
    type: str
    """OBSERVED | FACT | FAIL | CLAIM | PATCH_SUMMARY."""
    text: str
    has_detail: bool = False


class MessageRow(TraceRow):
    seq: int
    kind: str
    """dm | channel."""
    sender: str
    recipient: str | None = None
    """The DM's recipient; null for channel posts."""
    text: str


class ForgeRow(TraceRow):
    seq: int
    kind: str
    """push | pr_opened | pr_reviewed | pr_commented | pr_merged | pr_closed | merge_conflict | push_rejected."""
    pr: int | None = None
    pr_author: str | None = None
    ref: str | None = None
    detail: str = ""


class TurnRow(TraceRow):
    turn: int
    """Turn number within the worker's life (1-based)."""
    phase: str
    """start | end."""
    trigger: str = ""
    """What started the turn: first | events | nudge | share_findings | wind_down | handoff."""
    stop_reason: str | None = None
    """ACP stop reason on end (end_turn, max_tokens, cancelled, refusal, ...) or error."""
    duration_ms: float | None = None


class ToolCallRow(TraceRow):
    tool: str
    """Tool name (infra tools over MCP) or the agent's own tool title."""
    source: str
    """mcp: one of our infra tools; agent: reported by the agent over ACP session/update."""
    tool_call_id: str = ""
    duration_ms: float | None = None
    ok: bool = True
    error: str | None = None
    turn: int | None = None


class UsageRow(TraceRow):
    turn: int
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0


class DeliveryRow(TraceRow):
    kind: str
    """board | dm | channel | forge | nudge | share_findings | wind_down | summary."""
    priority: str
    """high (mid-turn) | low (next turn start)."""
    via: str
    """mid_turn (appended to a tool result) | turn_start (in the next prompt)."""
    enqueue_ts: int
    """When the router queued it (UTC microseconds)."""
    latency_ms: float


class ScoreRow(TraceRow):
    checkpoint: str
    """periodic | final."""
    commit: str = ""
    passed: int
    total: int
    pass_rate: float


class LifecycleRow(TraceRow):
    event: str
    """started | stopped | crashed | restarted | gave_up."""
    detail: str = ""
    host: str = ""
    pid: int | None = None


TABLES: dict[str, type[TraceRow]] = {
    "board": BoardRow,
    "messages": MessageRow,
    "forge": ForgeRow,
    "turns": TurnRow,
    "tool_calls": ToolCallRow,
    "usage": UsageRow,
    "deliveries": DeliveryRow,
    "scores": ScoreRow,
    "lifecycle": LifecycleRow,
}

_ARROW = {int: pa.int64(), str: pa.string(), float: pa.float64(), bool: pa.bool_()}
_TS_COLUMNS = {"ts", "enqueue_ts"}


def arrow_schema(model: type[TraceRow]) -> pa.Schema:
    """The Parquet schema of a table, derived from its row model."""
    fields = []
    for name, info in model.model_fields.items():
        ann = info.annotation
        nullable = False
        if isinstance(ann, types.UnionType) or typing.get_origin(ann) is typing.Union:
            args = [a for a in typing.get_args(ann) if a is not type(None)]
            nullable = True
            ann = args[0]
        typ = pa.timestamp("us", tz="UTC") if name in _TS_COLUMNS else _ARROW[ann]
        fields.append(pa.field(name, typ, nullable=nullable))
    return pa.schema(fields)


SCHEMAS = {table: arrow_schema(model) for table, model in TABLES.items()}


class TraceWriter:
    """Buffers rows per table and writes Parquet files for one writer (an actor).

    Thread-safe; a daemon thread flushes every ``flush_interval_s``. ``close()``
    flushes what is left and is idempotent.
    """

    def __init__(
        self, run_dir: str | Path, writer: str, run_id: str, flush_interval_s: float = 2.0, max_rows: int = 20_000
    ):
        self.root = Path(run_dir) / "trace"
        # Unique per process incarnation: a restarted actor never overwrites its predecessor's files.
        self.writer = f"{writer}-{os.getpid()}-{secrets.token_hex(2)}"
        self.run_id = run_id
        self.max_rows = max_rows
        self._buffers: dict[str, list[dict]] = {t: [] for t in TABLES}
        self._counts: dict[str, int] = {t: 0 for t in TABLES}
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._thread = None
        if flush_interval_s > 0:
            self._thread = threading.Thread(
                target=self._flush_loop, args=(flush_interval_s,), name=f"trace-{writer}", daemon=True
            )
            self._thread.start()

    def write(self, row: TraceRow) -> None:
        table = _TABLE_OF[type(row)]
        data = row.model_dump()
        data["run_id"] = self.run_id
        with self._lock:
            buf = self._buffers[table]
            buf.append(data)
            full = len(buf) >= self.max_rows
        if full:
            self.flush(table)

    def flush(self, only: str | None = None) -> None:
        with self._lock:
            tables = [only] if only else list(TABLES)
            batches = []
            for table in tables:
                rows = self._buffers[table]
                if not rows:
                    continue
                self._buffers[table] = []
                n = self._counts[table]
                self._counts[table] += 1
                batches.append((table, rows, n))
        for table, rows, n in batches:
            self._write_file(table, rows, n)

    def _write_file(self, table: str, rows: list[dict], n: int) -> None:
        folder = self.root / table
        folder.mkdir(parents=True, exist_ok=True)
        schema = SCHEMAS[table]
        arrow = pa.Table.from_pylist(rows, schema=schema)
        final = folder / f"{self.writer}-{n:05d}.parquet"
        tmp = folder / f".{final.name}.tmp"
        pq.write_table(arrow, tmp)
        tmp.rename(final)  # readers never see a half-written file

    def _flush_loop(self, interval: float) -> None:
        while not self._closed.wait(interval):
            try:
                self.flush()
            except Exception:  # a failed flush must not kill the writer thread
                log.exception("trace flush failed for %s", self.writer)

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        self.flush()


_TABLE_OF = {model: table for table, model in TABLES.items()}
