"""Generated tasks (`python -m agensh_ray.tasks generate`, agensh_ray/task/generate.py): deterministic from the
seed, the graph and the sizes asked for, and scored like textkit through ProgramBench's Evaluator in bubblewrap:
the reference passes every hidden test, the oracle-built solution too, the starter none, and a feature whose
dependency or helper is missing fails while the others pass.

The scoring tests use a small F (24): an evaluation takes seconds."""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agensh_ray.task import Task
from agensh_ray.task.generate import HELPER_MARK, Params, generate
from agensh_ray.task.golden import TEST_PREFIX


def snapshot(root: Path) -> dict[str, tuple[int, bytes]]:
    return {str(p.relative_to(root)): (p.stat().st_mode & 0o777, p.read_bytes())
            for p in sorted(root.rglob("*")) if p.is_file()}


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agensh_ray.tasks", "generate", *args], capture_output=True,
                          text=True, timeout=120)


def test_same_arguments_same_bytes_another_seed_other_bytes(tmp_path: Path):
    args = ["--features", "200", "--depth", "7", "--registries", "3"]
    for out, seed in (("a", "5"), ("b", "5"), ("c", "6")):
        ran = cli(*args, "--seed", seed, "--out", str(tmp_path / out))
        assert ran.returncode == 0, ran.stderr
    a, b, c = (snapshot(tmp_path / x) for x in "abc")
    assert a == b
    assert a.keys() == c.keys()
    differ = [k for k in a if a[k] != c[k]]
    assert {"oracle/program.json", "tests.json", "src/genkit_ref.py", "workspace/docs/genkit.md"} <= set(differ)
    # written again over itself: the same bytes (nothing left over from the first)
    assert cli(*args, "--seed", "5", "--out", str(tmp_path / "a")).returncode == 0
    assert snapshot(tmp_path / "a") == b


def test_refuses_to_overwrite_a_folder_that_is_not_a_generated_task(tmp_path: Path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    ran = cli("--features", "8", "--out", str(tmp_path / "mine"))
    assert ran.returncode == 2 and "not a generated task" in ran.stderr
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
    bad = cli("--features", "8", "--depth", "9", "--out", str(tmp_path / "x"))
    assert bad.returncode == 2 and "--depth" in bad.stderr


def levels_of(features: list) -> dict[str, int]:
    """Each feature's level: the longest chain of dependencies under it (0: none)."""
    deps = {f.name: f.deps for f in features}
    memo: dict[str, int] = {}

    def level(n: str) -> int:
        if n not in memo:
            memo[n] = 1 + max((level(d) for d in deps[n]), default=-1)
        return memo[n]

    return {n: level(n) for n in deps}


@pytest.mark.parametrize("F,L,W", [(24, 4, 6), (64, 8, 20), (300, 1, 300), (100, 100, 1), (1000, 10, 250)])
def test_critical_path_and_width_are_the_ones_asked(tmp_path: Path, F: int, L: int, W: int):
    graph = generate(Params(features=F, seed=3, depth=L, width=W), tmp_path / "t")
    task = Task.load(str(tmp_path / "t"))
    features = task.features()
    levels = levels_of(features)
    per_level = [list(levels.values()).count(lv) for lv in range(max(levels.values()) + 1)]
    assert (len(features), len(per_level), max(per_level)) == (F, L, W)
    assert (graph["features"], graph["critical_path"], graph["width"], graph["levels"]) == (F, L, W, per_level)
    assert graph["ideal_speedup_at"]["8"] == round(min(8, F / L), 3)
    gen = task.instance["agensh"]["generated"]
    assert (gen["features"], gen["critical_path"], gen["width"], gen["max_parallelism"]) == (F, L, W, F / L)
    # every feature above level 0 calls one on the level just below it: its code imports its dependencies
    for f in features[:50]:
        module = task.oracle_module(f.name)
        assert all(f"from genkit.commands.{d} import" in module for d in f.deps)
        if levels[f.name]:
            assert any(levels[d] == levels[f.name] - 1 for d in f.deps)


def test_feature_sizes_are_heavy_tailed_and_set_the_tests_per_feature(tmp_path: Path):
    generate(Params(features=1000, seed=0, depth=10), tmp_path / "t")
    task = Task.load(str(tmp_path / "t"))
    sizes = [f.size for f in task.features()]
    assert max(sizes) / statistics.median(sizes) > 10, (max(sizes), statistics.median(sizes))
    assert sum(s >= 10 * statistics.median(sizes) for s in sizes) >= 10  # a tail, not one outlier
    tests = [t for b in task.instance["branches"].values() for t in b["tests"]]
    per = {f.name: sum(t.startswith(f"{TEST_PREFIX}[{f.name}-") for t in tests) for f in task.features()}
    for f in task.features():
        assert per[f.name] == f.size.bit_length() + (int(f.name[1:]) % 16 == 0)  # + a usage error every 16th
    # a feature's module has one line of steps per unit of size
    f = max(task.features(), key=lambda f: f.size)
    assert task.oracle_module(f.name).count("    lines = ops.") == f.size


def test_generation_of_4096_features_takes_seconds_and_stays_small(tmp_path: Path):
    t0 = time.monotonic()
    generate(Params(features=4096, seed=1, depth=16, registries=16), tmp_path / "t")
    took = time.monotonic() - t0
    size = sum(p.stat().st_size for p in (tmp_path / "t").rglob("*") if p.is_file())
    assert took < 60, took  # ~4 s on an idle core; a loose bound for a shared machine
    assert size < 20e6, size


# -- scoring, on F=24 -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def task(tmp_path_factory) -> Task:
    root = tmp_path_factory.mktemp("gen") / "gen-24-s7"
    generate(Params(features=24, seed=7, depth=4, registries=3, helpers=2, helper_share=0.5), root)
    return Task.load(str(root))


@pytest.fixture(scope="module")
def reference(task: Task, tmp_path_factory) -> Path:
    return task.build_reference(tmp_path_factory.mktemp("ref") / "genkit")


def active_outcomes(task: Task, submission: Path, result=None) -> dict[str, bool]:
    """Per active hidden test (ignored ones left out): case id -> passed, as a checkpoint scores."""
    result = result or task.evaluate(submission)
    ignored = {t["name"] for b in task.instance["branches"].values() for t in b["ignored_tests"]}
    out = {t.name[len(TEST_PREFIX) + 1:-1]: t.status == "passed" for t in result.test_results if t.name not in ignored}
    assert len(out) == task.active_tests()
    return out


def build(task: Task, repo: Path, skip: set[str] = frozenset(), skip_helpers: set[str] = frozenset()) -> Path:
    """What the sim does for every feature (but `skip`): its module, its registry line, its helpers."""
    task.materialize_starter(repo)
    for f in task.features():
        if f.name in skip:
            continue
        (repo / f.module).write_text(task.oracle_module(f.name))
        reg = repo / f.registry
        head, _, tail = reg.read_text().rpartition("}")
        reg.write_text(head + f.registry_line + "\n}" + tail)
        for h in f.helpers:
            path, line = task.oracle_helper(h)
            text = (repo / path).read_text()
            if h not in skip_helpers and line not in text:
                (repo / path).write_text(text.replace(HELPER_MARK, line + "\n" + HELPER_MARK))
    return repo


def feature_of(case_id: str) -> str:
    return case_id.rsplit("-", 1)[0]


def test_the_reference_passes_every_hidden_test_through_the_evaluator(task: Task, reference: Path, tmp_path: Path):
    sub = tmp_path / "sub"
    sub.mkdir()
    # ProgramBench removes a byte copy of the gold executable from a submission: ship it with one trailing byte
    # (an ELF ignores it), so the hash differs and the program is the reference.
    (sub / "ref.bin").write_bytes(reference_bytes(reference) + b"\0")
    (sub / "compile.sh").write_text("#!/bin/sh\nset -e\ncd \"$(dirname \"$0\")\"\nchmod +x ref.bin\n"
                                    "cp ref.bin executable\n")
    outcomes = active_outcomes(task, sub)
    assert outcomes and all(outcomes.values()), [k for k, v in outcomes.items() if not v]


def reference_bytes(path: Path) -> bytes:
    """The execute-only reference's bytes: root reads it; its owner can after a chmod."""
    try:
        return path.read_bytes()
    except PermissionError:
        path.chmod(0o500)
        try:
            return path.read_bytes()
        finally:
            path.chmod(0o111)


def test_the_oracle_solution_scores_1_and_the_starter_0(task: Task, tmp_path: Path):
    result = task.evaluate(build(task, tmp_path / "solved"))
    solved = active_outcomes(task, tmp_path / "solved", result)
    assert all(solved.values()), [k for k, v in solved.items() if not v]
    assert task.summarize(result).score == 1.0
    task.materialize_starter(tmp_path / "empty")
    result = task.evaluate(tmp_path / "empty")
    empty = active_outcomes(task, tmp_path / "empty", result)
    assert not any(empty.values()), [k for k, v in empty.items() if v]
    assert task.summarize(result).score == 0.0
    # the dummy-passed tests ignored are the usage errors (every 16th feature): trivial, as ProgramBench's are
    ignored = [t["name"] for b in task.instance["branches"].values() for t in b["ignored_tests"]]
    assert ignored and all(feature_of(n[len(TEST_PREFIX) + 1:-1]) in ("f0000", "f0016") for n in ignored)


def test_a_feature_whose_dependency_or_helper_is_missing_fails_and_only_those(task: Task, tmp_path: Path):
    features = {f.name: f for f in task.features()}
    levels = levels_of(task.features())
    # a level-0 feature others build on, and a helper some feature uses
    missing = next(n for n in sorted(features) if levels[n] == 0 and any(n in f.deps for f in features.values()))
    helper = next(h for f in features.values() for h in f.helpers)
    memo: dict[str, bool] = {}

    def broken(n: str) -> bool:  # its transform calls its first dependency, imports the keys of the others
        if n not in memo:
            f = features[n]
            memo[n] = (n == missing or helper in f.helpers or (bool(f.deps) and broken(f.deps[0]))
                       or any(d == missing for d in f.deps[1:]))
        return memo[n]

    outcomes = active_outcomes(task, build(task, tmp_path / "partial", skip={missing}, skip_helpers={helper}))
    want = {cid: not broken(feature_of(cid)) for cid in outcomes}
    assert outcomes == want
    assert sum(not v for v in want.values()) > sum(feature_of(c) == missing for c in want)  # dependents failed too


def test_the_visible_check_catches_the_oracle_bug_and_a_missing_dependency(task: Task, reference: Path,
                                                                           tmp_path: Path):
    repo = build(task, tmp_path / "repo")
    (repo / "reference").mkdir()
    (repo / "reference" / "genkit").write_bytes(reference_bytes(reference))
    (repo / "reference" / "genkit").chmod(0o111)
    ok = subprocess.run([sys.executable, "checks/check.py"], cwd=repo, capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0 and ok.stdout.count("PASS") == 24, ok.stdout[-2000:]
    f = next(f for f in task.features() if f.deps)
    find, replace = task.oracle_bug(f.name)
    (repo / f.module).write_text(task.oracle_module(f.name).replace(find, replace, 1))
    bad = subprocess.run([sys.executable, "checks/check.py", f.name], cwd=repo, capture_output=True, text=True)
    assert bad.returncode == 1 and f"FAIL {f.name}" in bad.stdout
    (repo / f.module).write_text(task.oracle_module(f.name))
    (repo / features_module(task, f.deps[0])).unlink()
    gone = subprocess.run([sys.executable, "checks/check.py", f.name], cwd=repo, capture_output=True, text=True)
    assert gone.returncode == 1 and f"FAIL {f.name}" in gone.stdout


def features_module(task: Task, name: str) -> str:
    return next(f.module for f in task.features() if f.name == name)


def test_task_folder_loads_like_any_task_and_the_cli_shows_it(task: Task):
    assert task.registry_paths == [f"genkit/registry/r{i:02d}.py" for i in range(3)]
    assert task.shared_paths == ["genkit/shared.py"]
    assert {f.registry for f in task.features()} <= set(task.registry_paths)
    shown = subprocess.run([sys.executable, "-m", "agensh_ray.tasks", "show", str(task.root)], capture_output=True,
                           text=True, timeout=60)
    assert shown.returncode == 0 and "genkit" in shown.stdout
    data = json.loads((task.root / "oracle" / "graph.json").read_text())
    assert data["critical_path"] == 4 and data["features"] == 24


# -- the sim on a generated task: a whole run -------------------------------------------------------------
@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.timeout(660)
def test_sim_workers_rebuild_a_generated_task_in_dependency_order(ray_session, tmp_path: Path):
    """3 sim workers on F=16 (4 levels, 2 registries, helpers used by half the features): every feature merged,
    none claimed before each of its dependencies was merged (their PATCH_SUMMARY entries come first), main
    scores 1.0, and main's shared.py holds each helper once however many PRs wrote it."""
    import io
    import re
    import tarfile
    import threading

    from agensh_ray.config import RunConfig
    from agensh_ray.driver import Run

    root = tmp_path / "gen-16-s2"
    generate(Params(features=16, seed=2, depth=4, registries=2, helpers=2, helper_share=0.5), root)
    task = Task.load(str(root))
    cfg = RunConfig(workers=3, time_scale=120, minutes=600, run_dir=tmp_path / "runs", run_id="gen", seed=3,
                    task=str(root))
    out = io.StringIO()
    result: dict = {}
    t = threading.Thread(target=lambda: result.setdefault("summary", Run(cfg, task, out=out).execute()), daemon=True)
    t.start()
    t.join(timeout=600)
    assert not t.is_alive(), "the run did not finish in time:\n" + out.getvalue()
    summary = result["summary"]
    assert summary["prs_merged"] == 16 and summary["score"] == 1.0, out.getvalue()
    deps = {f.name: f.deps for f in task.features()}
    merged_at, claims = {}, []
    for line in (tmp_path / "runs" / "gen" / "board" / "board.jsonl").read_text().splitlines():
        e = json.loads(line)
        m = re.match(r"(?:claim )?(f\d+)", e["text"])
        if e["type"] == "PATCH_SUMMARY":
            merged_at.setdefault(m.group(1), e["seq"])
        elif e["type"] == "CLAIM":
            claims.append((e["seq"], m.group(1)))
    early = [(seq, f, d) for seq, f in claims for d in deps[f] if merged_at.get(d, 10**9) > seq]
    assert not early, early
    assert any(deps[f] for _, f in claims)
    with tarfile.open(tmp_path / "runs" / "gen" / "checkpoints" / "submission.tar.gz") as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("genkit/shared.py"))
        shared = tar.extractfile(member).read().decode()
    used = {h for f in task.features() for h in f.helpers}
    assert used and all(shared.count(task.oracle_helper(h)[1]) == 1 for h in used), shared
