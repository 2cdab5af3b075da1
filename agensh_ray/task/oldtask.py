"""The demo task the workers rebuild: load it, seed a run's repository, score it.

A task is a directory (bundled ones live in `<repo>/tasks/<name>/`) with:

* `task.json`: name, title, program (see `TaskSpec`);
* `task.md`: the task text every worker gets (issue #1 of the run's forge);
* `starter/`: the initial content of the shared repository;
* `reference_src/<program>_ref.py`: the reference implementation, shipped to
  the workers only as bytecode (`reference/<program>.pyz`) so that the
  behaviour is observable but the solution is not copyable;
* `oracle/`: correct per-feature modules and a plausible bug for each, read
  only by the simulated agent, which stands in for an LLM writing code;
* `hidden_tests/cases.json` and `score.py`: the hidden tests and their runner.

Scoring runs `score.py` in a subprocess so that a build under test (which is
arbitrary code written by the workers) never runs inside the caller.
"""

from __future__ import annotations

import json
import py_compile
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from agensh_ray.errors import TaskError
from agensh_ray.paths import TASKS_DIR

TASK_FILE = "task.json"

# Fixed zip entry time: the same reference source gives a byte-identical archive.
_ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)


class Feature(BaseModel):
    """One independently buildable unit of the program: a subcommand."""

    name: str
    module: str
    """Path of the feature's module inside the repository, e.g. `textkit/commands/upper.py`."""
    registry_line: str
    """The exact line that registers it, inserted just above the closing `}` of the registry."""


class ScoreResult(BaseModel):
    """Hidden-test outcome for one repository state."""

    passed: int
    failed: int
    total: int
    pass_rate: float
    tests: list[dict]
    """One {"id", "feature", "ok"} per hidden test."""


class TaskSpec(BaseModel):
    """The contents of `task.json`."""

    model_config = ConfigDict(extra="allow")
    name: str
    title: str
    program: str
    registry: str
    """The shared file every feature registers itself in (where merges conflict)."""


class Bug(BaseModel):
    find: str
    replace: str


def known_tasks() -> list[str]:
    """Names of the bundled tasks (directories of TASKS_DIR holding a task.json)."""
    if not TASKS_DIR.is_dir():
        return []
    return sorted(p.name for p in TASKS_DIR.iterdir() if (p / TASK_FILE).is_file())


class Task:
    """A loaded task directory. Construct with `Task.load`."""

    def __init__(self, root: Path, spec: TaskSpec):
        self.root = root
        self.spec = spec
        self.name = spec.name
        self.title = spec.title
        self.program = spec.program
        self.registry_path = spec.registry
        self._features: list[Feature] | None = None

    def __repr__(self) -> str:
        return f"Task(name={self.name!r}, root={str(self.root)!r})"

    @classmethod
    def load(cls, name_or_path: str = "textkit") -> "Task":
        """A bundled task by name, or any task directory by path."""
        if name_or_path in known_tasks():
            root = TASKS_DIR / name_or_path
        elif Path(name_or_path).is_dir():
            root = Path(name_or_path)
        else:
            known = ", ".join(known_tasks()) or "none"
            raise TaskError(
                f"unknown task {name_or_path!r}: not a bundled task (known: {known}) "
                f"and not a directory"
            )
        root = root.resolve()
        spec_path = root / TASK_FILE
        if not spec_path.is_file():
            raise TaskError(f"{root} is not a task directory: it has no {TASK_FILE}")
        try:
            spec = TaskSpec.model_validate_json(spec_path.read_text(encoding="utf-8"))
        except ValidationError as e:
            raise TaskError(f"invalid {spec_path}: {e}") from e
        return cls(root, spec)

    # --- what the workers see ---------------------------------------------

    def text(self) -> str:
        """The task statement (task.md)."""
        return self._read("task.md")

    def materialize_starter(self, dest: Path) -> None:
        """Write the initial repository into `dest`: the starter files plus the
        reference executable, compiled here from the reference source.

        The archive holds only `__main__.pyc`, compiled by the running
        interpreter: it runs with this Python version (the one the workers
        use) and contains no source to copy from.
        """
        starter = self.root / "starter"
        if not starter.is_dir():
            raise TaskError(f"task {self.name!r} has no starter/ directory at {starter}")
        dest = Path(dest)
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copytree(
            starter,
            dest,
            dirs_exist_ok=True,
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
        )
        self.build_reference(dest / "reference" / f"{self.program}.pyz")

    def build_reference(self, archive: Path) -> None:
        """Compile the reference source into a bytecode-only zipapp at `archive`."""
        source = self.root / "reference_src" / f"{self.program}_ref.py"
        if not source.is_file():
            raise TaskError(f"task {self.name!r} has no reference source at {source}")
        archive.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="agensh-ref-") as tmp:
            pyc = Path(tmp) / "__main__.pyc"
            try:
                py_compile.compile(
                    str(source),
                    cfile=str(pyc),
                    dfile=f"{self.program}.pyz/__main__.py",
                    doraise=True,
                    optimize=2,  # also drops the docstrings
                    invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
                )
            except py_compile.PyCompileError as e:
                raise TaskError(f"reference source of task {self.name!r} does not compile: {e.msg}") from e
            info = zipfile.ZipInfo("__main__.pyc", date_time=_ZIP_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            with zipfile.ZipFile(archive, "w") as zf:
                zf.writestr(info, pyc.read_bytes())

    # --- what only the simulated agent sees -------------------------------

    def features(self) -> list[Feature]:
        """Every feature of the task, in the oracle's order."""
        if self._features is None:
            try:
                self._features = TypeAdapter(list[Feature]).validate_json(self._read("oracle/features.json"))
            except ValidationError as e:
                raise TaskError(f"invalid oracle/features.json in task {self.name!r}: {e}") from e
        return self._features

    def oracle_module(self, name: str) -> str:
        """A correct implementation of feature `name` (the text of its module)."""
        return self._read(f"oracle/commands/{Path(self._feature(name).module).name}")

    def oracle_bug(self, name: str) -> tuple[str, str]:
        """(find, replace) on the oracle module: a plausible bug that fails the visible check."""
        self._feature(name)
        bugs = json.loads(self._read("oracle/bugs.json"))
        if name not in bugs:
            raise TaskError(f"task {self.name!r} has no oracle bug for feature {name!r}")
        bug = Bug.model_validate(bugs[name])
        return bug.find, bug.replace

    # --- hidden scoring ------------------------------------------------------

    def score(self, repo_dir: Path, timeout_s: float = 120) -> ScoreResult:
        """Run the hidden tests against the build in `repo_dir` (in a subprocess)."""
        repo_dir = Path(repo_dir).resolve()
        if not repo_dir.is_dir():
            raise TaskError(f"cannot score {repo_dir}: not a directory")
        cmd = [sys.executable, str(self.root / "score.py"), str(repo_dir), "--json", "--timeout", str(timeout_s)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s + 30)
        except subprocess.TimeoutExpired as e:
            raise TaskError(f"scoring {repo_dir} timed out after {timeout_s + 30:.0f}s") from e
        if proc.returncode != 0:
            raise TaskError(f"score.py failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")
        try:
            return ScoreResult.model_validate_json(proc.stdout.strip().splitlines()[-1])
        except (IndexError, ValidationError) as e:
            raise TaskError(f"score.py printed no valid result: {proc.stdout[-2000:]!r}") from e

    # --- helpers -------------------------------------------------------------

    def _read(self, relpath: str) -> str:
        path = self.root / relpath
        try:
            return path.read_text(encoding="utf-8")
        except FileNotFoundError as e:
            raise TaskError(f"task {self.name!r} is missing {relpath} ({path})") from e

    def _feature(self, name: str) -> Feature:
        for feature in self.features():
            if feature.name == name:
                return feature
        known = ", ".join(f.name for f in self.features())
        raise TaskError(f"task {self.name!r} has no feature {name!r} (known: {known})")
