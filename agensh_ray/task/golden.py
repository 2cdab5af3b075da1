"""Hidden tests made the way ProgramBench makes them: golden outputs recorded from the reference.

A task's generator lists the inputs (`Case`: branch, id, arguments, stdin) and which branches are
ignored and why; `write_tests` runs every case through the reference executable, records what it
did, runs the same cases through trivial dummy executables and marks every test a dummy passes
ignored with reason `dummy_pass` (as the catalogue's tests.json does), then writes
`tests/<branch>/eval/{run.sh,tests/test_golden.py,tests/cases.json}` and `tests.json`.

The comparison is the one the shipped test file makes (`golden_files/test_golden.py`, loaded
here as a module): what decides "a dummy passes" is what the tests will check.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

from pydantic import BaseModel

FILES = Path(__file__).resolve().parent / "golden_files"
TEST_PREFIX = "eval.tests.test_golden.test_golden"

DUMMIES: dict[str, str] = {
    "silent success": "#!/bin/sh\nexit 0\n",
    "silent failure": "#!/bin/sh\nexit 1\n",
    "error": "#!/bin/sh\necho 'error' >&2\nexit 1\n",
    "usage error": "#!/bin/sh\necho 'usage: executable ARGS' >&2\nexit 2\n",
    "echo stdin": "#!/bin/sh\nexec cat\n",
}
"""The trivial dummy executables: a test any of them passes tests nothing."""


class Case(BaseModel):
    branch: str
    id: str
    args: list[str] = []
    stdin: str = ""


def _runner():
    """The shipped test file as a module (its run_case and matches). It reads its cases.json at
    import: give it an empty one."""
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(FILES / "test_golden.py", Path(tmp) / "test_golden.py")
        (Path(tmp) / "cases.json").write_text("[]")
        spec = importlib.util.spec_from_file_location("agensh_golden_runner", Path(tmp) / "test_golden.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return module


def golden_test_name(case_id: str) -> str:
    """The name ProgramBench's JUnit parsing gives a golden test (classname.name)."""
    return f"{TEST_PREFIX}[{case_id}]"


def write_tests(task_dir: Path, cases: Iterable[Case], reference: Path,
                ignored_branches: dict[str, str] | None = None) -> dict:
    """Record every case from `reference`, mark dummy passes, write the branches and tests.json.
    Returns the tests.json data."""
    runner = _runner()
    task_dir = Path(task_dir)
    cases = list(cases)
    ids = [c.id for c in cases]
    if len(set(ids)) != len(ids):
        raise ValueError("case ids must be unique")
    ignored_branches = ignored_branches or {}
    with tempfile.TemporaryDirectory(prefix="agensh-golden-") as tmp:
        work = Path(tmp)
        recorded = {}
        for c in cases:
            got = runner.run_case(str(Path(reference).resolve()), c.model_dump(), cwd=str(work))
            if got["exit_code"] is None:
                raise RuntimeError(f"the reference does not finish case {c.id} ({c.args})")
            recorded[c.id] = {**c.model_dump(exclude={"branch"}), **got}
        dummy_passes: set[str] = set()
        for name, script in DUMMIES.items():
            exe = work / name.replace(" ", "-")
            exe.write_text(script)
            exe.chmod(0o755)
            for c in cases:
                if runner.matches(runner.run_case(str(exe), c.model_dump(), cwd=str(work)), recorded[c.id]):
                    dummy_passes.add(c.id)
    tests_root = task_dir / "tests"
    if tests_root.exists():
        shutil.rmtree(tests_root)
    data: dict = {"branches": {}}
    for branch in dict.fromkeys(c.branch for c in cases):
        mine = [c for c in cases if c.branch == branch]
        eval_dir = tests_root / branch / "eval"
        (eval_dir / "tests").mkdir(parents=True)
        shutil.copy(FILES / "run.sh", eval_dir / "run.sh")
        (eval_dir / "run.sh").chmod(0o755)
        shutil.copy(FILES / "test_golden.py", eval_dir / "tests" / "test_golden.py")
        (eval_dir / "tests" / "cases.json").write_text(
            json.dumps([recorded[c.id] for c in mine], indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        data["branches"][branch] = {
            "ignored": branch in ignored_branches,
            "ignore_reason": ignored_branches.get(branch, ""),
            "tests": [golden_test_name(c.id) for c in mine],
            "ignored_tests": [{"name": golden_test_name(c.id), "reasons": [{"id": "dummy_pass"}]}
                              for c in mine if c.id in dummy_passes],
        }
    (task_dir / "tests.json").write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return data
