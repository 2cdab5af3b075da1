"""Inputs a run did not expect and checkpoints under load (issue 29): a task the run cannot use is refused
before Ray starts; a main that does not build scores ProgramBench's 0.0 `compile_failed` at every checkpoint
and the run still writes its summary; a checkpoint that fails is recorded and the run goes on; periodic
checkpoints due while another is scored start late or are recorded missed, never dropped silently."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agensh_ray.analysis.views import connect
from agensh_ray.config import RunConfig
from agensh_ray.driver import Run
from agensh_ray.paths import PROJECT_ROOT, TASKS_DIR
from agensh_ray.task import Task
from agensh_ray.task.checkpoint import Checkpoints
from agensh_ray.trace import TraceWriter, write_schema_files

TEXTKIT = TASKS_DIR / "textkit"


def _textkit_copy(dest: Path, *drop: str) -> Path:
    """textkit's folder without `drop` (paths inside it)."""
    shutil.copytree(TEXTKIT, dest, ignore=shutil.ignore_patterns("__pycache__"))
    for rel in drop:
        target = dest / rel
        shutil.rmtree(target) if target.is_dir() else target.unlink()
    return dest


def _run_cli(*argv: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agensh_ray.run", *argv], cwd=PROJECT_ROOT, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.faults
def test_the_sim_on_a_task_without_an_oracle_and_a_folder_out_of_format_are_refused_before_ray_starts(tmp_path):
    """Before: the run started Ray, the sim's turns failed (`missing oracle/features.json`, only in an agent's
    stderr), the checkpoints raised and the run exited 1 with no summary.json."""
    no_oracle = _textkit_copy(tmp_path / "acme__kit.0000001", "oracle")
    ran = _run_cli("--task", str(no_oracle), "--workers", "1", "--minutes", "10", "--time-scale", "600",
                   "--run-dir", str(tmp_path / "runs"), "--run-id", "r1")
    assert ran.returncode == 2, ran.stdout + ran.stderr
    assert "has no oracle: the sim harness needs one" in ran.stderr and "Traceback" not in ran.stderr
    assert "ray ready" not in ran.stdout and "usage:" not in ran.stderr
    assert not (tmp_path / "runs" / "r1" / "config.json").exists()

    # not in the format: no tests.json, a branch without its run.sh, no reference; said all at once
    bare = _textkit_copy(tmp_path / "acme__bare.0000001", "tests.json", "build.sh")
    ran = _run_cli("--task", str(bare), "--workers", "1", "--minutes", "10", "--time-scale", "600",
                   "--run-dir", str(tmp_path / "runs"), "--run-id", "r2")
    assert ran.returncode == 2, ran.stdout + ran.stderr
    assert "is not a task folder in ProgramBench's format a run can use" in ran.stderr
    assert "tests.json" in ran.stderr and "reference: neither `executable` nor build.sh with src/" in ran.stderr
    assert "ray ready" not in ran.stdout
    branches = json.loads((TEXTKIT / "tests.json").read_text())["branches"]
    one = next(iter(branches))
    no_run_sh = _textkit_copy(tmp_path / "acme__norun.0000001", f"tests/{one}/eval/run.sh")
    with pytest.raises(Exception, match=f"tests/{one}/eval/run.sh"):
        Task.load(str(no_run_sh)).check_for("claude")  # any harness: the format is checked first
    Task.load("textkit").check_for("sim")  # the bundled task is complete


def _origin(tmp_path: Path, files: dict[str, str]) -> Path:
    origin = tmp_path / "origin"
    origin.mkdir()
    for name, text in files.items():
        (origin / name).write_text(text)
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "first"]):
        subprocess.run(["git", *args], cwd=origin, check=True, capture_output=True,
                       env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                            "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"})
    return origin


@pytest.mark.faults
def test_a_checkpoint_of_a_main_without_compile_sh_is_compile_failed_and_a_failing_one_ends_nothing(tmp_path):
    """Before: `SubmissionError: ... has no compile.sh at its top` out of Checkpoints.run (the final one's out of
    the driver); a forge that cannot be read raised out of `final` too."""
    origin = _origin(tmp_path, {"README.md": "nothing built yet\n"})
    run_dir = tmp_path / "run"
    write_schema_files(run_dir)
    trace = TraceWriter(run_dir, "driver", "r", flush_interval_s=0)
    task = Task.load("textkit")
    ckpt = Checkpoints(task, run_dir, trace)
    first = ckpt.run("periodic", str(origin))
    assert first is not None and first.score == 0.0 and first.error_code == "compile_failed"
    assert first.total == task.active_tests() and first.not_run == first.total
    final = ckpt.final(str(origin))
    assert final.error_code == "compile_failed" and ckpt.failed == 0
    # a forge that cannot be read: recorded, counted, the last result stands
    assert ckpt.run("periodic", str(tmp_path / "gone")) is None
    assert ckpt.final(str(tmp_path / "gone")) == ckpt.last
    assert ckpt.failed == 2 and "final" in ckpt.last_failure and "failed" in ckpt.note()
    trace.close()
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == [
        "01-periodic.eval.json", "02-final.eval.json", "submission.tar.gz"]
    con = connect(run_dir)
    assert con.execute("SELECT checkpoint, pass_rate, error_code FROM scores ORDER BY ts").fetchall() == [
        ("periodic", 0.0, "compile_failed"), ("final", 0.0, "compile_failed")]
    assert con.execute("SELECT count(*) FROM lifecycle WHERE event = 'checkpoint_failed'").fetchone() == (2,)
    empty = Checkpoints(task, tmp_path / "run2", TraceWriter(tmp_path / "run2", "driver", "r2"))
    assert empty.final(str(tmp_path / "gone")).error_code == "not_scored_failed"


def _run(cfg: RunConfig, task: Task, timeout: float, once_launching=None) -> tuple[dict | None, str]:
    """Run `cfg` in a thread, at most `timeout` s; `once_launching()` is called when the driver says its actors
    are up and it is launching the workers."""
    out = io.StringIO()
    run = Run(cfg, task, out=out)
    result: dict = {}

    def go():
        try:
            result["summary"] = run.execute()
        except BaseException as exc:  # what the old code did: the run raised
            result["error"] = exc

    deadline = time.monotonic() + timeout
    t = threading.Thread(target=go, daemon=True)
    t.start()
    if once_launching is not None:
        while t.is_alive() and "launching workers" not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.1)
        if t.is_alive():
            once_launching()
    t.join(max(0.0, deadline - time.monotonic()))
    assert not t.is_alive(), "the run did not finish in time:\n" + out.getvalue()
    assert "error" not in result, f"the run raised {result.get('error')!r}:\n{out.getvalue()}"
    return result["summary"], out.getvalue()


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.faults
@pytest.mark.timeout(600)
def test_a_run_whose_main_has_no_compile_sh_scores_compile_failed_to_its_deadline_and_writes_its_summary(
        ray_session, tmp_path):
    """The issue's run, with a real-format task whose starter has no compile.sh (as a real agent's team before
    it writes one): before, the periodic checkpoint raised, then the final one, and no summary.json."""
    task = Task.load(str(_textkit_copy(tmp_path / "acme__kit.0000002", "workspace/compile.sh")))
    cfg = RunConfig(workers=2, time_scale=240, minutes=60, run_dir=tmp_path / "runs", run_id="nocompile", seed=3,
                    score_every_s=1800, stop_when_done=False)
    summary, out = _run(cfg, task, 540)
    run_dir = tmp_path / "runs" / "nocompile"
    assert summary is not None and json.loads((run_dir / "summary.json").read_text()) == summary
    assert summary["ended"] == "deadline", out
    assert summary["score"] == 0.0 and summary["score_error"] == "compile_failed"
    assert summary["checkpoints_failed"] == 0, out
    rows = connect(run_dir).execute("SELECT checkpoint, pass_rate, error_code, eval_json FROM scores "
                                    "ORDER BY ts").fetchall()
    assert rows and rows[-1][0] == "final" and any(r[0] == "periodic" for r in rows), (rows, out)
    assert all(r[1] == 0.0 and r[2] == "compile_failed" and (run_dir / r[3]).is_file() for r in rows), rows


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_periodic_checkpoints_keep_their_grid_while_a_cpu_hog_saturates_the_machine(ray_session, tmp_path):
    """Two busy loops take the CPU (from the workers' launch on) while a run scores main every 15 schedule minutes (3.75 wall seconds, far less
    than one evaluation on a saturated machine). Every checkpoint of the grid before the run stopped is either
    scored, late if need be, or recorded missed with its reason (a lifecycle row), and the progress line and
    the summary say how many were missed. Before: a checkpoint due while one was scored was dropped silently,
    the next one a whole cadence later, and one that came late was skipped for the final one: one periodic
    row in the issue's runs, nothing saying why."""
    hogs: list[subprocess.Popen] = []  # started once the actors are up: what starves here is the scoring, not
    try:                                # the start of actors (which, on a loaded CI machine, took minutes)
        every = 900.0
        cfg = RunConfig(workers=2, time_scale=240, minutes=60, run_dir=tmp_path / "runs", run_id="hog", seed=5,
                        score_every_s=every, stop_when_done=False)
        summary, out = _run(cfg, Task.load("textkit"), 540, once_launching=lambda: hogs.extend(
            subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)))
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    run_dir = tmp_path / "runs" / "hog"
    con = connect(run_dir)
    periodic = [s for (s,) in con.execute("SELECT schedule_s FROM scores WHERE checkpoint = 'periodic' "
                                          "ORDER BY schedule_s").fetchall()]
    missed = [d for (d,) in con.execute("SELECT detail FROM lifecycle WHERE event = 'checkpoint_missed' "
                                        "ORDER BY ts").fetchall()]
    stopped_at = json.loads((run_dir / "driver.json").read_text())
    # the grid's checkpoints before the run stopped: each scored or missed, exactly once
    missed_slots = sorted(int(d.split(",", 1)[0].removeprefix("periodic checkpoint ")) for d in missed)
    scored_slots = sorted(int(s // every) for s in periodic)
    assert periodic, (missed, out)  # the first one is scored, whatever the load
    assert all(s >= every for s in periodic)
    last = max(missed_slots + scored_slots)
    assert sorted(missed_slots + scored_slots) == list(range(1, last + 1)), (missed, periodic, out)
    assert last >= int(cfg.minutes * 60 // every) - 1, (missed, periodic, stopped_at, out)
    assert all("still being scored" in d or "final checkpoint" in d for d in missed), missed
    assert summary["checkpoints_missed"] == len(missed)
    if missed:
        assert f"{len(missed)} missed" in out or "missed" in out
