"""Open a run's trace in DuckDB with the views of views.sql.

Tables the run never wrote get an empty view with the right columns (from
the row models in agensh_ray.trace), so every query runs on every run.
"""

from __future__ import annotations

import re
from pathlib import Path

import duckdb

from agensh_ray.trace import SCHEMAS

VIEWS_SQL = Path(__file__).with_name("views.sql")


def connect(run_dir: str | Path, con: duckdb.DuckDBPyConnection | None = None) -> duckdb.DuckDBPyConnection:
    run_dir = Path(run_dir)
    if not (run_dir / "trace").is_dir():
        raise FileNotFoundError(f"{run_dir} has no trace/ folder: is it a run folder (runs/<run_id>)?")
    con = con or duckdb.connect()
    con.execute("SET VARIABLE run_dir = ?", [str(run_dir)])
    sql = "\n".join(l for l in VIEWS_SQL.read_text().splitlines() if not l.strip().startswith("--"))
    for stmt in sql.split(";"):
        body = stmt.strip()
        if not body:
            continue
        table = re.search(r"VIEW (\w+) AS", body).group(1)
        if any((run_dir / "trace" / table).glob("*.parquet")):
            con.execute(body)
        else:
            cols = ", ".join(f"CAST(NULL AS {_duck(f.type)}) AS {f.name}" for f in SCHEMAS[table])
            con.execute(f"CREATE OR REPLACE VIEW {table} AS SELECT {cols} WHERE false")
    return con


def _duck(arrow_type) -> str:
    s = str(arrow_type)
    return {
        "int64": "BIGINT",
        "string": "VARCHAR",
        "double": "DOUBLE",
        "bool": "BOOLEAN",
    }.get(s, "TIMESTAMPTZ" if s.startswith("timestamp") else "VARCHAR")
