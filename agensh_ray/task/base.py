"""What every task offers, whichever its source: the text, the starting repository, the
execute-only reference, and scoring by ProgramBench's rules.

Sources (`Task.load`):

* `programbench:<instance_id>`: an instance of ProgramBench's catalogue (`catalogue.py`): the
  cleanroom image gives the workspace and reference, the package's Evaluator scores in Docker;
* a folder in ProgramBench's task format (`local.py`), scored without Docker in bubblewrap by
  the same Evaluator steps; the bundled tasks (`tasks/<name>/`, e.g. `textkit`) are such folders.
"""

from __future__ import annotations

import threading
from pathlib import Path

from programbench.eval.eval import EvaluationResult
from pydantic import BaseModel

from agensh_ray.errors import TaskError
from agensh_ray.task.evaluate import ScoreSummary, summarize
from agensh_ray.task.reference import REFERENCE_DIR

CATALOGUE_PREFIX = "programbench:"


class Feature(BaseModel):
    """One independently buildable unit of the program (the sim's oracle): a subcommand."""

    name: str
    module: str
    """Path of the feature's module inside the repository, e.g. `textkit/commands/upper.py`."""
    registry_line: str
    """The exact line that registers it, inserted just above the closing `}` of the registry."""
    registry: str | None = None
    """The registry file it registers in, where a task has several (generated tasks); None: the task's one."""
    deps: list[str] = []
    """Features whose code this one's calls: it cannot pass its checks before they are merged."""
    helpers: list[str] = []
    """Shared helpers it uses (`Task.oracle_helper`): whoever first needs one writes its line."""
    size: int | None = None
    """Lines of its code (generated tasks; the sim spends steps in proportion); None: not modelled."""


class Task:
    """A loaded task. Construct with `Task.load`."""

    source: str = ""
    """local | programbench."""
    instance_id: str = ""
    name: str = ""
    title: str = ""
    program: str = "executable"
    """The reference's file name in `reference/`."""
    root: Path | None = None
    """The task folder (local tasks)."""
    instance: dict = {}
    """The instance as ProgramBench's `load_data` loads it (task.yaml + tests.json)."""
    registry_path: str | None = None
    registry_paths: list[str] = []
    """Every registry file (generated tasks have several); the one registry_path otherwise."""
    shared_paths: list[str] = []
    """Shared helper files features add lines to (generated tasks)."""

    @classmethod
    def load(cls, spec: str = "textkit") -> "Task":
        """`programbench:<instance_id>`, a bundled task's name, or a task folder's path."""
        if spec.startswith(CATALOGUE_PREFIX):
            from agensh_ray.task.catalogue import CatalogueTask

            return CatalogueTask(spec[len(CATALOGUE_PREFIX):])
        from agensh_ray.task.local import LocalTask

        return LocalTask.open(spec)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    # -- what the workers see ------------------------------------------------------------------
    def text(self) -> str:
        raise NotImplementedError

    def materialize_starter(self, dest: Path) -> None:
        """Write the repository's first commit into `dest` (never the reference, never the tests)."""
        raise NotImplementedError

    def build_reference(self, dest: Path) -> Path:
        """Write the reference executable to `dest`, execute-only (mode 0111)."""
        raise NotImplementedError

    @property
    def reference_relpath(self) -> str:
        return f"{REFERENCE_DIR}/{self.program}"

    # -- scoring -------------------------------------------------------------------------------
    def check_available(self) -> None:
        """Raise TaskUnavailable naming what this machine lacks to run and score the task."""

    def check_for(self, harness: str) -> None:
        """Raise TaskError, before a run starts anything, when this task cannot be run by `harness`: the sim
        agent needs the task's oracle (the features it builds); a task folder, what the format asks for
        (`LocalTask.missing`)."""
        if harness == "sim":
            self.features()

    def evaluate(self, submission: Path, scratch: Path | None = None,
                 cancel: threading.Event | None = None, strict: bool = False,
                 as_is: bool = False) -> EvaluationResult:
        """ProgramBench's evaluation of a submission (folder or archive with a compile.sh). `cancel` set while it
        runs: it stops as soon as it can, with a result nobody should use (where the backend supports it).
        Its log's `runner_files` step lists what the built tree holds that changes the test runner (where the
        backend looks: the bubblewrap one does); `strict`: the same evaluation with those removed after the
        build (agensh_ray/task/evaluate.py). `as_is`: a submission without compile.sh is evaluated (a run's
        checkpoint: its build fails, ProgramBench's `compile_failed`), not refused with SubmissionError."""
        raise NotImplementedError

    def summarize(self, result: EvaluationResult) -> ScoreSummary:
        return summarize(result, self.instance)

    def active_tests(self) -> int:
        """Tests that count: those of active branches, ignored tests left out."""
        n = 0
        for info in (self.instance.get("branches") or {}).values():
            if not info.get("ignored"):
                ignored = {t["name"] for t in info.get("ignored_tests") or []}
                n += sum(t not in ignored for t in info.get("tests") or [])
        return n

    # -- what only the simulated agent sees ------------------------------------------------------
    def features(self) -> list[Feature]:
        raise TaskError(f"task {self.name!r} has no oracle: the sim harness needs one (the bundled textkit has)")

    def oracle_module(self, name: str) -> str:
        raise TaskError(f"task {self.name!r} has no oracle")

    def oracle_bug(self, name: str) -> tuple[str, str]:
        raise TaskError(f"task {self.name!r} has no oracle")

    def oracle_helper(self, name: str) -> tuple[str, str]:
        """(file, line) of a shared helper a feature uses."""
        raise TaskError(f"task {self.name!r} has no helpers")
