"""The bundled textkit task in ProgramBench's format: starter, execute-only reference, oracle, and
hidden scoring through ProgramBench's Evaluator in the bubblewrap sandbox.

Real files, real git, real subprocesses, real sandboxes: these are the properties a run depends
on (an empty starter scores nothing, the oracle scores everything, an oracle bug is caught by the
visible checks and the hidden tests, two features merged in parallel conflict in the registry and
resolve by keeping both lines, a broken build scores failures).
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from agensh_ray.errors import TaskError
from agensh_ray.task import Feature, Task, known_tasks
from agensh_ray.task.golden import TEST_PREFIX


@pytest.fixture(scope="module")
def task() -> Task:
    return Task.load("textkit")


@pytest.fixture(scope="module")
def reference(task: Task, tmp_path_factory) -> Path:
    return task.build_reference(tmp_path_factory.mktemp("ref") / "textkit")


def starter(task: Task, reference: Path, repo: Path) -> Path:
    """A worker's view: the starter plus the run's reference in reference/."""
    task.materialize_starter(repo)
    (repo / "reference").mkdir()
    (repo / "reference" / "textkit").write_bytes(reference.read_bytes())
    (repo / "reference" / "textkit").chmod(0o111)
    return repo


def outcomes(task: Task, repo: Path) -> dict[str, bool]:
    """Per active hidden test (ignored ones left out): case id -> passed, scored as a checkpoint scores."""
    result = task.evaluate(repo)
    ignored = {t["name"] for b in task.instance["branches"].values() for t in b["ignored_tests"]}
    return {t.name[len(TEST_PREFIX) + 1:-1]: t.status == "passed" for t in result.test_results
            if t.name not in ignored}


def feature_of(case_id: str) -> str:
    return case_id.rsplit("-", 1)[0]


def apply_feature(repo: Path, feature: Feature, module_text: str) -> None:
    """What the simulated agent does: write the module, add the registry line above `}`."""
    module = repo / feature.module
    module.parent.mkdir(parents=True, exist_ok=True)
    module.write_text(module_text, encoding="utf-8")
    registry = repo / "textkit" / "registry.py"
    lines = registry.read_text(encoding="utf-8").splitlines(keepends=True)
    close = lines.index("}\n")
    lines.insert(close, feature.registry_line + "\n")
    registry.write_text("".join(lines), encoding="utf-8")


def run_checks(repo: Path, *names: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "checks/check.py", *names], cwd=repo, capture_output=True, text=True, timeout=120
    )


def git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=check)


def test_starter_has_execute_only_reference_and_scores_zero(task: Task, reference: Path, tmp_path: Path):
    repo = tmp_path / "repo"
    task.materialize_starter(repo)
    assert not (repo / "reference").exists(), "the reference is never part of the repository"
    assert (repo / "compile.sh").is_file() and (repo / "docs" / "textkit.md").is_file()

    assert reference.stat().st_mode & 0o777 == 0o111 and reference.read_bytes()[:4] == b"\x7fELF"
    ran = subprocess.run([str(reference), "upper"], input="hello\n", capture_output=True, text=True)
    assert (ran.stdout, ran.returncode) == ("HELLO\n", 0)

    starter(task, reference, repo)
    assert run_checks(repo).returncode == 0  # nothing registered yet: main starts green
    result = task.evaluate(repo)
    summary = task.summarize(result)
    assert (summary.score, summary.passed, summary.not_run) == (0.0, 0, 0)
    assert summary.total == task.active_tests() >= 56


def test_every_oracle_feature_scores_full_marks(task: Task, reference: Path, tmp_path: Path):
    repo = starter(task, reference, tmp_path / "repo")
    features = task.features()
    assert len(features) >= 14
    for feature in features:
        apply_feature(repo, feature, task.oracle_module(feature.name))

    summary = task.summarize(task.evaluate(repo))
    assert (summary.score, summary.passed) == (1.0, summary.total), summary

    checks = run_checks(repo)
    assert checks.returncode == 0, checks.stdout
    assert sorted(checks.stdout.split()[1::2]) == sorted(f.name for f in features)


def test_every_oracle_bug_fails_its_visible_check_and_the_hidden_tests(task: Task, reference: Path, tmp_path: Path):
    repo = starter(task, reference, tmp_path / "repo")
    features = task.features()
    for feature in features:
        find, replace = task.oracle_bug(feature.name)
        module = task.oracle_module(feature.name)
        assert module.count(find) == 1, feature.name
        apply_feature(repo, feature, module.replace(find, replace))

    checks = run_checks(repo, *(f.name for f in features))
    assert checks.returncode == 1
    verdicts = {line.split()[1].rstrip(":"): line.split()[0] for line in checks.stdout.splitlines()}
    assert verdicts == {f.name: "FAIL" for f in features}, checks.stdout
    # ... and the hidden tests see each bug too, but for head's and tail's: their only witness is an
    # empty output (`head 0`, `tail 0`), which a silent dummy produces as well, so those tests are
    # ignored (dummy_pass), as ProgramBench ignores them.
    failed = {feature_of(case) for case, ok in outcomes(task, repo).items() if not ok}
    assert failed == {f.name for f in features} - {"head", "tail"}


def test_parallel_features_conflict_in_registry_and_merge_by_keeping_both(task: Task, reference: Path, git_env: Path):
    repo = git_env / "repo"
    task.materialize_starter(repo)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "starter")
    upper, lower = (f for f in task.features() if f.name in ("upper", "lower"))

    for branch, feature in (("feat-upper", upper), ("feat-lower", lower)):
        git(repo, "checkout", "-q", "-b", branch, "main")
        apply_feature(repo, feature, task.oracle_module(feature.name))
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"add {feature.name}")

    git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "feat-upper")  # fast-forward
    merge = git(repo, "merge", "feat-lower", check=False)
    assert merge.returncode != 0
    assert "CONFLICT (content): Merge conflict in textkit/registry.py" in merge.stdout
    assert git(repo, "diff", "--name-only", "--diff-filter=U").stdout.split() == ["textkit/registry.py"]

    registry = repo / "textkit" / "registry.py"
    resolved = [line for line in registry.read_text().splitlines() if not re.match(r"(<<<<<<<|=======|>>>>>>>)", line)]
    assert upper.registry_line in resolved and lower.registry_line in resolved
    registry.write_text("\n".join(resolved) + "\n")
    git(repo, "commit", "-q", "-am", "merge feat-lower, keeping both registry lines")

    results = outcomes(task, repo)
    passed = {feature_of(c) for c, ok in results.items() if ok}
    failed = {feature_of(c) for c, ok in results.items() if not ok}
    assert passed == {"upper", "lower"} and not passed & failed
    starter(task, reference, git_env / "checked")  # the visible checks need the reference beside the build
    shutil.copytree(repo / "textkit", git_env / "checked" / "textkit", dirs_exist_ok=True)
    assert run_checks(git_env / "checked").returncode == 0


def test_broken_build_scores_failures_instead_of_crashing(task: Task, reference: Path, tmp_path: Path):
    repo = starter(task, reference, tmp_path / "repo")
    upper, lower, title = (f for f in task.features() if f.name in ("upper", "lower", "title"))
    apply_feature(repo, upper, "def main(args, stdin):\n    return stdin.upper(, 0\n")  # syntax error
    apply_feature(repo, lower, "import os\n\ndef main(args, stdin):\n    os._exit(3)\n")  # dies mid-run
    apply_feature(repo, title, task.oracle_module("title"))
    assert {feature_of(c) for c, ok in outcomes(task, repo).items() if ok} == {"title"}

    (repo / "textkit" / "registry.py").write_text("COMMANDS = {\n<<<<<<< HEAD\n}\n")
    summary = task.summarize(task.evaluate(repo))
    assert summary.passed == 0 and summary.total >= 56
    assert "FAIL" in run_checks(repo, "upper").stdout

    (repo / "compile.sh").write_text("#!/bin/sh\nexit 3\n")  # a build that fails: every test not_run
    result = task.evaluate(repo)
    summary = task.summarize(result)
    assert result.error_code == "compile_failed"
    assert (summary.score, summary.not_run) == (0.0, summary.total)


def test_unknown_task_lists_known_tasks(tmp_path: Path):
    assert "textkit" in known_tasks()
    with pytest.raises(TaskError, match=r"unknown task 'nope'.*known: .*textkit"):
        Task.load("nope")
    with pytest.raises(TaskError, match="no task.yaml"):
        Task.load(str(tmp_path))
    with pytest.raises(TaskError, match="no feature 'nope'"):
        Task.load("textkit").oracle_bug("nope")


def test_task_loads_by_path_and_describes_itself(task: Task):
    by_path = Task.load(str(task.root))
    assert (by_path.name, by_path.title, by_path.root) == ("textkit", task.title, task.root)
    assert (task.instance["instance_id"], task.instance["language"], task.reference_relpath) == (
        "textkit", "python", "reference/textkit")
    text = task.text()
    for needle in ("reference/textkit", "textkit/registry.py", "checks/check.py", "compile.sh",
                   "Never push to `main` directly"):
        assert needle in text
    assert "pyz" not in text
    for feature in task.features():
        assert feature.module == f"textkit/commands/{feature.name.replace('-', '_')}.py"
        assert feature.registry_line == f'    "{feature.name}": "textkit.commands.{feature.name.replace("-", "_")}",'


def test_hidden_tests_are_generated_from_the_reference_and_cover_every_feature(task: Task):
    regen = subprocess.run(
        [sys.executable, str(task.root / "hidden_tests" / "generate.py"), "--check"], capture_output=True, text=True
    )
    assert regen.returncode == 0, regen.stderr
    branches = task.instance["branches"]
    assert len(branches) == 3 and not any(b["ignored"] for b in branches.values())
    cases = [c for b in branches for c in json.loads((task.root / "tests" / b / "eval/tests/cases.json").read_text())]
    names = {f.name for f in task.features()}
    per_feature = Counter(c["args"][0] for c in cases)
    assert set(per_feature) == names and min(per_feature.values()) >= 4
    assert len({c["id"] for c in cases}) == len(cases) == sum(len(b["tests"]) for b in branches.values())
    # dummy_pass: the usage errors a dummy that prints to stderr and exits 2 passes, the empty inputs a
    # silent dummy passes; they do not count.
    reasons = {r["id"] for b in branches.values() for t in b["ignored_tests"] for r in t["reasons"]}
    assert reasons == {"dummy_pass"}

    samples = json.loads((task.root / "workspace" / "checks" / "samples.json").read_text())
    assert set(samples) == names
    visible = {(name, tuple(s["args"]), s["stdin"]) for name, group in samples.items() for s in group}
    assert not visible & {(c["args"][0], tuple(c["args"][1:]), c["stdin"]) for c in cases}


def test_manual_examples_match_the_reference(task: Task, reference: Path):
    manual = (task.root / "workspace" / "docs" / "textkit.md").read_text()
    examples = re.findall(r"```\n\$ printf (\".*?\") \| python -m textkit (.*?)\n(.*?)```", manual, re.S)
    assert len(examples) >= 5
    for printf_arg, argv, expected in examples:
        stdin = shlex.split(printf_arg)[0].encode().decode("unicode_escape")
        ran = subprocess.run([str(reference), *shlex.split(argv)], input=stdin.encode(), capture_output=True)
        assert ran.returncode == 0 and ran.stdout.decode().rstrip("\n") == expected.rstrip("\n"), argv
