"""A task folder in ProgramBench's task format, run and scored on this machine without Docker.

    <instance_id>/                 the folder's name is the instance id (as ProgramBench's loader has it)
      task.yaml                    ProgramBench's (repository, commit, language, difficulty, eval_clean_hashes)
                                   plus an `agensh:` section: title, program, text, registry (see LocalSpec)
      tests.json                   ProgramBench's: branches, ignored branches and ignored tests with reasons
      tests/<branch>/eval/run.sh   each branch's hidden tests (writes eval/results.xml, JUnit)
      workspace/                   the repository's first commit: docs, starter code, compile.sh
      executable                   the reference; or build.sh, which builds ./executable in a copy of src/
      task.md                      the task text (issue #1); without it, prompts/task.md filled in
      oracle/                      optional: what the sim agent knows (features.json, commands/, bugs.json;
                                   a generated task: program.json, helpers.json, graph.json instead of the code)

Scoring is `evaluate.evaluate` (the package's Evaluator in bubblewrap) with each branch's tests
packed as ProgramBench's blob store packs them (`tests/<branch>.tar.gz`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import threading
from pathlib import Path

import yaml
from programbench.eval.eval import EvaluationResult
from programbench.utils.load_data import _load_single_instance, get_active_branches
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from agensh_ray.errors import TaskError
from agensh_ray import prompts
from agensh_ray.paths import TASKS_DIR
from agensh_ray.task.base import Feature, Task
from agensh_ray.task.evaluate import evaluate

TASK_YAML = "task.yaml"


class LocalSpec(BaseModel):
    """The `agensh:` section of a local task.yaml."""

    model_config = ConfigDict(extra="allow")
    title: str = ""
    """Issue #1's title; default: "Rebuild <program>"."""
    program: str = "executable"
    """The reference's name in each worker's clone: `reference/<program>`."""
    registry: str | None = None
    """The shared file every feature registers in (the sim agent's merge conflicts), if any."""
    registries: list[str] = []
    """Every registry file, where features register in several (generated tasks); default [registry]."""
    shared: list[str] = []
    """Shared helper files features add lines to (generated tasks: oracle/helpers.json says which)."""
    hide: list[str] = []
    """Host paths masked in the scoring sandbox (the original program where the host has it installed),
    so a build under test cannot delegate to it."""


class Bug(BaseModel):
    find: str
    replace: str


def known_tasks() -> list[str]:
    """Names of the bundled tasks (folders of tasks/ holding a task.yaml)."""
    if not TASKS_DIR.is_dir():
        return []
    return sorted(p.name for p in TASKS_DIR.iterdir() if (p / TASK_YAML).is_file())


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class LocalTask(Task):
    source = "local"

    def __init__(self, root: Path):
        self.root = Path(root).resolve()
        try:
            self.instance = _load_single_instance(self.root, include_tests=True)
        except (OSError, yaml.YAMLError, json.JSONDecodeError) as e:
            raise TaskError(f"cannot read task {self.root}: {e}") from e
        try:
            self.spec = LocalSpec.model_validate(self.instance.get("agensh") or {})
        except ValidationError as e:
            raise TaskError(f"invalid agensh: section in {self.root / TASK_YAML}: {e}") from e
        self.instance_id = self.name = self.root.name
        self.program = self.spec.program
        self.title = self.spec.title or f"Rebuild {self.program}"
        self.registry_path = self.spec.registry
        self.registry_paths = self.spec.registries or ([self.spec.registry] if self.spec.registry else [])
        self.shared_paths = list(self.spec.shared)
        self._features: list[Feature] | None = None
        self._helpers: dict | None = None
        shipped = self.root / "executable"
        self._reference_hash: str | None = sha256(shipped) if shipped.is_file() else None

    @classmethod
    def open(cls, name_or_path: str) -> "LocalTask":
        """A bundled task by name, or any task folder by path."""
        if "/" not in name_or_path and name_or_path in known_tasks():
            root = TASKS_DIR / name_or_path
        elif Path(name_or_path).is_dir():
            root = Path(name_or_path)
        else:
            known = ", ".join(known_tasks()) or "none"
            raise TaskError(f"unknown task {name_or_path!r}: not a bundled task (known: {known}), not a task "
                            "folder, and not programbench:<instance_id> (python -m agensh_ray.tasks list)")
        if not (root / TASK_YAML).is_file():
            raise TaskError(f"{root} is not a task folder in ProgramBench's format: it has no {TASK_YAML}")
        return cls(root)

    def check_for(self, harness: str) -> None:
        if missing := self.missing():
            raise TaskError(f"{self.root} is not a task folder in ProgramBench's format a run can use: it has no "
                            + "; no ".join(missing) + " (the format: docs/tasks.md)")
        super().check_for(harness)

    def missing(self) -> list[str]:
        """What the folder lacks that a run needs (the run would fail after it started without it): the hidden
        tests (tests.json naming an active branch, each active branch's tests/<branch>/eval/run.sh) and the
        reference (`executable`, or build.sh with src/)."""
        out = []
        if not (self.root / "tests.json").is_file():
            out.append("tests.json (the hidden tests' branches)")
        else:
            branches = get_active_branches(self.instance)
            if not branches:
                out.append("active branch in tests.json")
            out += [f"tests/{b}/eval/run.sh" for b in branches
                    if not (self.root / "tests" / b / "eval" / "run.sh").is_file()]
        if not (self.root / "executable").is_file() and not ((self.root / "build.sh").is_file()
                                                              and (self.root / "src").is_dir()):
            out.append("reference: neither `executable` nor build.sh with src/")
        return out

    # -- what the workers see ------------------------------------------------------------------
    def text(self) -> str:
        own = self.root / "task.md"
        if own.is_file():
            return own.read_text(encoding="utf-8")
        return prompts.task(self.program, self.reference_relpath, self.instance.get("language", "any"))

    def materialize_starter(self, dest: Path) -> None:
        dest = Path(dest)
        dest.mkdir(parents=True, exist_ok=True)
        ws = self.root / "workspace"
        if ws.is_dir():
            shutil.copytree(ws, dest, dirs_exist_ok=True, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            (dest / "README.md").write_text(f"# {self.title}\n")

    def build_reference(self, dest: Path) -> Path:
        """The reference at `dest` (0111): the folder's `executable`, or what build.sh builds from src/."""
        dest = Path(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shipped = self.root / "executable"
        if shipped.is_file():
            tmp = dest.with_name(dest.name + ".tmp")
            shutil.copyfile(shipped, tmp)
        else:
            build, src = self.root / "build.sh", self.root / "src"
            if not (build.is_file() and src.is_dir()):
                raise TaskError(f"task {self.name!r} has no reference: neither {shipped} nor build.sh with src/")
            with tempfile.TemporaryDirectory(prefix="agensh-ref-") as tmpdir:
                work = Path(tmpdir) / "src"
                shutil.copytree(src, work)
                proc = subprocess.run(["bash", str(build)], cwd=work, capture_output=True, text=True, timeout=600)
                built = work / "executable"
                if proc.returncode != 0 or not built.is_file():
                    raise TaskError(f"build.sh of task {self.name!r} failed (exit {proc.returncode}): "
                                    f"{(proc.stdout + proc.stderr).strip()[-1500:]}")
                tmp = dest.with_name(dest.name + ".tmp")
                built.chmod(0o700)  # build.sh may leave it execute-only: its owner reads it back (no root needed)
                shutil.copyfile(built, tmp)
        self._reference_hash = sha256(tmp)  # before it is execute-only: a non-root owner cannot read it after
        os.chmod(tmp, 0o111)
        os.replace(tmp, dest)
        return dest

    # -- scoring -------------------------------------------------------------------------------
    def evaluate(self, submission: Path, scratch: Path | None = None,
                 cancel: threading.Event | None = None, strict: bool = False,
                 as_is: bool = False) -> EvaluationResult:
        # A byte copy of the reference in a submission is removed before compiling, as ProgramBench
        # removes the gold executable by its hash (eval_clean_hashes).
        extra = [self._reference_hash] if self._reference_hash else []
        with tempfile.TemporaryDirectory(prefix="agensh-blobs-", dir=scratch) as blobs:
            self.pack_tests(Path(blobs))
            return evaluate(self.instance, Path(submission), Path(blobs), remove_hashes=extra, scratch=scratch,
                            hide=self.spec.hide, cancel=cancel, strict=strict, as_is=as_is)

    def pack_tests(self, blob_dir: Path) -> None:
        """Each branch's tests as ProgramBench's blob store has them: blob_dir/tests/<branch>.tar.gz."""
        out = Path(blob_dir) / "tests"
        out.mkdir(parents=True, exist_ok=True)
        for branch in self.instance.get("branches") or {}:
            src = self.root / "tests" / branch
            if not src.is_dir():
                continue  # the Evaluator reports the branch as failed (its tests are not_run)
            with tarfile.open(out / f"{branch}.tar.gz", "w:gz") as tar:
                for p in sorted(src.iterdir()):
                    tar.add(p, arcname=p.name, filter=lambda ti: None if "__pycache__" in ti.name else ti)

    # -- what only the simulated agent sees ------------------------------------------------------
    def features(self) -> list[Feature]:
        if self._features is None:
            if not (self.root / "oracle" / "features.json").is_file():
                raise TaskError(f"task {self.name!r} has no oracle: the sim harness needs one (oracle/features.json "
                                "in its folder; the bundled textkit has one); run it with a real agent's --harness")
            try:
                self._features = TypeAdapter(list[Feature]).validate_json(self._read("oracle/features.json"))
            except ValidationError as e:
                raise TaskError(f"invalid oracle/features.json in task {self.name!r}: {e}") from e
        return self._features

    @property
    def generated(self) -> bool:
        """A generated task (agensh_ray/task/generate.py): its oracle's code is rendered from oracle/program.json."""
        return (self.root / "oracle" / "program.json").is_file()

    def oracle_module(self, name: str) -> str:
        if self.generated:
            from agensh_ray.task import generate

            self._feature(name)
            return generate.oracle_module(self.root, name)
        return self._read(f"oracle/commands/{Path(self._feature(name).module).name}")

    def oracle_bug(self, name: str) -> tuple[str, str]:
        self._feature(name)
        if self.generated:
            from agensh_ray.task import generate

            return generate.oracle_bug(self.root, name)
        bugs = json.loads(self._read("oracle/bugs.json"))
        if name not in bugs:
            raise TaskError(f"task {self.name!r} has no oracle bug for feature {name!r}")
        bug = Bug.model_validate(bugs[name])
        return bug.find, bug.replace

    def oracle_helper(self, name: str) -> tuple[str, str]:
        if self._helpers is None:
            self._helpers = json.loads(self._read("oracle/helpers.json"))
        if name not in self._helpers:
            raise TaskError(f"task {self.name!r} has no helper {name!r}")
        return self._helpers[name]["file"], self._helpers[name]["line"]

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
