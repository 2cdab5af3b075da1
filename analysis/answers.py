"""A run's answers: every question file (analysis/*.sql) run over one run's trace in DuckDB.

What the report (report.py) and its plots (plots.py) read; kept apart from them so the plots and
the document writer (doc.py) need only these plain answers, not a database.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from agensh_ray.analysis.views import connect, query_names, run_query

MANY_FILES = 5_000
"""Above this many trace files, suggest compacting the run first."""


@dataclass
class Answer:
    cols: list[str]
    rows: list[tuple]

    def dicts(self) -> list[dict]:
        return [dict(zip(self.cols, r)) for r in self.rows]

    def one(self) -> dict:
        return dict(zip(self.cols, self.rows[0])) if self.rows else {c: None for c in self.cols}


@dataclass
class RunAnswers:
    run_dir: Path
    label: str
    answers: dict[str, Answer] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def run(self) -> dict:
        return self.answers["run"].one()


def analyse(run_dir: Path, prices: Path | None = None, memory_limit: str | None = None,
            milestones: list[float] | None = None) -> RunAnswers:
    """Every question file over one run (milestones: fractions of the hidden tests, default 25/50/75/90%)."""
    t0 = time.perf_counter()
    files = sum(1 for _ in (run_dir / "trace").glob("*/*.parquet"))
    if files > MANY_FILES:
        print(f"note: {run_dir} has {files:,} trace files; every scan pays per file, so "
              f"`python -m agensh_ray.analysis.compact {run_dir}` first makes this report much faster", file=sys.stderr)
    con = connect(run_dir, prices=prices, milestones=milestones)
    if memory_limit:
        con.execute(f"SET memory_limit = '{memory_limit}'")
    con.execute("SET preserve_insertion_order = false")
    out = RunAnswers(run_dir, run_dir.name)
    for name in query_names():
        cols, rows = run_query(con, name)
        out.answers[name] = Answer(cols, rows)
    con.close()
    out.label = str(out.run.get("run_id") or run_dir.name)
    out.seconds = time.perf_counter() - t0
    return out

