"""The run trace: every event of a run, as Parquet files written by whoever produced the row.

    rows.py    the row models (one per table), TABLES, SCHEMA_VERSION, their Arrow SCHEMAS,
               write_schema_files
    writer.py  TraceWriter: buffers one writer's rows and writes rolling Parquet files
    diff.py    diff_changes: a unified diff as the change blocks of the pr_changes table

The names below are the trace's public face: import them from `agensh_ray.trace`.
"""

from agensh_ray.trace.diff import diff_changes
from agensh_ray.trace.rows import (
    MODEL_ERROR,
    SCHEMA_VERSION,
    SCHEMAS,
    TABLES,
    BoardRow,
    ClockRow,
    DeliveryRow,
    ForgeRow,
    IntakeRow,
    LifecycleRow,
    LlmCallRow,
    MessageRow,
    PrChangeRow,
    ScoreRow,
    TestResultRow,
    ToolCallRow,
    TraceRow,
    TurnRow,
    UsageRow,
    arrow_schema,
    write_schema_files,
)
from agensh_ray.trace.writer import TraceWriter

__all__ = [
    "MODEL_ERROR",
    "SCHEMAS",
    "SCHEMA_VERSION",
    "TABLES",
    "BoardRow",
    "ClockRow",
    "DeliveryRow",
    "ForgeRow",
    "IntakeRow",
    "LifecycleRow",
    "LlmCallRow",
    "MessageRow",
    "PrChangeRow",
    "ScoreRow",
    "TestResultRow",
    "ToolCallRow",
    "TraceRow",
    "TraceWriter",
    "TurnRow",
    "UsageRow",
    "arrow_schema",
    "diff_changes",
    "write_schema_files",
]
