"""Print the answers of question files for one run, finished or still running.

    python -m agensh_ray.analysis.query runs/<run_id>               # every question
    python -m agensh_ray.analysis.query runs/<run_id> merges idle   # some
    python -m agensh_ray.analysis.query runs/<run_id> --sql "SELECT * FROM run_info"   # your own
"""

from __future__ import annotations

import argparse
from pathlib import Path

from agensh_ray.analysis.views import connect, query_names, query_sql, run_folder, statements


def main(argv: list[str] | None = None) -> None:
    names = query_names()
    ap = argparse.ArgumentParser(prog="python -m agensh_ray.analysis.query", description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=run_folder, metavar="RUN_DIR",
                    help="a run folder (runs/<run_id>, or s3://bucket/prefix/<run_id>)")
    ap.add_argument("queries", nargs="*", metavar="QUERY", help=f"question files to run (default all): {', '.join(names)}")
    ap.add_argument("--prices", type=Path, default=None, help="price table CSV (default analysis/prices.csv)")
    ap.add_argument("--rows", type=int, default=40, help="rows to print per answer (default 40)")
    ap.add_argument("--sql", action="append", default=[], metavar="SELECT",
                    help="a query of your own over the run's views (repeatable; then no question file runs unless "
                    "named)")
    args = ap.parse_args(argv)
    unknown = [q for q in args.queries if q not in names]
    if unknown:
        ap.error(f"unknown query {', '.join(unknown)}; known: {', '.join(names)}")
    con = connect(args.run_dir, prices=args.prices)
    for i, sql in enumerate(args.sql, 1):
        print(f"-- sql {i}")
        con.sql(sql).show(max_rows=args.rows, max_width=200)
    for name in args.queries or ([] if args.sql else names):
        stmts = statements(query_sql(name))
        for s in stmts[:-1]:
            con.execute(s)
        print(f"-- {name}")
        con.sql(stmts[-1]).show(max_rows=args.rows, max_width=200)


if __name__ == "__main__":
    main()
