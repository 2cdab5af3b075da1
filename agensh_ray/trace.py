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
import re
import secrets
import threading
import time
import types
import typing
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, Field

from agensh_ray.models import now_us

log = logging.getLogger(__name__)

SCHEMA_VERSION = 2
"""1: first schema. 2: forge.verdict and the pr_changes table added (older files read with nulls there)."""


class TraceRow(BaseModel):
    """Columns every table has."""

    model_config = ConfigDict(use_attribute_docstrings=True)  # field docstrings document the trace (docs/trace.md)

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
    """One row per board entry, written by the BoardActor once the entry is durable."""

    seq: int
    """Board sequence number."""
    type: str
    """OBSERVED | FACT | FAIL | CLAIM | PATCH_SUMMARY."""
    text: str
    """The entry's text (CLAIM <= 100 chars, PATCH_SUMMARY <= 300)."""
    has_detail: bool = False
    """Whether the entry carries a longer detail (read with board_unfold)."""


class MessageRow(TraceRow):
    """One row per chat message (DM or task-channel post), written by the chat actor."""

    seq: int
    """Chat sequence number."""
    kind: str
    """dm | channel."""
    sender: str
    """Worker who sent it."""
    recipient: str | None = None
    """The DM's recipient; null for channel posts."""
    text: str
    """The message text."""


class ForgeRow(TraceRow):
    """One row per forge event, in forge order; `worker_id` is the actor (pusher, reviewer, merger, ...)."""

    seq: int
    """Forge event sequence number."""
    kind: str
    """push | pr_opened | pr_reviewed | pr_commented | pr_merged | pr_closed | merge_conflict | push_rejected."""
    pr: int | None = None
    """The pull request concerned; null for pushes to a branch with no PR."""
    pr_author: str | None = None
    """Who opened that PR (so a peer merge is kind = 'pr_merged' AND worker_id <> pr_author)."""
    ref: str | None = None
    """Branch (or full ref for pushes) concerned."""
    detail: str = ""
    """Human-readable detail: PR title, review verdict and body, comment, "conflicting files: a, b", ..."""
    verdict: str | None = None
    """pr_reviewed only: approve | comment | request_changes (schema 2; older rows: parse `detail`)."""


class TurnRow(TraceRow):
    """Two rows per agent turn (phase start and phase end), written by the worker's host."""

    turn: int
    """Turn number within the worker's life (1-based)."""
    phase: str
    """start | end."""
    trigger: str = ""
    """What started the turn: first | events | nudge | share_findings | wind_down | handoff."""
    stop_reason: str | None = None
    """ACP stop reason on end (end_turn, max_tokens, cancelled, refusal, ...) or error."""
    duration_ms: float | None = None
    """Turn length (end rows only)."""


class ToolCallRow(TraceRow):
    """One row per tool call: our infra tools (MCP) and the agent's own tools (as the agent reports them)."""

    tool: str
    """Tool name (infra tools over MCP) or the agent's own tool title."""
    source: str
    """mcp: one of our infra tools; agent: reported by the agent over ACP session/update."""
    tool_call_id: str = ""
    """The agent's id for the call (agent source), or "" ."""
    duration_ms: float | None = None
    """How long the call took, if known."""
    ok: bool = True
    """False if the call failed."""
    error: str | None = None
    """The error, if it failed."""
    turn: int | None = None
    """The worker's turn during which it ran."""


class UsageRow(TraceRow):
    """Token usage as the agent reports it (the sim agent reports none, so sim runs leave this table empty)."""

    turn: int
    """The worker's turn it belongs to."""
    input_tokens: int = 0
    """Input (prompt) tokens."""
    output_tokens: int = 0
    """Output (completion) tokens."""
    cost_usd: float = 0.0
    """Cost the agent reported, 0 if it reports none (analysis prices tokens with analysis/prices.csv)."""


class DeliveryRow(TraceRow):
    """One row per event delivered to a worker (the worker_id): board entries, DMs, nudges, ..."""

    kind: str
    """board | dm | channel | forge | nudge | share_findings | wind_down | summary."""
    priority: str
    """high (mid-turn) | low (next turn start)."""
    via: str
    """mid_turn (appended to a tool result) | turn_start (in the next prompt)."""
    enqueue_ts: int
    """When the router queued it (UTC microseconds)."""
    latency_ms: float
    """Delivery time minus enqueue time."""


class ScoreRow(TraceRow):
    """One row per scoring of main against the hidden tests, written by the driver."""

    checkpoint: str
    """periodic | final."""
    commit: str = ""
    """The main commit that was scored."""
    passed: int
    """Hidden tests passed."""
    total: int
    """Hidden tests run."""
    pass_rate: float
    """passed / total."""


class LifecycleRow(TraceRow):
    """One row per change in a worker's life (its agent process started, stopped, crashed, ...)."""

    event: str
    """started | stopped | crashed | restarted | gave_up."""
    detail: str = ""
    """Why, or the harness used."""
    host: str = ""
    """The host (WorkerActor) running it."""
    pid: int | None = None
    """The agent process id."""


class PrChangeRow(TraceRow):
    """The lines a PR changes, snapshotted by the forge actor when the PR is opened, merged or closed.

    One row per change block of the PR's diff (a run of removed and/or added lines, without
    context, as `git diff -U0` would show it); a file changed with no text hunk (binary, mode or
    rename only) gets one row with null line numbers. `worker_id` is the actor of the snapshot event.
    """

    pr: int
    """The pull request."""
    pr_author: str | None = None
    """Who opened it."""
    snapshot: str
    """The forge event that took the snapshot: pr_opened | pr_merged | pr_closed (event_id is that event's)."""
    path: str
    """File path (after the change; the old path for a deletion)."""
    status: str
    """What happened to the file: added | modified | deleted | renamed."""
    old_start: int | None = None
    """First old-side line the block removes; for a pure insertion, the old line it follows (0 = top)."""
    old_lines: int | None = None
    """Old-side lines removed (0 = pure insertion)."""
    new_start: int | None = None
    """First new-side line the block adds; for a pure deletion, the new line it follows."""
    new_lines: int | None = None
    """New-side lines added (0 = pure deletion)."""
    function: str = ""
    """The hunk's section heading from git (the enclosing function or class, by git's funcname rules), or ""."""


class IntakeRow(TraceRow):
    """A webhook the router intake refused (bad or missing signature, body too large); nothing else is done
    with it. Written by the forge actor, which hosts the intake (services/intake.py)."""

    source: str
    """The sender's address."""
    reason: str
    """Why it was refused."""
    delivery: str | None = None
    """The X-Gitea-Delivery id the request claimed, if any."""


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
    "pr_changes": PrChangeRow,
    "intake": IntakeRow,
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


def write_schema_files(run_dir: str | Path) -> None:
    """An empty `trace/<table>/_schema.parquet` per table: the DuckDB CLI's views
    (analysis/views.sql) need at least one file per table, and a run may never write
    some tables (the sim reports no usage). Call once when the run starts."""
    for table, schema in SCHEMAS.items():
        folder = Path(run_dir) / "trace" / table
        folder.mkdir(parents=True, exist_ok=True)
        if not (folder / "_schema.parquet").exists():
            pq.write_table(schema.empty_table(), folder / ".schema.tmp")
            (folder / ".schema.tmp").rename(folder / "_schema.parquet")


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
        self.root = Path(run_dir) / "trace"
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


_TABLE_OF = {model: table for table, model in TABLES.items()}
_DEFAULTS = {
    table: {name: f.default for name, f in model.model_fields.items() if f.default_factory is None and not f.is_required()}
    for table, model in TABLES.items()
}
"""The constant defaults of each table's columns (what `write_fields` fills in)."""


def _empty_columns(table: str) -> dict[str, list]:
    return {name: [] for name in SCHEMAS[table].names}


def _funcname(line: str) -> str:
    """git's default funcname rule (xdiff def_ff) on a diff line: the text if it starts with a
    letter, _ or $, cut at 80 bytes like git's heading buffer."""
    text = line[1:]
    if text[:1].isalpha() or text[:1] in ("_", "$"):
        return text.encode()[:80].decode(errors="ignore").rstrip()
    return ""


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@ ?(.*)$")


def diff_changes(diff: str, files: list[str] = ()) -> list[dict]:
    """The change blocks of a unified git diff, as PrChangeRow fields (path, status, old/new
    start and lines, function): what `git diff -U0` would print, read from a diff with context.
    A block's function is the nearest old-side line above it that git's default funcname rule
    accepts (starts with a letter, _ or $), else the hunk's heading. Paths in `files` that the
    (possibly truncated) diff does not show get one row with null line numbers."""
    out: list[dict] = []
    path = status = None
    function = ""
    old_no = new_no = 0
    block: dict | None = None
    seen: set[str] = set()
    file_rows = 0

    def end_block() -> None:
        nonlocal block
        if block is not None:
            out.append(block)
            block = None

    def end_file() -> None:
        end_block()
        if path is not None and file_rows == len(out):  # no text hunk: one file-level row
            out.append(dict(path=path, status=status, old_start=None, old_lines=None, new_start=None,
                            new_lines=None, function=""))

    for line in diff.splitlines():
        if line.startswith("diff --git "):
            end_file()
            a, _, b = line[len("diff --git a/"):].partition(" b/")
            path, status, function, file_rows = b or a, "modified", "", len(out)
            seen.add(path)
        elif path is None:
            continue
        elif line.startswith("new file mode"):
            status = "added"
        elif line.startswith("deleted file mode"):
            status = "deleted"
        elif line.startswith("rename to "):
            status = "renamed"
        elif line.startswith("--- ") or line.startswith("+++ "):
            name = line[4:].rstrip("\t")
            if name.startswith(("a/", "b/")) and (line.startswith("+++ ") or status == "deleted"):
                seen.discard(path)
                path = name[2:]
                seen.add(path)
        elif line.startswith("@@"):
            end_block()
            m = _HUNK.match(line)
            if m:
                old_no, new_no, function = int(m.group(1)), int(m.group(3)), m.group(5).rstrip()
                # git numbers an empty side's range from the line it follows; make it the next line
                if m.group(2) == "0":
                    old_no += 1
                if m.group(4) == "0":
                    new_no += 1
        elif line[:1] in ("-", "+"):
            if block is None:
                block = dict(path=path, status=status, old_start=old_no, old_lines=0, new_start=new_no,
                             new_lines=0, function=function)
            if line[0] == "-":
                block["old_lines"] += 1
                old_no += 1
                function = _funcname(line) or function
            else:
                block["new_lines"] += 1
                new_no += 1
        elif line[:1] == " ":
            end_block()
            old_no += 1
            new_no += 1
            function = _funcname(line) or function
    end_file()
    for row in out:  # -U0 convention: an empty side starts at the line it follows
        if row["old_lines"] == 0:
            row["old_start"] -= 1
        if row["new_lines"] == 0:
            row["new_start"] -= 1
    for f in files:
        if f not in seen:
            out.append(dict(path=f, status="modified", old_start=None, old_lines=None, new_start=None,
                            new_lines=None, function=""))
    return out
