"""Score a submission the way ProgramBench does, with ProgramBench's own code.

`LocalEvaluator` is the package's `Evaluator` with its container swapped for the bubblewrap
sandbox (`sandbox.py`): every step (wipe, copy the submission in, remove files with a gold hash
and any shipped ./executable, seed git, block DNS, ./compile.sh, stash and hash the executable,
then per active branch: unpack the tests, restore and verify the executable, run eval/run.sh,
read eval/results.xml), the JUnit parsing, the completeness checks (tests missing from the XML
become `not_run`, unexpected ones a warning) and the result model are the package's. Only the
two methods that name Docker are replaced, as upstream's later pluggable backend does.

The score is the leaderboard's: `programbench.submission.score_instance` over the written
EvaluationResult (active branches, ignored tests struck).

One step is ours, after the build (ProgramBench runs the tests the way the submission leaves the
workspace, so a `conftest.py` on main can make every test pass): `runner_files` lists what the built
environment holds that changes the test runner (agensh_ray/task/runner_files.py), in the result's log,
so the official result records it and stays as it is. With `strict=True` the same Evaluator also
removes those files inside the sandbox before the built image is committed: the strict score is the
official score of the submission without them (the build itself is the submission's, unchanged).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import stat
import tarfile
import tempfile
import threading
import time
import zipfile
from pathlib import Path

from programbench.eval.eval import EvaluationResult, Evaluator
from programbench.exceptions import EvalStepError
from programbench.submission import score_instance, test_results_map
from programbench.utils.load_data import get_active_branches, get_ignored_branches, get_ignored_tests
from pydantic import BaseModel

from agensh_ray.errors import SubmissionError
from agensh_ray.task import runner_files
from agensh_ray.task.sandbox import WORKSPACE, BwrapBackend

RUNNER_FILES_STEP = "runner_files"
"""The log step listing what the build left that changes the test runner (our step, after the build)."""
NEUTRALISE_STEP = "neutralise_runner_files"


class ScoreSummary(BaseModel):
    """What `python -m agensh_ray.score` prints last and a checkpoint records."""

    score: float
    """The leaderboard's per-instance score: passed / active tests (ignored branches and tests struck)."""
    passed: int
    total: int
    """Active tests (the score's denominator)."""
    not_run: int
    """Active tests that did not run (missing from the JUnit XML, a failed build or branch): they count as failed."""
    error_code: str | None = None
    """Why the whole evaluation failed (e.g. compile_failed), else None."""
    runner_files: list[str] = []
    """What the scored tree (after its build) holds that changes the test runner: `conftest.py`, ...
    (agensh_ray/task/runner_files.py). Empty: nothing, and the strict score is the official one."""
    strict_score: float | None = None
    """The official score of the submission without those files (the same evaluation with them removed after
    the build); equal to `score` when there are none; None when not known (a strict evaluation not run)."""
    strict_passed: int | None = None


class LocalEvaluator(Evaluator):
    """ProgramBench's Evaluator over bubblewrap environments instead of Docker containers."""

    def __init__(self, *, backend: BwrapBackend, strict: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.backend = backend
        self.strict = strict

    def _compile_executable(self, env, log_buf: list[dict]) -> None:
        # The package's steps, then ours: what the built environment holds that changes the test runner
        # (read on the host: the sandbox has exited, nothing in it runs); in strict mode it is removed inside
        # the sandbox, and looked for again, before the Evaluator commits the built image.
        super()._compile_executable(env, log_buf)
        t0 = time.monotonic()
        found = runner_files.scan(env.root)
        log_buf.append({"step": RUNNER_FILES_STEP, "command": "", "wall_time": time.monotonic() - t0,
                        "output": json.dumps([f.as_dict() for f in found]), "returncode": 0, "exception_info": ""})
        if self.strict and found:
            # sh -c, not the Evaluator's `bash -lc`: HOME's login files may be among what it removes
            t0 = time.monotonic()
            rc, out, err = env._run(runner_files.removal_argv(found), timeout=300)
            log_buf.append({"step": NEUTRALISE_STEP, "command": runner_files.removal_command(found),
                            "wall_time": time.monotonic() - t0, "output": runner_files.shown(out + err),
                            "returncode": rc, "exception_info": ""})
            left = runner_files.scan(env.root)
            if rc != 0 or left:
                raise EvalStepError(f"{NEUTRALISE_STEP}_failed",
                                    ", ".join(f.path for f in left) or runner_files.shown(out + err))

    def _new_env(self, image: str, *, serial_pytest: bool = False):
        # As Evaluator._new_env (programbench 1.2.5), with the environment from our backend.
        env = {"PYTEST_ADDOPTS": "--max-worker-restart=4"}
        if serial_pytest:
            env["PYTEST_XDIST_AUTO_NUM_WORKERS"] = "1"
        return self.backend.new_env(image, cwd=WORKSPACE, timeout=600, cpus=self.docker_cpus, env=env)

    def _copy_file_from_container(self, *, env, log_buf: list[dict], container_path: str, step_name: str,
                                  timeout: int = 60) -> str:
        # As Evaluator._copy_file_from_container, reading through the environment instead of `docker cp`.
        t0 = time.monotonic()
        try:
            contents, command = env.copy_out(container_path, timeout=timeout)
        except (OSError, RuntimeError) as e:
            log_buf.append({"step": step_name, "command": f"cat -- {container_path}",
                            "wall_time": time.monotonic() - t0, "output": str(e), "returncode": 1,
                            "exception_info": ""})
            raise EvalStepError(f"{step_name}_failed", str(e)) from e
        log_buf.append({"step": step_name, "command": command, "wall_time": time.monotonic() - t0,
                        "output": contents, "returncode": 0, "exception_info": ""})
        return contents


def submission_archive(submission: Path, dest_dir: Path, as_is: bool = False) -> Path:
    """The submission as the `submission.tar.gz` the Evaluator unpacks, from a folder (its `.git`
    left out, as ProgramBench packs a repository) or a .tar.gz/.tgz/.tar/.zip archive. It must have
    a compile.sh at its top, unless `as_is` (a run's checkpoint: main is scored whatever it holds, and a
    main without compile.sh fails the Evaluator's compile step, ProgramBench's `compile_failed`)."""
    submission = Path(submission)
    dest = Path(dest_dir) / "submission.tar.gz"
    if submission.is_dir():
        if not as_is and not (submission / "compile.sh").is_file():
            raise SubmissionError(f"{submission} has no compile.sh at its top: ProgramBench builds a submission "
                                  "with ./compile.sh, which must produce ./executable")
        with tarfile.open(dest, "w:gz") as tar:
            for p in sorted(submission.iterdir()):
                if p.name != ".git":
                    tar.add(p, arcname=p.name)
        return dest
    if not submission.is_file():
        raise SubmissionError(f"{submission}: no such file or folder")
    name = submission.name.lower()
    if name.endswith(".zip"):
        _zip_to_tar(submission, dest, as_is)
    elif name.endswith((".tar.gz", ".tgz", ".tar")):
        try:
            with tarfile.open(submission) as tar:
                names = tar.getnames()
        except (tarfile.TarError, OSError) as e:
            raise SubmissionError(f"{submission} is not a readable tar archive: {e}") from e
        if not as_is and not any(n.lstrip("./") == "compile.sh" for n in names):
            raise SubmissionError(f"{submission} has no compile.sh at its top (members: {', '.join(names[:10])})")
        if name.endswith(".tar"):
            with tarfile.open(submission) as src, tarfile.open(dest, "w:gz") as out:
                for m in src.getmembers():
                    out.addfile(m, src.extractfile(m) if m.isfile() else None)
        else:
            shutil.copyfile(submission, dest)
    else:
        raise SubmissionError(f"{submission}: a submission is a folder or a .tar.gz, .tgz, .tar or .zip archive")
    return dest


def _zip_to_tar(src: Path, dest: Path, as_is: bool = False) -> None:
    """Repack a zip as tar.gz member by member (modes and symlinks kept), nothing unpacked on the host."""
    try:
        zf = zipfile.ZipFile(src)
    except (zipfile.BadZipFile, OSError) as e:
        raise SubmissionError(f"{src} is not a readable zip archive: {e}") from e
    with zf, tarfile.open(dest, "w:gz") as tar:
        names = zf.namelist()
        if not as_is and not any(n.lstrip("./") == "compile.sh" for n in names):
            raise SubmissionError(f"{src} has no compile.sh at its top (members: {', '.join(names[:10])})")
        for info in zf.infolist():
            mode = (info.external_attr >> 16) & 0xFFFF
            ti = tarfile.TarInfo(info.filename.rstrip("/"))
            ti.mtime = time.mktime(info.date_time + (0, 0, -1))
            if info.is_dir():
                ti.type, ti.mode = tarfile.DIRTYPE, stat.S_IMODE(mode) or 0o755
                tar.addfile(ti)
            elif stat.S_ISLNK(mode):
                ti.type, ti.linkname = tarfile.SYMTYPE, zf.read(info).decode()
                tar.addfile(ti)
            else:
                data = zf.read(info)
                ti.size, ti.mode = len(data), stat.S_IMODE(mode) or 0o644
                tar.addfile(ti, io.BytesIO(data))


def evaluate(instance: dict, submission: Path, blob_dir: Path, *, remove_hashes: list[str] | None = None,
             scratch: Path | None = None, branch_workers: int | None = None,
             hide: list[str] | None = None, cancel: threading.Event | None = None,
             strict: bool = False, as_is: bool = False) -> EvaluationResult:
    """Run ProgramBench's evaluation of `submission` for `instance` (a dict as
    `programbench.utils.load_data` loads it) in bubblewrap sandboxes. `blob_dir/tests/<branch>.tar.gz`
    holds each branch's tests, as in ProgramBench's blob store; `hide`: host paths the sandbox masks;
    `cancel` set: the sandboxes are killed and the result (then meaningless) comes back at once;
    `strict`: the files that change the test runner are removed after the build (module doc); `as_is`: a
    submission without compile.sh at its top is evaluated (its build fails: `compile_failed`), not refused."""
    branches = get_active_branches(instance)
    data = instance.get("branches") or {}
    backend = BwrapBackend(scratch, hide=hide, cancel=cancel)
    try:
        archive = submission_archive(submission, backend.base, as_is)
        evaluator = LocalEvaluator(
            backend=backend,
            strict=strict,
            image_name=f"local/{instance['instance_id']}",
            solution_branch="submission",
            submission_archive=archive,
            blob_dir=blob_dir,
            tests_branches=branches,
            tests_by_branch={b: data[b]["tests"] for b in branches if b in data},
            ignored_tests=get_ignored_tests(instance),
            ignored_branches=get_ignored_branches(instance),
            remove_hashes=[*instance.get("eval_clean_hashes", []), *(remove_hashes or [])],
            docker_cpus=os.cpu_count() or 1,
            branch_workers=branch_workers or min(len(branches), os.cpu_count() or 1) or 1,
        )
        return evaluator.run()
    finally:
        backend.close()


def found_runner_files(result: EvaluationResult) -> list[str]:
    """The paths the `runner_files` step of an evaluation found (none when it has no such step: a build that
    failed, or an evaluation not made by LocalEvaluator)."""
    out: list[str] = []
    for entry in result.log:
        if entry.get("step") == RUNNER_FILES_STEP:
            try:
                out += [f["path"] for f in json.loads(entry.get("output") or "[]")]
            except (ValueError, TypeError, KeyError):
                out.append("(unreadable runner_files step)")
    return list(dict.fromkeys(out))


def runner_files_checked(result: EvaluationResult) -> bool:
    """Whether the evaluation looked for files that change the test runner (its `runner_files` step ran), or
    had nothing to look at (the build failed: no test ran, the strict score can only be the official one)."""
    return result.error_code is not None or any(e.get("step") == RUNNER_FILES_STEP for e in result.log)


def with_strict(official: ScoreSummary, strict: ScoreSummary | None, files: list[str],
                checked: bool = True) -> ScoreSummary:
    """The official summary with the strict score beside it: `strict`'s when there is one; the official one's
    when nothing was found; None (unknown) when nobody looked (`checked` False: a Docker evaluation)."""
    if not files:
        return official.model_copy(update={"runner_files": [], "strict_score": official.score if checked else None,
                                           "strict_passed": official.passed if checked else None})
    return official.model_copy(update={"runner_files": files, "strict_score": strict.score if strict else None,
                                       "strict_passed": strict.passed if strict else None})


def summarize(result: EvaluationResult, instance: dict) -> ScoreSummary:
    """The leaderboard's score of one EvaluationResult, with the counts behind it."""
    with tempfile.TemporaryDirectory(prefix="agensh-eval-") as tmp:
        path = Path(tmp) / "eval.json"
        path.write_text(result.model_dump_json())
        tests = test_results_map(path, instance)
        score = score_instance(path, instance)
    active = result.for_branches(get_active_branches(instance)).without_ignored(get_ignored_tests(instance))
    return ScoreSummary(score=score, passed=sum(tests.values()), total=len(tests),
                        not_run=sum(t.status == "not_run" for t in active.test_results), error_code=result.error_code)
