"""Scoring cost: one checkpoint of a run, and what the bubblewrap sandbox adds to it.

    python bench/score.py [--repeat 5]

For the bundled textkit task (its oracle build) and the FIGlet task built from the installed Debian
package (its reference, as a gold submission), measures:

* checkpoint_s: one whole checkpoint as a run takes it (`Checkpoints.run`: fetch main, `git
  archive`, ProgramBench's Evaluator steps in bubblewrap, eval.json and trace rows), p50 of --repeat
  (main gets a new, empty commit before each, so each is evaluated);
* checkpoint_reused_s: one more checkpoint of the same main, whose result is repeated;
* tests_sandboxed_s / tests_unsandboxed_s: the same compiled workspace's active test branches
  (`eval/run.sh`, pytest, every test a process) run inside the sandbox and as a plain subprocess,
  p50 of --repeat each, and the sandbox's overhead (their difference, absolute and relative);
* bwrap_start_ms: one empty sandboxed command, p50.

Prints machine facts and progress; the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import programbench  # noqa: E402

from agensh_ray.task import Task  # noqa: E402
from agensh_ray.task.checkpoint import Checkpoints  # noqa: E402
from agensh_ray.task.evaluate import submission_archive  # noqa: E402
from agensh_ray.task.sandbox import BwrapBackend  # noqa: E402
from agensh_ray.trace import TraceWriter  # noqa: E402
from bench.common import machine_facts, pct, print_result, say  # noqa: E402

GIT_ENV = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@x", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@x"}


def git_origin(files: Path, dest: Path) -> Path:
    shutil.copytree(files, dest)
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "submission"]):
        subprocess.run(["git", *args], cwd=dest, check=True, capture_output=True, env=GIT_ENV)
    return dest


def textkit_submission(task: Task, dest: Path) -> Path:
    task.materialize_starter(dest)
    registry = dest / "textkit" / "registry.py"
    lines = registry.read_text().splitlines(keepends=True)
    for f in task.features():
        (dest / f.module).write_text(task.oracle_module(f.name))
        lines.insert(lines.index("}\n"), f.registry_line + "\n")
    registry.write_text("".join(lines))
    return dest


def figlet_task(tmp: Path) -> tuple[Task, Path]:
    sys.path.insert(0, str(ROOT / "tasks" / "debian"))
    import figlet  # the task builder

    task = Task.load(str(figlet.build(tmp / "tasks" / "debian__figlet.bench")))
    sub = tmp / "figlet-gold"
    sub.mkdir()
    binary = os.path.realpath(shutil.which("figlet"))
    (sub / "figlet.gz").write_bytes(gzip.compress(Path(binary).read_bytes()))
    (sub / "compile.sh").write_text("#!/bin/sh\nset -e\ngunzip -c figlet.gz > executable\nchmod +x executable\n")
    return task, sub


def checkpoint_times(task: Task, origin: Path, run_dir: Path, repeat: int,
                     t0: float) -> tuple[list[float], float, float]:
    """(seconds of each evaluated checkpoint, the score, seconds of one checkpoint of an unchanged main)."""
    trace = TraceWriter(run_dir, "bench", "bench", flush_interval_s=0)
    ckpt = Checkpoints(task, run_dir, trace)
    times, score = [], 0.0
    for i in range(repeat):
        if i:  # a new commit: an unchanged main's result would be repeated, not evaluated
            subprocess.run(["git", "commit", "-q", "--allow-empty", "-m", f"again {i}"], cwd=origin, check=True,
                           capture_output=True, env=GIT_ENV)
        start = time.perf_counter()
        score = ckpt.run("periodic", str(origin)).score
        times.append(time.perf_counter() - start)
        say(t0, f"{task.name}: checkpoint {i + 1}/{repeat} in {times[-1]:.2f}s, score {score:.3f}")
    start = time.perf_counter()
    ckpt.run("periodic", str(origin))
    reused = time.perf_counter() - start
    assert ckpt.reused == 1 and len(ckpt.eval_s) == repeat
    say(t0, f"{task.name}: checkpoint of an unchanged main (its result repeated) in {reused:.2f}s")
    trace.close()
    return times, score, reused


def compiled_workspace(task: Task, submission: Path, tmp: Path) -> tuple[BwrapBackend, Path, list[Path]]:
    """A sandbox environment with the submission compiled, and each active branch's test tarball."""
    backend = BwrapBackend(tmp)
    env = backend.new_env("bench")
    env.copy_in_tar(submission_archive(submission, tmp), "/workspace/")
    r = env.execute("chmod +x ./compile.sh && ./compile.sh", timeout=900)
    if r["returncode"] != 0:
        raise SystemExit(f"compile failed: {r['output']}")
    blobs = tmp / f"blobs-{task.name.replace(':', '_')}"
    task.pack_tests(blobs)
    active = [b for b, info in task.instance["branches"].items() if not info.get("ignored")]
    return backend, env.root, [blobs / "tests" / f"{b}.tar.gz" for b in active]


def run_tests_once(backend: BwrapBackend, compiled: Path, branches: list[Path], sandboxed: bool, tmp: Path) -> float:
    """Seconds to run every active branch's eval/run.sh on fresh copies of the compiled workspace."""
    total = 0.0
    for blob in branches:
        work = tmp / f"w-{time.monotonic_ns()}"
        shutil.copytree(compiled, work, symlinks=True)
        with tarfile.open(blob) as tar:
            tar.extractall(work / "workspace", filter="tar")
        start = time.perf_counter()
        if sandboxed:
            env = backend.new_env("bench-run")
            shutil.rmtree(env.root)
            shutil.move(work, env.root)
            r = env.execute("chmod +x ./eval/run.sh && ./eval/run.sh", timeout=3600)
            ok = r["returncode"] == 0
            env.cleanup()
        else:
            path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"
            p = subprocess.run(["bash", "eval/run.sh"], cwd=work / "workspace", capture_output=True,
                               env={**os.environ, "PATH": path, "PYTEST_ADDOPTS": "--max-worker-restart=4"})
            ok = p.returncode == 0
            shutil.rmtree(work)
        total += time.perf_counter() - start
        if not ok:
            raise SystemExit("a test branch failed to run")
    return total


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=5, help="runs of each measurement (figures are medians)")
    a = p.parse_args()
    t0 = time.time()
    facts = machine_facts(programbench=programbench.__version__ if hasattr(programbench, "__version__") else "1.2.5",
                          bwrap=subprocess.run(["bwrap", "--version"], capture_output=True, text=True).stdout.strip())
    say(t0, f"machine: {facts}")
    result: dict = {"machine": facts, "repeat": a.repeat}
    with tempfile.TemporaryDirectory(prefix="agensh-bench-score-") as tmpdir:
        tmp = Path(tmpdir)
        textkit = Task.load("textkit")
        textkit.build_reference(tmp / "ref" / "textkit")
        tasks = [("textkit", textkit, textkit_submission(textkit, tmp / "textkit-oracle"))]
        if shutil.which("figlet"):
            fig, gold = figlet_task(tmp)
            tasks.append(("figlet", fig, gold))
        else:
            say(t0, "figlet is not installed (apt-get install figlet): the FIGlet task is left out")
        backend = BwrapBackend(tmp)
        starts = []
        for _ in range(max(5, a.repeat)):
            env = backend.new_env("probe")
            s = time.perf_counter()
            env._run(["true"], timeout=30)
            starts.append(time.perf_counter() - s)
            env.cleanup()
        backend.close()
        result["bwrap_start_ms"] = round(1000 * pct(starts, 0.5), 1)
        for label, task, sub in tasks:
            origin = git_origin(sub, tmp / f"origin-{label}")
            times, score, reused = checkpoint_times(task, origin, tmp / f"run-{label}", a.repeat, t0)
            backend, compiled, branches = compiled_workspace(task, sub, tmp)
            sandboxed, plain = [], []
            for i in range(a.repeat):
                sandboxed.append(run_tests_once(backend, compiled, branches, True, tmp))
                plain.append(run_tests_once(backend, compiled, branches, False, tmp))
                say(t0, f"{label}: tests {i + 1}/{a.repeat}: sandboxed {sandboxed[-1]:.2f}s, plain {plain[-1]:.2f}s")
            backend.close()
            s50, u50 = pct(sandboxed, 0.5), pct(plain, 0.5)
            result[label] = {
                "active_tests": task.active_tests(), "branches": len(branches), "score": score,
                "checkpoint_s_p50": round(pct(times, 0.5), 2), "checkpoint_s_min": round(min(times), 2),
                "checkpoint_reused_s": round(reused, 2),
                "tests_sandboxed_s_p50": round(s50, 2), "tests_unsandboxed_s_p50": round(u50, 2),
                "sandbox_overhead_s": round(s50 - u50, 2), "sandbox_overhead_pct": round(100 * (s50 - u50) / u50, 1),
            }
            say(t0, f"{label}: {result[label]}")
    print_result(result)


if __name__ == "__main__":
    main()
