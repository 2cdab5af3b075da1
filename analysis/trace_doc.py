"""docs/trace.md, generated from the trace row models (agensh_ray/trace/rows.py), so the
documentation of every table and column cannot drift from what the writers write.

    python -m agensh_ray.analysis.trace_doc --write    # rewrite docs/trace.md
    python -m agensh_ray.analysis.trace_doc            # exit 1 if it is stale
"""

from __future__ import annotations

import argparse
import inspect
import sys
from pathlib import Path

from agensh_ray.analysis.views import duck_type
from agensh_ray.paths import DOCS_DIR
from agensh_ray.trace import SCHEMA_VERSION, SCHEMAS, TABLES, TraceRow

DOC = DOCS_DIR / "trace.md"

_INTRO = """\
# The run trace

<!-- Generated from agensh_ray/trace/rows.py by `python -m agensh_ray.analysis.trace_doc --write`;
     tests/test_analysis.py fails when this file and the row models disagree. -->

Every event of a run lands in Parquet, one folder per table:
`runs/<run_id>/trace/<table>/<writer>-<pid>-<nonce>-<n>.parquet`. Each writer (an actor)
buffers its rows and writes a new file every 2 seconds, so a run can be queried while it
runs; `python -m agensh_ray.analysis.compact RUN_DIR` merges each writer's files afterwards.
`analysis/views.sql` defines two DuckDB views per table (every column below, typed; columns
that older files lack read as null): `<table>_rows` has every row as written, and `<table>`
one row per event. A row can be written twice (by two writers, or by an actor and the replay of
its durable log); rows equal in the table's *identity* columns (below; `event_id` unless said
otherwise) are copies of one event, and the `<table>` view keeps one of them. A row whose
`event_id` is empty has no identity and is always kept. `analysis/*.sql` answer questions
over the `<table>` views. Two different events never share an identity: each table's *Ids* (below)
say how its ids are made and why they cannot repeat within a run, across gateways, nodes, actor
restarts and resumed drivers (a counter that starts again in a new process carries a random id of
that process's life).

**When a process dies.** Three tables mirror a durable log: `board` (the board's `board.jsonl`),
`messages` (the chat's log) and `forge` (the forge's event log). Their owner writes the rows of
every logged entry no trace file holds yet when it starts (a restart included) and when it
closes, so after any actor's death, and at the end of a run, these tables hold each logged seq
exactly once. The other tables are what only an actor knew (turns, tool calls, deliveries,
usage, lifecycle): a writer killed with SIGKILL loses the rows it had not flushed, at most its
last 2 seconds (its flush interval). A driver killed with SIGKILL takes the actors down before
they close: then the three mirrored tables may lack their last 2 seconds too, until the next
reconciliation (a run resumed on the same folder, or `python -m agensh_ray.reconcile
RUN_DIR`, which replays the logs of the embedded board, chat and forge).

How the run ended is in `summary.json`, not in the trace: `"ended"` is `deadline`, `done`, `budget`
or `interrupted` (with `"signal"`, SIGINT or SIGTERM). An interrupted run stops in order, so every
writer closes and flushes its rows; a forced stop (a second signal, `"partial": true`) or a driver
SIGKILL kills the actors without closing them, and the rows they had buffered (at most the last 2
seconds of each) are not written.

Current schema version: **{version}** (column `schema_version` of every row).
{history}

Types are DuckDB's. `ts` and `enqueue_ts` are `TIMESTAMPTZ` (UTC, microseconds).

## Columns every table has

{common}
"""


def _doc(obj) -> str:
    return " ".join(inspect.cleandoc(obj.__doc__ or "").split())


def _rows(table: str | None, names: list[str]) -> str:
    model = TABLES[table] if table else TraceRow
    schema = SCHEMAS[table or "board"]
    lines = ["| column | type | null | meaning |", "|---|---|---|---|"]
    for name in names:
        field = schema.field(name)
        desc = (model.model_fields[name].description or "").replace("|", "\\|").replace("\n", " ")
        lines.append(f"| `{name}` | {duck_type(field.type)} | {'yes' if field.nullable else 'no'} | {desc} |")
    return "\n".join(lines)


def render() -> str:
    common = list(TraceRow.model_fields)
    out = [_INTRO.format(version=SCHEMA_VERSION, history=_schema_history(), common=_rows(None, common))]
    for table, model in TABLES.items():
        own = [n for n in model.model_fields if n not in common]
        ident = ", ".join(f"`{c}`" for c in model.identity)
        ids = f" Ids: {model.ids}" if model.ids else ""
        out.append(f"## `{table}`\n\n{_doc(model)}\n\nIdentity: {ident}.{ids}\n\n{_rows(table, own)}\n")
    return "\n".join(out)


def _schema_history() -> str:
    """The versions docstring under SCHEMA_VERSION in trace/rows.py, if any."""
    src = Path(sys.modules[TraceRow.__module__].__file__).read_text()
    head, sep, rest = src.partition("SCHEMA_VERSION = ")
    if not sep:
        return ""
    body = rest.split("\n", 1)[1].lstrip() if "\n" in rest else ""
    if not body.startswith('"""'):
        return ""
    text = body[3:].split('"""', 1)[0]  # the whole docstring: one line per version
    return "Versions: " + " ".join(line.strip() for line in text.splitlines() if line.strip())


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m agensh_ray.analysis.trace_doc", description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help=f"rewrite {DOC}")
    args = ap.parse_args(argv)
    if args.write:
        DOC.parent.mkdir(parents=True, exist_ok=True)
        DOC.write_text(render())
        print(f"wrote {DOC}")
    elif not DOC.is_file() or DOC.read_text() != render():
        raise SystemExit(f"{DOC} is stale: run python -m agensh_ray.analysis.trace_doc --write")
    else:
        print(f"{DOC} matches agensh_ray/trace/rows.py")


if __name__ == "__main__":
    main()
