"""The analysis queries against hand-computed answers on committed trace fixtures
(tests/fixtures/make_runs.py builds them; tests/fixtures/golden/ holds the answers),
plus the generated parts that must stay in step with agensh_ray/trace/rows.py."""

from __future__ import annotations

import csv
import datetime as dt
import math
import shutil
from pathlib import Path

import duckdb
import pytest

from agensh_ray.analysis import trace_doc, views
from agensh_ray.analysis.views import (
    VIEWS_SQL,
    connect,
    query_names,
    query_sql,
    run_query,
    statements,
    views_sql_is_current,
)
from agensh_ray.trace import TABLES, LifecycleRow, ScoreRow, TraceWriter, TurnRow, write_schema_files

FIXTURES = Path(__file__).parent / "fixtures"
RUNS = ["run_small", "run_empty"]
QUERIES = query_names()


def _cell(value) -> str | float | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.timezone.utc).isoformat()
    if isinstance(value, (int, float)):
        return float(value)
    return str(value)


def _expected(text: str) -> str | float | None:
    if text == "":
        return None
    try:
        return float(text)
    except ValueError:
        return text


def _same(got, want) -> bool:
    if isinstance(got, float) and isinstance(want, float):
        return math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-9)
    return got == want


@pytest.fixture(scope="module")
def cons():
    return {run: connect(FIXTURES / run) for run in RUNS}


def test_every_query_has_a_golden_answer():
    for run in RUNS:
        have = sorted(p.stem for p in (FIXTURES / "golden" / run).glob("*.csv"))
        assert have == QUERIES, run


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("query", QUERIES)
def test_query_matches_golden(cons, run, query):
    cols, rows = run_query(cons[run], query)
    with open(FIXTURES / "golden" / run / f"{query}.csv", newline="") as f:
        header, *want = list(csv.reader(f))
    assert cols == header
    got = [[_cell(v) for v in row] for row in rows]
    want = [[_expected(v) for v in row] for row in want]
    assert len(got) == len(want), f"{query}: {len(got)} rows, expected {len(want)}:\n{got}"
    for i, (g, w) in enumerate(zip(got, want)):
        bad = [(c, gv, wv) for c, gv, wv in zip(cols, g, w) if not _same(gv, wv)]
        assert not bad, f"{query} row {i}: (column, got, expected) {bad}"


def test_every_query_file_says_what_it_answers():
    for name in QUERIES:
        text = (Path(__file__).parents[1] / "analysis" / f"{name}.sql").read_text()
        assert text.startswith("-- "), name
        header = [line for line in text.splitlines() if line.startswith("--")]
        assert len(header) >= 2, f"{name}.sql needs a header comment saying what it answers"


def test_views_sql_matches_the_row_models():
    assert views_sql_is_current(), "analysis/views.sql is stale: run python -m agensh_ray.analysis.views --write"


def test_trace_doc_matches_the_row_models():
    assert trace_doc.DOC.read_text() == trace_doc.render(), "docs/trace.md is stale: run python -m agensh_ray.analysis.trace_doc --write"


def test_every_trace_column_is_documented():
    for table, model in TABLES.items():
        assert model.__doc__ and model.__doc__.strip(), f"{model.__name__} needs a docstring"
        for name, info in model.model_fields.items():
            assert info.description, f"{table}.{name} needs a docstring in agensh_ray/trace/rows.py"


def test_old_files_read_with_nulls_in_new_columns(cons):
    rows = cons["run_small"].execute(
        "SELECT schema_version, count(*), count(verdict) FROM forge GROUP BY 1 ORDER BY 1"
    ).fetchall()
    assert rows == [(1, 10, 0), (2, 13, 4)]


def test_a_live_run_is_queryable_while_it_is_written(tmp_path):
    """A run in progress: files appear every flush; no final score, turns still open."""
    run = tmp_path / "live"
    writer = TraceWriter(run, "host-h000", "live", flush_interval_s=0)
    writer.write(LifecycleRow(worker_id="w001", event="started"))
    writer.write(TurnRow(worker_id="w001", turn=1, phase="start", trigger="first"))
    writer.write(ScoreRow(checkpoint="periodic", passed=1, total=4, pass_rate=0.25))
    writer.flush()
    con = connect(run)
    for name in QUERIES:
        run_query(con, name)
    assert run_query(con, "idle")[1][0][2] == 1  # one (open) turn
    writer.write(ScoreRow(checkpoint="periodic", passed=2, total=4, pass_rate=0.5))
    writer.flush()
    cols, rows = run_query(con, "final_score")  # same connection sees the new file
    assert dict(zip(cols, rows[0]))["final_pass_rate"] == 0.5
    writer.close()


def test_plain_duckdb_reads_views_sql_once_every_table_has_a_file(tmp_path, capsys):
    """The CLI path (the settings `python -m agensh_ray.analysis.views --settings RUN` prints;
    .read analysis/views.sql; .read analysis/<q>.sql) works on a run whose driver wrote the empty
    schema files, and knows the run's workers from its configuration."""
    run = tmp_path / "run_empty"
    shutil.copytree(FIXTURES / "run_empty", run)
    (run / "trace" / "lifecycle" / "fixture-00000.parquet").unlink()  # neither worker ever started
    write_schema_files(run)
    views.main(["--settings", str(run), "--milestones", "10,50"])
    printed = capsys.readouterr().out
    assert "SET VARIABLE worker_ids = ['w001', 'w002'];" in printed
    con = duckdb.connect()
    for stmt in statements(printed) + statements(VIEWS_SQL.read_text()):
        con.execute(stmt)
    for name in QUERIES:
        con.execute(statements(query_sql(name))[-1]).fetchall()
    assert con.execute("SELECT worker_id, role FROM workers ORDER BY 1").fetchall() == [("w001", "idle"), ("w002", "idle")]
    assert con.execute(statements(query_sql("score_milestones"))[-1]).fetchall() == [
        (0.1, None, None, None, None), (0.5, None, None, None, None)]


def test_a_run_without_configuration_has_the_workers_it_shows(tmp_path):
    run = tmp_path / "run_small"
    shutil.copytree(FIXTURES / "run_small", run)
    (run / "config.json").unlink()
    cols, rows = run_query(connect(run), "roles")
    assert [r[0] for r in rows] == ["w001", "w002", "w003", "w004", "w005"]
    assert run_query(connect(run), "run")[1][0][2] == 5  # run.workers: the five seen


def test_bad_settings_are_refused_clearly(tmp_path, capsys):
    run = tmp_path / "run_small"
    shutil.copytree(FIXTURES / "run_small", run)
    with pytest.raises(ValueError, match=r"milestones are fractions of the hidden tests in \(0, 1\]"):
        connect(run, milestones=[0.5, 50])
    with pytest.raises(SystemExit):
        views.main(["--settings", str(run), "--milestones", "half"])
    assert "--milestones takes percentages" in capsys.readouterr().err
    (run / "config.json").write_text("{workers: 5")
    with pytest.raises(ValueError, match="config.json is not valid JSON"):
        connect(run)
