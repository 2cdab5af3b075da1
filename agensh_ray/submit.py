"""`python -m agensh_ray.submit`: evaluated runs as a ProgramBench submission, and its headline.

    python -m agensh_ray.submit RUN_DIR [RUN_DIR ...] --out DIR [--tasks-dir TASKS]

Writes, per run, the layout of an evaluated `programbench eval` run directory:

    DIR/<instance_id>/submission.tar.gz        main at the deadline (the final checkpoint's tree)
    DIR/<instance_id>/<instance_id>.eval.json  the final checkpoint's EvaluationResult

For catalogue instances (programbench:<id> runs) DIR is ready for `programbench submit package
DIR`. That command skips instance ids it does not know, so local tasks are scored here with the
package's own functions: `load_all_instances(tasks_dir=...)` (the runs' task folders, or every
task folder under --tasks-dir, which then defines the benchmark), `score_run` and `aggregate`.
Prints the headline as the leaderboard computes it (mean score over the benchmark with
unattempted instances at 0, resolved % at score 1.0, near-resolved % at >= 0.95); the last line is
JSON: {"programbench": headline or null, "local": headline or null, "scores": {iid: score}}.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

from programbench.submission import aggregate, benchmark_instances, score_run
from programbench.utils.load_data import load_all_instances

from agensh_ray.errors import TaskError
from agensh_ray.task import Task
from agensh_ray.task.checkpoint import FINAL_SUBMISSION


def final_checkpoint(run_dir: Path) -> tuple[Task, Path, Path]:
    """(task, submission archive, eval.json) of a finished run's final checkpoint."""
    summary_path = run_dir / "summary.json"
    config_path = run_dir / "config.json"
    if not config_path.is_file():
        raise TaskError(f"{run_dir} is not a run folder: it has no config.json")
    if not summary_path.is_file():
        raise TaskError(f"run {run_dir.name} did not finish: it has no summary.json, so no final checkpoint")
    task = Task.load(json.loads(config_path.read_text())["task"])
    finals = sorted((run_dir / "checkpoints").glob("*-final.eval.json"))
    archive = run_dir / "checkpoints" / FINAL_SUBMISSION
    if not finals or not archive.is_file():
        raise TaskError(f"run {run_dir.name} has no final checkpoint (checkpoints/*-final.eval.json and "
                        f"checkpoints/{FINAL_SUBMISSION})")
    return task, archive, finals[-1]


def write_layout(runs: list[Path], out: Path) -> dict[str, Task]:
    """DIR/<iid>/{submission.tar.gz,<iid>.eval.json} per run; the tasks by instance id."""
    tasks: dict[str, Task] = {}
    for run_dir in runs:
        task, archive, eval_json = final_checkpoint(run_dir)
        iid = task.instance_id
        if iid in tasks:
            raise TaskError(f"two runs of {iid} ({run_dir.name} and an earlier one): a submission holds one per instance")
        tasks[iid] = task
        dest = out / iid
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(archive, dest / "submission.tar.gz")
        shutil.copyfile(eval_json, dest / f"{iid}.eval.json")
    return tasks


def local_headline(out: Path, tasks: dict[str, Task], tasks_dir: Path | None) -> tuple[dict | None, dict]:
    """The leaderboard's scoring of the local instances: load_all_instances + score_run + aggregate."""
    local = {iid: t for iid, t in tasks.items() if t.source == "local"}
    if not local:
        return None, {}
    with tempfile.TemporaryDirectory(prefix="agensh-tasks-") as tmp:
        if tasks_dir is None:  # the benchmark = the submitted tasks' own folders
            tasks_dir = Path(tmp)
            for iid, t in local.items():
                (tasks_dir / iid).symlink_to(t.root, target_is_directory=True)
        instances = {i["instance_id"]: i for i in load_all_instances(tasks_dir=tasks_dir)}
    scores = score_run(out, instances)
    return aggregate(scores, len(instances)).as_dict(), scores


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m agensh_ray.submit", description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", type=Path, help="finished run folders (runs/<run_id>)")
    p.add_argument("--out", type=Path, required=True, help="the submission folder to write (<iid>/... per run)")
    p.add_argument("--tasks-dir", type=Path, default=None,
                   help="local tasks: the folder of task folders that makes the benchmark (default: the runs' own tasks)")
    a = p.parse_args(argv)
    try:
        a.out.mkdir(parents=True, exist_ok=True)
        tasks = write_layout(a.runs, a.out)
        local, scores = local_headline(a.out, tasks, a.tasks_dir)
    except TaskError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    catalogue = None
    known = benchmark_instances()
    official = score_run(a.out, known)
    if official:
        catalogue = aggregate(official, len(known)).as_dict()
        scores.update(official)
    for iid in sorted(tasks):
        print(f"{iid}: score {scores.get(iid, 0.0):.4f}", file=sys.stderr)
    for label, h in (("ProgramBench", catalogue), ("local tasks", local)):
        if h:
            print(f"{label}: mean score {h['mean_score']:.4f}, resolved {h['resolved_pct']:.1f}%, near-resolved "
                  f"{h['near_resolved_pct']:.1f}% ({h['n_instances_attempted']} of {h['n_instances_total']} attempted)",
                  file=sys.stderr)
    if catalogue:
        print(f"next: programbench submit package {a.out}", file=sys.stderr)
    print(json.dumps({"programbench": catalogue, "local": local, "scores": scores}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
