"""Checkpoints: main scored during a run, by the same code as `python -m agensh_ray.score`.

Each checkpoint fetches the forge's main into `<run>/score/main`, packs its tree as the
submission (`git archive`, what ProgramBench's submission.tar.gz holds), scores it with
`Task.evaluate`, and writes

* `<run>/checkpoints/<NN>-<label>.eval.json`: the package's EvaluationResult;
* one `scores` row (the leaderboard's score, counts, schedule time) and one `test_results` row per
  test (branch, test, status), so time-to-score curves and "which tests flipped when" are SQL;
* for the final checkpoint, `<run>/checkpoints/submission.tar.gz`: main at the deadline, what
  `python -m agensh_ray.submit` packs.

The official score is ProgramBench's, whatever main holds; but ProgramBench runs the hidden tests with
what the submission leaves in the workspace, so a `conftest.py` on main can make every test pass. The
evaluation's `runner_files` step lists such files (agensh_ray/task/runner_files.py); when it found any,
the checkpoint also scores main strictly (the same evaluation with them removed after the build,
`<run>/checkpoints/<NN>-<label>.strict.eval.json`) and its `scores` row has both scores and the files.
When it found none, the strict score is the official one and nothing more runs.

Periodic checkpoints are due on a fixed grid, every `every_s` schedule seconds from the run's start
(`due`, which the driver asks on each pass of its loop). `start` runs a checkpoint in a thread (the driver keeps
printing progress meanwhile); one at a time: a checkpoint due while one runs starts as soon as that one ends
(late is fine); when the next one's time comes before it could start (an evaluation longer than the cadence,
as on a loaded machine), or the final one is due within one checkpoint's duration, it is missed, and recorded:
a `lifecycle` row `checkpoint_missed` saying why, counted in `missed`. The final one waits for a running
one on main's commit and cancels one on an older commit (below).

A main that does not build (no compile.sh at its top, a failing build) is scored as ProgramBench scores it:
0.0 with the Evaluator's `compile_failed`, a result like any other (eval.json, `scores` row). Any other failure
of a checkpoint (the forge unreachable, a sandbox that would not start) ends the run nowhere: it is logged, a
`lifecycle` row `checkpoint_failed` records it, `failed` counts it, and a failed final checkpoint leaves the
last checkpoint's score in the summary (or 0.0 `not_scored_failed` when there is none). A background
checkpoint runs at a lower CPU priority (`background_nice`, 10 by default): on Linux a thread's
nice value is its own and everything it starts inherits it (the Evaluator's branch threads, the
sandboxes, the tests), so scoring takes the CPU the workers leave idle instead of slowing them.
The final checkpoint, with the workers stopped, runs at the driver's own priority.

What a checkpoint costs is an evaluation (a build and every hidden test, 10-20 s for textkit on two
busy cores), so it is spent only where it can tell something:

* main unchanged since the last checkpoint (the fetch finds the commit already scored): its result
  is repeated, not evaluated again (the Evaluator's result is a function of the tree; a result a
  retry could change, a branch error or a failed step other than the build, is not repeated). The
  checkpoint still writes its eval.json (the earlier one's, with a `reused` step appended to its
  log), its `scores` row (the same commit, this checkpoint's schedule time) and its `test_results`
  rows, so every checkpoint has its rows and the time series stays regular; `reused` counts them.
  The final checkpoint reuses too: main at the deadline is the commit a periodic one just scored.
* `periodic` starts none when the final one is due within one checkpoint's duration (the last
  evaluation's, which tells the machine's load now): the final one would wait for it (recorded missed).
* `final` cancels a background checkpoint still scoring an older commit than main's (`git ls-remote`):
  its sandboxes are killed (agensh_ray/task/sandbox.py) and nothing of it is written then, instead of the
  final one waiting for it; `catch_up` (the driver, after the final one) scores it again on the commit and
  schedule time it had taken, so the time series keeps its point (an interrupted run records it missed).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from programbench.eval.eval import EvaluationResult
from programbench.utils.load_data import get_active_branches, get_ignored_tests

from agensh_ray.agent import hostgit
from agensh_ray.task.base import Task
from agensh_ray.task.evaluate import ScoreSummary, found_runner_files, runner_files_checked, with_strict
from agensh_ray.trace import LifecycleRow, ScoreRow, TestResultRow, TraceWriter

log = logging.getLogger("agensh.checkpoint")

FINAL_SUBMISSION = "submission.tar.gz"


def _git(args: list[str], cwd: Path | None = None, clone_url: str | None = None) -> str:
    """git on the run's score clone: it checks out the workers' pushed trees, whose `.gitattributes` may name a
    filter or diff driver, so it reads no user or system configuration (where one could be defined: git-lfs's)
    and runs no hook, fsmonitor or other configured program (agensh_ray/agent/hostgit.py). `clone_url`'s
    credentials, if any, go through the environment (`{url}` in `args` is its URL without them)."""
    env = hostgit.inert_env(dict(os.environ))
    if clone_url is not None:
        bare, credentials = hostgit.url_credentials(clone_url)
        env.update(credentials)
        args = [bare if a == "{url}" else a for a in args]
    return subprocess.run(hostgit.host_argv(args), cwd=cwd, check=True, env=env, capture_output=True,
                          text=True).stdout


def fetch_main(repo: Path, clone_url: str, commit: str | None = None) -> str:
    """The forge's main into the score clone at `repo` (cloned the first time, else fetched and reset), or
    `commit` of its history: the commit checked out. The clone's config keeps the URL without its token."""
    if (repo / ".git").exists():
        _git(["-C", str(repo), "remote", "set-url", "origin", "{url}"], clone_url=clone_url)  # no token kept
        _git(["-C", str(repo), "fetch", "-q", "{url}", "+refs/heads/main:refs/remotes/origin/main"],
             clone_url=clone_url)
        _git(["-C", str(repo), "reset", "-q", "--hard", commit or "origin/main"])
    else:
        repo.parent.mkdir(parents=True, exist_ok=True)
        _git(["clone", "-q", "{url}", str(repo)], clone_url=clone_url)
        if commit:
            _git(["-C", str(repo), "reset", "-q", "--hard", commit])
    return _git(["-C", str(repo), "rev-parse", "HEAD"]).strip()


def lower_thread_priority(nice: int) -> None:
    """Make the calling thread (and all it starts from now on) at least `nice` nice; never raises its
    priority (a driver already under `nice -n 19` stays there). Linux: nice is per thread."""
    try:
        tid = threading.get_native_id()
        current = os.getpriority(os.PRIO_PROCESS, tid)
        if nice > current:
            os.setpriority(os.PRIO_PROCESS, tid, nice)
    except (OSError, AttributeError) as e:  # not Linux, or not allowed: scoring still runs, at full priority
        log.warning("cannot lower the checkpoint thread's priority: %s", e)


def main_commit(clone_url: str) -> str | None:
    """The forge's main commit now (`git ls-remote`: one request, nothing fetched), None if it cannot be read."""
    try:
        out = _git(["ls-remote", "{url}", "refs/heads/main"], clone_url=clone_url)
    except subprocess.CalledProcessError:
        return None
    return out.split()[0] if out.strip() else None


class Checkpoints:
    """The checkpoints of one run."""

    def __init__(self, task: Task, run_dir: Path, trace: TraceWriter, time_scale: float = 1.0,
                 background_nice: int = 10, every_s: float | None = None):
        self.task = task
        self.every_s = every_s
        """Schedule seconds between periodic checkpoints (None: only the final one)."""
        self._slot: int | None = None
        """The next periodic checkpoint, as its number on the grid (its time: start_wall + slot * every_s)."""
        self.missed = 0
        """Periodic checkpoints that could not start in time (a `checkpoint_missed` lifecycle row each)."""
        self.failed = 0
        self.life = secrets.token_hex(6)
        """This driver's own random id, in its `checkpoint_failed` rows' event ids (a resumed driver counts its
        failures from 1 again: the id must not repeat the previous driver's)."""
        """Checkpoints that raised (a `checkpoint_failed` lifecycle row each); the run went on."""
        self.last_failure: str | None = None
        self.background_nice = background_nice
        self.run_dir = Path(run_dir)
        self.dir = self.run_dir / "checkpoints"
        self.trace = trace
        self.time_scale = time_scale
        self.start_wall = time.time()
        self.seq = 0
        self.last: ScoreSummary | None = None
        self.reused = 0
        """Checkpoints that found main unchanged and repeated the last result."""
        self.skipped_near_deadline = 0
        self.eval_s: list[float] = []
        """Wall seconds of each evaluation (fetch to result)."""
        self.cancelled = 0
        """Background checkpoints cancelled for the final one (main had moved on)."""
        self._last_commit: str | None = None
        self._last_eval: Path | None = None
        self._last_strict: Path | None = None
        self._running_commit: str | None = None
        self._running_label: str | None = None
        self._started_slot: int | None = None
        self._cancelled_job: tuple[str, str, float, int | None] | None = None
        """A background checkpoint the final one cancelled: (label, commit, schedule_s, slot), scored by
        `catch_up` after the final one (main as it was at its time: late, not lost)."""
        self._grid_open = True
        self._cancel = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.abandoned = False
        """The run is being torn down: a checkpoint still running fails without a traceback (its forge is gone)."""

    @property
    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, label: str, clone_url: str) -> bool:
        """Run a checkpoint in the background; False (nothing started) if one is still running."""
        if self.busy:
            return False
        self._cancel = threading.Event()
        self._thread = threading.Thread(target=self._background, args=(label, clone_url, self._cancel), daemon=True,
                                        name=f"checkpoint-{label}")
        self._thread.start()
        return True

    def due(self, now: float | None = None) -> bool:
        """Whether a periodic checkpoint should start now: its time on the grid has come and none is running.
        A checkpoint whose successor's time came before it could start is recorded missed (why: the one still
        evaluating)."""
        if self.every_s is None or not self._grid_open:
            return False
        now = time.time() if now is None else now
        slot = int((now - self.start_wall) * self.time_scale // self.every_s)  # the latest grid time passed
        if self._slot is None:  # the first look (a resumed run: the grid goes on from now)
            self._slot = max(1, slot)
        if slot < self._slot:
            return False
        while self._slot < slot:
            running = self._running_label or "the one before"
            self._miss(self._slot, f"checkpoint {running} was still being scored at the next one's time")
            self._slot += 1
        return not self.busy

    def end_grid(self, now: float | None = None) -> None:
        """The run stopped (deadline, done, interrupted): periodic checkpoints due by now that did not start are
        recorded missed, and none is due after."""
        if self.every_s is not None and self._slot is not None and self._grid_open:
            now = time.time() if now is None else now
            last = int((now - self.start_wall) * self.time_scale // self.every_s)
            while self._slot <= last:
                self._miss(self._slot, f"the run stopped before it could start (checkpoint {self._running_label} "
                           "was still being scored); the final checkpoint scores main" if self._running_label else
                           "the run stopped before it could start; the final checkpoint scores main")
                self._slot += 1
        self._grid_open = False

    def _miss(self, slot: int, why: str) -> None:
        self.missed += 1
        log.warning("periodic checkpoint %d (due at %.0f schedule s) missed: %s", slot, slot * self.every_s, why)
        self.trace.write(LifecycleRow(event="checkpoint_missed", detail=f"periodic checkpoint {slot}, due at "
                                      f"{slot * self.every_s:.0f} schedule s: {why}", host="checkpoints",
                                      event_id=f"checkpoint_missed:{slot}"))
        self.trace.flush()

    def periodic(self, clone_url: str, deadline_wall: float, now: float | None = None) -> str:
        """A periodic checkpoint, if it is worth one now: "started"; "busy" (one still runs: it is still due);
        "final_soon" (the deadline comes before one checkpoint's duration has passed: the final one will score
        main; recorded missed)."""
        if self.busy:
            return "busy"
        slot = self._slot or 1
        self._slot = slot + 1
        if self.eval_s and (now if now is not None else time.time()) + self.eval_s[-1] >= deadline_wall:
            self.skipped_near_deadline += 1
            if self.every_s is not None:
                self._miss(slot, f"the final checkpoint is due within one checkpoint's duration "
                                 f"({self.eval_s[-1]:.0f} s, the last one's)")
            return "final_soon"
        if not self.start("periodic", clone_url):
            return "busy"
        self._started_slot = slot
        return "started"

    def final(self, clone_url: str) -> ScoreSummary:
        """The final checkpoint, here. A background one still scoring an older commit than main's is cancelled
        (its result would tell nothing the final one does not); one scoring main's commit is waited for (the
        final one then repeats its result). Never raises: a failed final checkpoint is recorded (`failure`) and
        the last checkpoint's summary stands (0.0 `not_scored_failed` when there is none)."""
        if self.busy:
            running, head = self._running_commit, main_commit(clone_url)
            if running is not None and running != head:
                self._cancel.set()
        self.wait()
        return self.run("final", clone_url) or self.fallback()

    def catch_up(self, clone_url: str, interrupted: bool = False) -> None:
        """After the final checkpoint: score the background one it cancelled, on the commit and with the schedule
        time it had taken (late, at the caller's priority, not lost); an interrupted run records it missed."""
        job, self._cancelled_job = self._cancelled_job, None
        if job is None:
            return
        label, commit, schedule_s, slot = job
        if interrupted:
            if slot is not None and self.every_s is not None:
                self._miss(slot, "cancelled for the final checkpoint, and the run was interrupted before it could be "
                                 "scored again")
            return
        last, self._running_label = self.last, f"{self.seq + 1:02d}-{label}"
        try:
            self._run(label, clone_url, None, commit=commit, schedule_s=schedule_s)
        except Exception as exc:
            self.failure(label, exc)
        finally:
            self.last, self._running_label = last, None  # the progress line and fallback keep main's latest

    def note(self) -> str:
        """What the progress line adds to the score: checkpoints missed or failed, and the last failure."""
        parts = [f"{self.missed} missed"] if self.missed else []
        if self.failed:
            parts.append(f"{self.failed} failed, last {self.last_failure}")
        return f" ({' ; '.join(parts)})" if parts else ""

    def fallback(self) -> ScoreSummary:
        """The summary's score when the final checkpoint failed: the last checkpoint's, else 0.0 not scored."""
        n = self.task.active_tests()
        return self.last or ScoreSummary(score=0.0, passed=0, total=n, not_run=n, error_code="not_scored_failed")

    def failure(self, label: str, exc: BaseException) -> None:
        """A checkpoint that raised: logged, counted, a `checkpoint_failed` lifecycle row; the run goes on."""
        self.failed += 1
        self.last_failure = f"{label}: {type(exc).__name__}: {exc}"[:500]
        log.warning("checkpoint %s failed (the run goes on): %s: %s", label, type(exc).__name__, exc,
                    exc_info=exc)
        try:
            self.trace.write(LifecycleRow(event="checkpoint_failed", detail=self.last_failure, host="checkpoints",
                                          event_id=f"checkpoint_failed:{self.life}:{self.failed}"))
            self.trace.flush()
        except Exception:  # the trace itself failing: the log line above has it
            log.exception("recording the failed checkpoint failed")

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()

    def _background(self, label: str, clone_url: str, cancel: threading.Event) -> None:
        lower_thread_priority(self.background_nice)
        self.run(label, clone_url, cancel)

    def abandon(self) -> None:
        """The run is ending without this checkpoint (teardown): if one still runs, its failure is expected."""
        self.abandoned = True

    def run(self, label: str, clone_url: str, cancel: threading.Event | None = None) -> ScoreSummary | None:
        """Score main now: fetch, pack, evaluate (or repeat the last result if main is unchanged), write the
        eval.json and the trace rows. None (nothing written) if `cancel` was set during the evaluation, or if the
        checkpoint failed (recorded: `failure`). Never raises."""
        self._running_label = f"{self.seq + 1:02d}-{label}"
        try:
            return self._run(label, clone_url, cancel)
        except Exception as exc:
            if self.abandoned:  # teardown took its forge away
                log.warning("checkpoint %s stopped with the run: %s", label, type(exc).__name__)
            else:
                self.failure(label, exc)
            return None
        finally:
            self._running_label = None

    def _run(self, label: str, clone_url: str, cancel: threading.Event | None, commit: str | None = None,
             schedule_s: float | None = None) -> ScoreSummary | None:
        with self._lock:
            t0 = time.time()
            schedule_s = (t0 - self.start_wall) * self.time_scale if schedule_s is None else schedule_s
            repo = self.run_dir / "score" / "main"
            commit = fetch_main(repo, clone_url, commit)
            self._running_commit = commit
            try:
                return self._score(label, commit, repo, schedule_s, t0, cancel)
            finally:
                self._running_commit = None

    def _score(self, label: str, commit: str, repo: Path, schedule_s: float, t0: float,
               cancel: threading.Event | None) -> ScoreSummary | None:
        self.dir.mkdir(parents=True, exist_ok=True)
        reuse = self._last_eval if commit == self._last_commit and self._last_eval is not None else None
        strict_result: EvaluationResult | None = None
        with tempfile.TemporaryDirectory(prefix="agensh-ckpt-") as tmp:
            archive = Path(tmp) / "submission.tar.gz"
            if label == "final" or reuse is None:
                _git(["-C", str(repo), "archive", "--format=tar.gz", "-o", str(archive), "HEAD"])
            if reuse is None:
                result = self._evaluate(archive, cancel)
                if result is not None and found_runner_files(result):
                    # main ships files that change the test runner: score it without them too (a failure of
                    # that leaves the strict score unknown, the official one stands)
                    try:
                        strict_result = self._evaluate(archive, cancel, strict=True)
                    except Exception:
                        log.exception("checkpoint %s: the strict evaluation of %s failed", label, commit)
                if cancel is not None and cancel.is_set():
                    self.cancelled += 1
                    self._cancelled_job = (label, commit, schedule_s, self._started_slot)
                    log.info("checkpoint %s of %s cancelled: main moved on and the final one is due", label, commit)
                    return None
                self.eval_s.append(time.time() - t0)
            self.seq += 1
            name = f"{self.seq:02d}-{label}.eval.json"
            strict_name = f"{self.seq:02d}-{label}.strict.eval.json"
            if reuse is None:
                (self.dir / name).write_text(result.model_dump_json(indent=2))
                if strict_result is not None:
                    (self.dir / strict_name).write_text(strict_result.model_dump_json(indent=2))
                # a result that a retry could change (a branch that errored, a step other than the build
                # failing) is not repeated, nor one whose strict evaluation is missing
                clean = all(r.error_code in (None, "compile_failed") and not r.test_branch_errors
                            for r in (result, strict_result) if r is not None) and (
                    strict_result is not None or not found_runner_files(result))
                self._last_commit, self._last_eval, self._last_strict = (
                    (commit, self.dir / name, self.dir / strict_name if strict_result is not None else None)
                    if clean else (None, None, None))
            else:
                result = self._repeat(reuse, self.dir / name, commit)
                if self._last_strict is not None:
                    strict_result = self._repeat(self._last_strict, self.dir / strict_name, commit, count=False)
            if label == "final":
                shutil.copyfile(archive, self.dir / FINAL_SUBMISSION)
        files = found_runner_files(result)
        summary = with_strict(self.task.summarize(result), self.task.summarize(strict_result)
                              if strict_result is not None else None, files, runner_files_checked(result))
        if files:
            log.warning("checkpoint %s: main ships files that change the test runner (%s): official score %.3f, "
                        "strict %s", label, ", ".join(files), summary.score,
                        "unknown" if summary.strict_score is None else f"{summary.strict_score:.3f}")
        event = f"checkpoint:{self.seq}"
        self.trace.write(ScoreRow(checkpoint=label, commit=commit, passed=summary.passed, total=summary.total,
                                  pass_rate=summary.score, schedule_s=round(schedule_s, 3),
                                  not_run=summary.not_run, error_code=summary.error_code,
                                  eval_json=f"checkpoints/{name}", strict_pass_rate=summary.strict_score,
                                  strict_passed=summary.strict_passed, runner_files=", ".join(files),
                                  strict_eval_json=f"checkpoints/{strict_name}" if strict_result is not None
                                  else None, event_id=event))
        active = set(get_active_branches(self.task.instance))
        ignored = get_ignored_tests(self.task.instance)
        for t in result.test_results:
            if t.branch in active:
                self.trace.write(TestResultRow(checkpoint=label, commit=commit, branch=t.branch, test=t.name,
                                               status=t.status, ignored=t.full_name in ignored, event_id=event))
        self.trace.flush()
        self.last = summary
        return summary

    def _evaluate(self, archive: Path, cancel: threading.Event | None, strict: bool = False
                  ) -> EvaluationResult | None:
        """The task's evaluation; None when cancelled (its sandboxes were killed: the Evaluator may stop on the
        first refused step)."""
        if cancel is not None and cancel.is_set():
            return None
        try:
            return self.task.evaluate(archive, cancel=cancel, strict=strict, as_is=True)
        except Exception:
            if cancel is None or not cancel.is_set():
                raise
            return None

    def _repeat(self, earlier: Path, dest: Path, commit: str, count: bool = True) -> EvaluationResult:
        """The result of `earlier` (main's same commit), written to `dest` with a `reused` step in its log."""
        data = json.loads(earlier.read_text())
        data.setdefault("log", []).append({
            "step": "reused", "command": "", "wall_time": 0.0, "returncode": 0, "exception_info": "",
            "output": f"main unchanged since checkpoint {earlier.name} (commit {commit}): its result, not evaluated "
                      "again"})
        dest.write_text(json.dumps(data, indent=2))
        self.reused += count
        return EvaluationResult.model_validate(data)
