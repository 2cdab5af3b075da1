"""The demo's closing hint names a command the install provides, and that command answers."""

from __future__ import annotations

import io
import shlex
import subprocess
import sys

from agensh_ray.driver import Run
from agensh_ray.trace import write_schema_files


def test_the_query_hint_runs(tmp_path):
    run_dir = tmp_path / "runs" / "r1"
    write_schema_files(run_dir)  # a run folder whose tables are all empty
    run = Run.__new__(Run)
    run.run_dir, run.out = run_dir, io.StringIO()
    run._print_summary({
        "run_id": "r1", "wall_s": 1.0, "workers": 1, "merged_pr_authors": 0, "prs_opened": 0, "prs_merged": 0,
        "merge_conflicts": 0, "merge_conflicts_resolved": 0, "board_entries": {}, "dms": 0, "channel_posts": 0,
        "score": 0.0, "tests_passed": 0, "tests_total": 1, "run_dir": str(run_dir),
    })
    (hint,) = [line for line in run.out.getvalue().splitlines() if line.strip().startswith("query it:")]
    command = hint.split(":", 1)[1].split("  (")[0].strip()
    argv = shlex.split(command)
    assert argv[0] == "python", hint
    done = subprocess.run([sys.executable, *argv[1:]], check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "-- merges" in done.stdout
