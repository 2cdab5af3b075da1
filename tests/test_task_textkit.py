"""The bundled textkit task: starter, reference zipapp, oracle, hidden scoring.

Real files, real git, real subprocesses: these are the properties a run
depends on (an empty starter scores nothing, the oracle scores everything,
an oracle bug is caught by the visible checks, two features merged in
parallel conflict in the registry and resolve by keeping both lines).
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import subprocess
import sys
import zipfile
from collections import Counter
from pathlib import Path

import pytest

from agensh_ray.errors import TaskError
from agensh_ray.task import Feature, Task, known_tasks


@pytest.fixture(scope="module")
def task() -> Task:
    return Task.load("textkit")


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


def test_starter_has_opaque_reference_and_scores_zero(task: Task, tmp_path: Path):
    repo = tmp_path / "repo"
    task.materialize_starter(repo)

    with zipfile.ZipFile(repo / "reference" / "textkit.pyz") as zf:
        assert zf.namelist() == ["__main__.pyc"]
    ran = subprocess.run(
        [sys.executable, "reference/textkit.pyz", "upper"], cwd=repo, input="hello\n", capture_output=True, text=True
    )
    assert (ran.stdout, ran.returncode) == ("HELLO\n", 0)

    assert (repo / "docs" / "textkit.md").read_text() == (task.root / "docs" / "textkit.md").read_text()
    assert run_checks(repo).returncode == 0  # nothing registered yet: main starts green

    result = task.score(repo)
    assert result.passed == 0
    assert result.total >= 56
    assert result.failed == result.total and result.pass_rate == 0.0


def test_every_oracle_feature_scores_full_marks(task: Task, tmp_path: Path):
    repo = tmp_path / "repo"
    task.materialize_starter(repo)
    features = task.features()
    assert len(features) >= 14
    for feature in features:
        apply_feature(repo, feature, task.oracle_module(feature.name))

    result = task.score(repo)
    assert (result.passed, result.failed) == (result.total, 0), [t for t in result.tests if not t["ok"]]
    assert result.pass_rate == 1.0

    checks = run_checks(repo)
    assert checks.returncode == 0, checks.stdout
    assert sorted(checks.stdout.split()[1::2]) == sorted(f.name for f in features)


def test_every_oracle_bug_fails_its_visible_check(task: Task, tmp_path: Path):
    repo = tmp_path / "repo"
    task.materialize_starter(repo)
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
    # ... and the hidden tests see each bug too.
    result = task.score(repo)
    assert {t["feature"] for t in result.tests if not t["ok"]} == {f.name for f in features}


def test_parallel_features_conflict_in_registry_and_merge_by_keeping_both(task: Task, git_env: Path):
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

    result = task.score(repo)
    passed = {t["feature"] for t in result.tests if t["ok"]}
    failed = {t["feature"] for t in result.tests if not t["ok"]}
    assert passed == {"upper", "lower"} and not passed & failed
    assert run_checks(repo).returncode == 0


def test_broken_build_scores_failures_instead_of_crashing(task: Task, tmp_path: Path):
    repo = tmp_path / "repo"
    task.materialize_starter(repo)
    upper, lower, title = (f for f in task.features() if f.name in ("upper", "lower", "title"))
    apply_feature(repo, upper, "def main(args, stdin):\n    return stdin.upper(, 0\n")  # syntax error
    apply_feature(repo, lower, "import os\n\ndef main(args, stdin):\n    os._exit(3)\n")  # kills the scorer's child
    apply_feature(repo, title, task.oracle_module("title"))
    result = task.score(repo)
    assert {t["feature"] for t in result.tests if t["ok"]} == {"title"}  # scoring went on after the crashes

    (repo / "textkit" / "registry.py").write_text("COMMANDS = {\n<<<<<<< HEAD\n}\n")
    result = task.score(repo)
    assert result.passed == 0 and result.total >= 56
    assert "FAIL" in run_checks(repo, "upper").stdout


def test_unknown_task_lists_known_tasks(tmp_path: Path):
    assert "textkit" in known_tasks()
    with pytest.raises(TaskError, match=r"unknown task 'nope'.*known: .*textkit"):
        Task.load("nope")
    with pytest.raises(TaskError, match="no task.json"):
        Task.load(str(tmp_path))
    with pytest.raises(TaskError, match="no feature 'nope'"):
        Task.load("textkit").oracle_bug("nope")


def test_task_loads_by_path_and_describes_itself(task: Task):
    by_path = Task.load(str(task.root))
    assert (by_path.name, by_path.title, by_path.root) == ("textkit", task.title, task.root)
    text = task.text()
    for needle in ("reference/textkit.pyz", "textkit/registry.py", "checks/check.py", "Never push to `main` directly"):
        assert needle in text
    for feature in task.features():
        assert feature.module == f"textkit/commands/{feature.name.replace('-', '_')}.py"
        assert feature.registry_line == f'    "{feature.name}": "textkit.commands.{feature.name.replace("-", "_")}",'


def test_hidden_cases_are_generated_and_cover_every_feature(task: Task):
    regen = subprocess.run(
        [sys.executable, str(task.root / "hidden_tests" / "generate.py"), "--check"], capture_output=True, text=True
    )
    assert regen.returncode == 0, regen.stderr
    cases = json.loads((task.root / "hidden_tests" / "cases.json").read_text())["cases"]
    names = {f.name for f in task.features()}
    per_feature = Counter(c["feature"] for c in cases)
    assert set(per_feature) == names and min(per_feature.values()) >= 4
    assert len({c["id"] for c in cases}) == len(cases)

    samples = json.loads((task.root / "starter" / "checks" / "samples.json").read_text())
    assert set(samples) == names
    visible = {(name, tuple(s["args"]), s["stdin"]) for name, group in samples.items() for s in group}
    assert not visible & {(c["feature"], tuple(c["args"]), c["stdin"]) for c in cases}


def test_manual_examples_match_the_reference(task: Task):
    spec = importlib.util.spec_from_file_location("textkit_ref", task.root / "reference_src" / "textkit_ref.py")
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)
    manual = (task.root / "docs" / "textkit.md").read_text()
    examples = re.findall(r"```\n\$ printf (\".*?\") \| python -m textkit (.*?)\n(.*?)```", manual, re.S)
    assert len(examples) >= 5
    for printf_arg, argv, expected in examples:
        stdin = shlex.split(printf_arg)[0].encode().decode("unicode_escape")
        stdout, _, code = ref.run(shlex.split(argv), stdin)
        assert code == 0 and stdout.rstrip("\n") == expected.rstrip("\n"), argv
