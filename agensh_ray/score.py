"""`python -m agensh_ray.score`: score one submission exactly as a run's checkpoint does.

    python -m agensh_ray.score --task ID_OR_PATH SUBMISSION --out EVAL.json

SUBMISSION is a folder or a .tar.gz/.tgz/.tar/.zip archive with a compile.sh at its top. The task is
a bundled name, a folder in ProgramBench's task format (scored here in bubblewrap sandboxes by
the steps of ProgramBench's Evaluator) or programbench:<instance_id> (the package's own Docker
evaluation). Writes the package's EvaluationResult JSON to EVAL.json and prints, as the last line,
{"score", "passed", "total", "not_run", "error_code", "runner_files", "strict_score", "strict_passed"}: the
leaderboard's per-instance score, and, as a checkpoint records them, the files the submission ships that
change the test runner and its score without them (scored again, into EVAL.strict.json, only when it ships
any; null when the evaluation could not look: a catalogue instance).
Exit 0 when scored (whatever the score), 2 when the task or submission cannot be scored.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from agensh_ray.errors import TaskError
from agensh_ray.task import Task
from agensh_ray.task.evaluate import found_runner_files, runner_files_checked, with_strict


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m agensh_ray.score", description=__doc__.split("\n\n")[0])
    p.add_argument("--task", required=True,
                   help="a bundled task's name, a task folder in ProgramBench's format, or programbench:<instance_id>")
    p.add_argument("submission", type=Path, help="a folder or .tar.gz/.tgz/.tar/.zip archive with a compile.sh")
    p.add_argument("--out", type=Path, required=True, help="where to write the EvaluationResult JSON (eval.json)")
    p.add_argument("-v", "--verbose", action="store_true", help="log every evaluation step")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if a.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        task = Task.load(a.task)
        task.check_available()
        print(f"scoring {a.submission} against {task.name} ({task.active_tests()} active tests)", file=sys.stderr)
        t0 = time.monotonic()
        result = task.evaluate(a.submission)
        files = found_runner_files(result)
        strict = task.evaluate(a.submission, strict=True) if files else None
    except TaskError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(result.model_dump_json(indent=2))
    if strict is not None:
        strict_out = a.out.with_name(a.out.name.removesuffix(".json") + ".strict.json")
        strict_out.write_text(strict.model_dump_json(indent=2))
        print(f"the submission ships files that change the test runner ({', '.join(files)}): scored again without "
              f"them into {strict_out}", file=sys.stderr)
    summary = with_strict(task.summarize(result), task.summarize(strict) if strict is not None else None, files,
                          runner_files_checked(result))
    print(f"wrote {a.out} in {time.monotonic() - t0:.1f}s: {summary.passed}/{summary.total} passed"
          + (f", evaluation failed: {result.error_code}" if result.error_code else ""), file=sys.stderr)
    print(summary.model_dump_json())
    return 0


if __name__ == "__main__":
    sys.exit(main())
