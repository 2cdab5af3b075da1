"""Open a run's trace in DuckDB with the views of views.sql, and run the
question files (analysis/*.sql) over it.

views.sql has two parts: two views per trace table, generated from the row
models in agensh_ray.trace (`python -m agensh_ray.analysis.views --write` rewrites that
part; a test fails when it is stale): `<table>_rows`, every row as written, and
`<table>`, one row per event (copies written twice collapse by the table's identity
columns, event_id first); then hand-written derived views (the run, its workers, its
PRs, the workers' activity and roles). A table the run never wrote gets an empty view
with the right columns, so every query runs on every run, finished or still in
progress. The question files read only the deduplicated views.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import duckdb

from agensh_ray.board.leases import CLAIM_FLOOR_WALL_S, CLAIM_RULES, claim_life_wall_s
from agensh_ray.config import worker_ids
from agensh_ray.errors import RunFolderError
from agensh_ray.storage import fetch_run
from agensh_ray.trace import SCHEMAS, TABLES

HERE = Path(__file__).parent
VIEWS_SQL = HERE / "views.sql"
PRICES_CSV = HERE / "prices.csv"
BEGIN = "-- BEGIN GENERATED TABLE VIEWS"
END = "-- END GENERATED TABLE VIEWS"

_DUCK = {"int64": "BIGINT", "string": "VARCHAR", "double": "DOUBLE", "bool": "BOOLEAN"}



def duck_type(arrow_type) -> str:
    s = str(arrow_type)
    return _DUCK.get(s, "TIMESTAMPTZ" if s.startswith("timestamp") else "VARCHAR")


def empty_select(table: str) -> str:
    """A zero-row SELECT with the table's columns and types."""
    cols = ", ".join(f"CAST(NULL AS {duck_type(f.type)}) AS {f.name}" for f in SCHEMAS[table])
    return f"SELECT {cols} WHERE false"


def table_view(table: str) -> str:
    """Two views per table: `<table>_rows`, every row of its Parquet files as written (every column of
    the current schema, typed, null where older files lack it: UNION ALL BY NAME with a typed empty row
    set), and `<table>`, one row per event: copies (rows equal in the table's identity columns,
    agensh_ray.trace rows `identity`) collapse into the earliest one; rows without an event_id are all kept."""
    names = ", ".join(f.name for f in SCHEMAS[table])
    key = ", ".join(TABLES[table].identity)
    return (
        f"CREATE OR REPLACE VIEW {table}_rows AS\n"
        f"SELECT {names} FROM (\n"
        f"    {empty_select(table)}\n"
        f"    UNION ALL BY NAME\n"
        f"    SELECT * FROM read_parquet(getvariable('run_dir') || '/trace/{table}/*.parquet', union_by_name = true)\n"
        f");\n"
        f"CREATE OR REPLACE VIEW {table} AS\n"
        f"SELECT * FROM {table}_rows WHERE coalesce(event_id, '') = ''\n"
        f"UNION ALL\n"
        f"(SELECT DISTINCT ON ({key}) * FROM {table}_rows WHERE event_id <> '' ORDER BY {key}, ts);"
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


def read_config(run_dir: Path) -> dict:
    """The run's config.json ({} when it has none: a run folder from elsewhere)."""
    path = Path(run_dir) / "config.json"
    if not path.is_file():
        return {}
    try:
        cfg = json.loads(path.read_text())
    except ValueError as e:
        raise ValueError(f"{path} is not valid JSON ({e}): it should hold the run's settings") from None
    if not isinstance(cfg, dict):
        raise ValueError(f"{path} holds {type(cfg).__name__}, not the run's settings (a JSON object)")
    return cfg


def settings(run_dir: str | Path, prices: str | Path | None = None,
             milestones: list[float] | None = None) -> dict[str, object]:
    """The DuckDB variables that views.sql and the question files read:

    run_dir      the run folder
    prices       the price table (CSV: model, input_usd_per_mtok, output_usd_per_mtok); default analysis/prices.csv
    worker_ids   the run's workers: agensh_ray.config.worker_ids of config.json's `workers` (absent when the
                 run has no such setting: the views then take every worker seen in the trace)
    milestones   score milestones as fractions of the hidden tests (absent: score_milestones.sql's default,
                 25%, 50%, 75% and 90%)
    schedule_start_us  when the schedule started (the first worker's launch), UTC microseconds: driver.json's
                 start_wall (absent without one: the views take the first worker's lifecycle row)
    run_ended    how the run ended, summary.json's "ended" (absent while it runs)
    """
    run_dir = Path(run_dir)
    out: dict[str, object] = {"run_dir": str(run_dir), "prices": str(prices or PRICES_CSV)}
    start = schedule_start_us(run_dir)
    if start is not None:
        out["schedule_start_us"] = start
    ended = run_ended(run_dir)
    if ended is not None:
        out["run_ended"] = ended
    n = read_config(run_dir).get("workers")
    if isinstance(n, int) and not isinstance(n, bool) and n > 0:
        out["worker_ids"] = worker_ids(n)
    if milestones is not None:
        out["milestones"] = check_milestones(milestones)
    return out


def schedule_start_us(run_dir: Path) -> int | None:
    """driver.json's start_wall (when the schedule started; a resumed driver keeps it) in UTC microseconds, or
    None (no driver.json, or one without it)."""
    path = Path(run_dir) / "driver.json"
    try:
        v = json.loads(path.read_text()).get("start_wall")
    except (OSError, ValueError, AttributeError):
        return None
    return int(v * 1e6) if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else None


def run_ended(run_dir: Path) -> str | None:
    """summary.json's "ended" (deadline | done | budget | interrupted), or None (a run still going)."""
    try:
        v = json.loads((Path(run_dir) / "summary.json").read_text()).get("ended")
    except (OSError, ValueError, AttributeError):
        return None
    return v if isinstance(v, str) else None


def check_milestones(milestones: list[float]) -> list[float]:
    """Score milestones, sorted: fractions of the hidden tests in (0, 1], at least one."""
    if not milestones or not all(0 < m <= 1 for m in milestones):
        raise ValueError(f"milestones are fractions of the hidden tests in (0, 1] (25% is 0.25), at least one: "
                         f"got {milestones}")
    return sorted({float(m) for m in milestones})


def sql_literal(v) -> str:
    """A SQL literal of a setting's value (None, number, text, or a list of them)."""
    if v is None:
        return "NULL"
    if isinstance(v, list):
        return "[" + ", ".join(sql_literal(x) for x in v) + "]"
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    return repr(v)


def run_folder(text: str) -> Path:
    """argparse type of the command lines' RUN_DIR: a local run folder, or an object store's run folder
    (`s3://bucket/prefix/<run_id>`), downloaded first into a local cache (changed files only; DuckDB then
    reads it as a local folder: its httpfs extension is not installed here; agensh_ray/storage.py)."""
    try:
        return fetch_run(text)
    except RunFolderError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def connect(
    run_dir: str | Path,
    con: duckdb.DuckDBPyConnection | None = None,
    prices: str | Path | None = None,
    milestones: list[float] | None = None,
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with the trace views of `run_dir` (a runs/<run_id> folder), set up with
    `settings()` (the price table, the run's workers, the score milestones). An `s3://...` run folder is
    downloaded first (`run_folder`)."""
    run_dir = fetch_run(run_dir)
    if not (run_dir / "trace").is_dir():
        raise FileNotFoundError(f"{run_dir} has no trace/ folder: is it a run folder (runs/<run_id>)?")
    cfg = read_config(run_dir)
    con = con or duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")  # timestamps come back in UTC
    for name, value in settings(run_dir, prices, milestones).items():
        con.execute(f"SET VARIABLE {name} = ?", [value])
    for body in statements(VIEWS_SQL.read_text()):
        m = re.match(r"CREATE OR REPLACE VIEW (\w+) AS", body)
        name = m.group(1) if m else None
        table = name[: -len("_rows")] if name and name.endswith("_rows") else None
        if table in SCHEMAS and not any((run_dir / "trace" / table).glob("*.parquet")):
            body = f"CREATE OR REPLACE VIEW {name} AS {empty_select(table)}"
        elif name == "run_config":
            rule, life = claim_life(cfg)
            body = _RUN_CONFIG.format(*map(sql_literal, [_num(cfg.get("workers")), _text(cfg.get("harness")),
                                                         _num(cfg.get("time_scale")) or 1.0, _num(cfg.get("minutes")),
                                                         rule, life]))
        con.execute(body)
    return con


_RUN_CONFIG = (  # views.sql's run_config, from config.json as Python read it (a missing key is null)
    "CREATE OR REPLACE VIEW run_config AS SELECT CAST({} AS BIGINT) AS workers, CAST({} AS VARCHAR) AS harness, "
    "CAST({} AS DOUBLE) AS time_scale, CAST({} AS DOUBLE) AS minutes, "
    "CAST({} AS VARCHAR) AS claim_rule, CAST({} AS DOUBLE) AS claim_life_wall_s"
)


def claim_life(cfg: dict) -> tuple[str, float]:
    """The run's claim rule and a claim's life without renewal in wall seconds, from config.json, by the
    board's own definition (`agensh_ray.board.leases.claim_life_wall_s`). A config without `claims` is from a
    run before the rule existed: `legacy`."""
    rule = cfg.get("claims") if cfg.get("claims") in CLAIM_RULES else "legacy"
    ttl = _num(cfg.get("claim_ttl_s")) or 3600.0
    floor = _num(cfg.get("claim_floor_wall_s")) or CLAIM_FLOOR_WALL_S
    return rule, claim_life_wall_s(ttl, _num(cfg.get("time_scale")) or 1.0, rule, floor)


def _num(v):
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _text(v):
    return v if isinstance(v, str) else None


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
        description="Check that the generated table views of analysis/views.sql match agensh_ray/trace/rows.py "
        "(--write rewrites them), or print the SET VARIABLE statements that set the DuckDB CLI up for a run "
        "(--settings RUN_DIR), as connect() does in Python.",
    )
    ap.add_argument("--write", action="store_true", help="rewrite the generated part of views.sql")
    ap.add_argument("--settings", type=run_folder, metavar="RUN_DIR",
                    help="print the run's settings (run folder, price table, worker ids, milestones) as SQL")
    ap.add_argument("--prices", type=Path, default=None, metavar="CSV", help="with --settings: the price table")
    ap.add_argument("--milestones", default=None, metavar="PCTS",
                    help="with --settings: score milestones in percent, comma-separated (default 25,50,75,90)")
    args = ap.parse_args(argv)
    if args.settings:
        try:
            values = settings(args.settings, args.prices, parse_percents(args.milestones))
        except ValueError as e:
            ap.error(str(e))
        for name, value in values.items():
            print(f"SET VARIABLE {name} = {sql_literal(value)};")
    elif args.write:
        write_views_sql()
        print(f"wrote {VIEWS_SQL}")
    elif not views_sql_is_current():
        raise SystemExit(f"{VIEWS_SQL} is stale: run python -m agensh_ray.analysis.views --write")
    else:
        print(f"{VIEWS_SQL} matches agensh_ray/trace/rows.py")


def parse_percents(text: str | None) -> list[float] | None:
    """"25,50,75,90" -> [0.25, 0.5, 0.75, 0.9] (the command lines' --milestones)."""
    if text is None:
        return None
    try:
        return check_milestones([float(p) / 100 for p in text.split(",") if p.strip()])
    except ValueError:
        raise ValueError(f"--milestones takes percentages in (0, 100] separated by commas (e.g. 25,50,75,90), "
                         f"not {text!r}") from None


if __name__ == "__main__":
    main()
