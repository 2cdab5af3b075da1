"""Open a run's trace in DuckDB with the views of views.sql, and run the
question files (analysis/*.sql) over it.

views.sql has two parts: one view per trace table, generated from the row
models in agensh_ray.trace (`python -m agensh_ray.analysis.views --write` rewrites that
part; a test fails when it is stale), then hand-written derived views (the run,
its PRs, its workers and their roles). A table the run never wrote gets an
empty view with the right columns, so every query runs on every run, finished
or still in progress.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import duckdb

from agensh_ray.trace import SCHEMAS

HERE = Path(__file__).parent
VIEWS_SQL = HERE / "views.sql"
PRICES_CSV = HERE / "prices.csv"
BEGIN = "-- BEGIN GENERATED TABLE VIEWS"
END = "-- END GENERATED TABLE VIEWS"

_DUCK = {"int64": "BIGINT", "string": "VARCHAR", "double": "DOUBLE", "bool": "BOOLEAN"}

_DEFAULT_CONFIG = (
    "CREATE OR REPLACE VIEW run_config AS SELECT CAST(NULL AS BIGINT) AS workers, "
    "CAST(NULL AS VARCHAR) AS harness, CAST(1.0 AS DOUBLE) AS time_scale, CAST(NULL AS DOUBLE) AS minutes"
)


def duck_type(arrow_type) -> str:
    s = str(arrow_type)
    return _DUCK.get(s, "TIMESTAMPTZ" if s.startswith("timestamp") else "VARCHAR")


def empty_select(table: str) -> str:
    """A zero-row SELECT with the table's columns and types."""
    cols = ", ".join(f"CAST(NULL AS {duck_type(f.type)}) AS {f.name}" for f in SCHEMAS[table])
    return f"SELECT {cols} WHERE false"


def table_view(table: str) -> str:
    """The view over one table's Parquet files: every column of the current schema, typed,
    null where older files lack it (UNION ALL BY NAME with a typed empty row set)."""
    names = ", ".join(f.name for f in SCHEMAS[table])
    return (
        f"CREATE OR REPLACE VIEW {table} AS\n"
        f"SELECT {names} FROM (\n"
        f"    {empty_select(table)}\n"
        f"    UNION ALL BY NAME\n"
        f"    SELECT * FROM read_parquet(getvariable('run_dir') || '/trace/{table}/*.parquet', union_by_name = true)\n"
        f");"
    )


def generated_section() -> str:
    return "\n\n".join(table_view(t) for t in SCHEMAS)


def _split_generated(text: str) -> tuple[str, str, str]:
    head, sep, rest = text.partition(BEGIN + "\n")
    body, sep2, tail = rest.partition(END + "\n")
    if not sep or not sep2:
        raise ValueError(f"{VIEWS_SQL} lacks the {BEGIN!r} / {END!r} markers")
    return head, body, tail


def write_views_sql() -> None:
    head, _, tail = _split_generated(VIEWS_SQL.read_text())
    VIEWS_SQL.write_text(f"{head}{BEGIN}\n{generated_section()}\n{END}\n{tail}")


def views_sql_is_current() -> bool:
    _, body, _ = _split_generated(VIEWS_SQL.read_text())
    return body.strip() == generated_section().strip()


def statements(sql: str) -> list[str]:
    """The statements of a SQL file: full-line `--` comments dropped, split at a `;` ending a line."""
    text = "\n".join(line for line in sql.splitlines() if not line.strip().startswith("--"))
    return [s.strip() for s in re.split(r";[ \t]*(?:\n|$)", text) if s.strip()]


def connect(
    run_dir: str | Path,
    con: duckdb.DuckDBPyConnection | None = None,
    prices: str | Path | None = None,
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with the trace views of `run_dir` (a runs/<run_id> folder).

    `prices` is the price table (CSV: model, input_usd_per_mtok, output_usd_per_mtok); default
    analysis/prices.csv.
    """
    run_dir = Path(run_dir)
    if not (run_dir / "trace").is_dir():
        raise FileNotFoundError(f"{run_dir} has no trace/ folder: is it a run folder (runs/<run_id>)?")
    con = con or duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")  # timestamps come back in UTC
    con.execute("SET VARIABLE run_dir = ?", [str(run_dir)])
    con.execute("SET VARIABLE prices = ?", [str(prices or PRICES_CSV)])
    for body in statements(VIEWS_SQL.read_text()):
        m = re.match(r"CREATE OR REPLACE VIEW (\w+) AS", body)
        name = m.group(1) if m else None
        if name in SCHEMAS and not any((run_dir / "trace" / name).glob("*.parquet")):
            body = f"CREATE OR REPLACE VIEW {name} AS {empty_select(name)}"
        elif name == "run_config" and not (run_dir / "config.json").is_file():
            body = _DEFAULT_CONFIG
        con.execute(body)
    return con


def query_names() -> list[str]:
    """The question files, in report order (every analysis/*.sql but views.sql)."""
    return sorted(p.stem for p in HERE.glob("*.sql") if p.name != "views.sql")


def query_sql(name: str) -> str:
    path = HERE / f"{name}.sql"
    if not path.is_file():
        raise KeyError(f"no query {name!r}; known: {', '.join(query_names())}")
    return path.read_text()


def run_query(con: duckdb.DuckDBPyConnection, name: str) -> tuple[list[str], list[tuple]]:
    """Column names and rows of one question file (its last statement)."""
    stmts = statements(query_sql(name))
    for s in stmts[:-1]:
        con.execute(s)
    cur = con.execute(stmts[-1])
    cols = [d[0] for d in cur.description]
    return cols, cur.fetchall()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m agensh_ray.analysis.views",
        description="Rewrite the generated table views of analysis/views.sql from agensh_ray/trace/rows.py, "
        "or check that they are current.",
    )
    ap.add_argument("--write", action="store_true", help="rewrite the generated part of views.sql")
    args = ap.parse_args(argv)
    if args.write:
        write_views_sql()
        print(f"wrote {VIEWS_SQL}")
    elif not views_sql_is_current():
        raise SystemExit(f"{VIEWS_SQL} is stale: run python -m agensh_ray.analysis.views --write")
    else:
        print(f"{VIEWS_SQL} matches agensh_ray/trace/rows.py")


if __name__ == "__main__":
    main()
