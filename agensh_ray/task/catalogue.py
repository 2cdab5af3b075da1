"""ProgramBench's catalogue: `programbench:<instance_id>`, the production path.

An instance's workspace and execute-only reference come from its cleanroom image
(`programbench/<id with __ as _1776_>:task_cleanroom_v6`, /workspace with ./executable and the
docs); scoring is the package's own `Evaluator` in Docker with the hidden tests from its blob
store (PROGRAMBENCH_BLOB_DIR, or the Hugging Face dataset). Where those are missing,
`check_available` fails within seconds, naming each missing piece and how to provide it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
from functools import cache
from pathlib import Path

from programbench.constants import DOCKER_EXECUTABLE, HF_REPO_ID, WORKSPACE_DIR
from programbench.eval.eval import EvaluationResult, Evaluator
from programbench.utils.load_data import get_active_branches, get_ignored_branches, get_ignored_tests, load_all_instances

from agensh_ray.errors import TaskError, TaskUnavailable
from agensh_ray import prompts
from agensh_ray.task.base import CATALOGUE_PREFIX, Task
from agensh_ray.task.evaluate import submission_archive

IMAGE_TAG = "task_cleanroom_v6"
PROBE_TIMEOUT_S = 5.0


@cache
def catalogue() -> dict[str, dict]:
    """Every instance the package ships, by id (task.yaml + tests.json)."""
    return {i["instance_id"]: i for i in load_all_instances()}


def _run(argv: list[str], timeout: float = PROBE_TIMEOUT_S) -> tuple[int, str]:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        return 127, f"{argv[0]}: not found"
    except subprocess.TimeoutExpired:
        return 124, f"{' '.join(argv[:3])} did not answer within {timeout:.0f}s"
    return p.returncode, (p.stdout + p.stderr).strip()


def missing_requirements(instance: dict) -> list[str]:
    """What this machine lacks to run and score `instance`, one sentence each (with the fix); empty
    when everything is there. Bounded: each probe has a few seconds."""
    image = f"{instance['image_name']}:{IMAGE_TAG}"
    missing: list[str] = []
    engine = shutil.which(DOCKER_EXECUTABLE)
    if engine is None:
        missing.append(f"a container engine: `{DOCKER_EXECUTABLE}` is not on PATH (install Docker, or set "
                       "PROGRAMBENCH_DOCKER_EXECUTABLE to a Docker-compatible CLI such as podman)")
        missing.append(f"the cleanroom image {image}: cannot be looked up without a container engine "
                       f"(with one: `{DOCKER_EXECUTABLE} pull {image}`)")
    else:
        rc, out = _run([engine, "info", "--format", "{{.ServerVersion}}"])
        if rc != 0:
            missing.append(f"a running container engine: `{DOCKER_EXECUTABLE} info` failed ({out[-200:]}); start "
                           "the daemon or give this user access to it")
            missing.append(f"the cleanroom image {image}: cannot be looked up without a running container engine "
                           f"(with one: `{DOCKER_EXECUTABLE} pull {image}`)")
        else:
            rc, out = _run([engine, "image", "inspect", image])
            if rc != 0:
                missing.append(f"the cleanroom image {image}: not present locally (`{DOCKER_EXECUTABLE} pull {image}`)")
    blob_root = os.environ.get("PROGRAMBENCH_BLOB_DIR", "")
    iid = instance["instance_id"]
    if blob_root:
        if not (Path(blob_root) / iid / "tests").is_dir():
            missing.append(f"the test blobs: PROGRAMBENCH_BLOB_DIR={blob_root} has no {iid}/tests/ "
                           f"(`programbench blob` fetches them, or copy them from the {HF_REPO_ID} dataset)")
    elif not _hub_reachable():
        missing.append(f"the test blobs: PROGRAMBENCH_BLOB_DIR is not set and the Hugging Face dataset {HF_REPO_ID} "
                       f"is not reachable from here; set PROGRAMBENCH_BLOB_DIR to a folder holding {iid}/tests/"
                       "<branch>.tar.gz, or give this machine access to huggingface.co")
    return missing


def _hub_reachable() -> bool:
    import socket

    try:
        socket.create_connection(("huggingface.co", 443), timeout=PROBE_TIMEOUT_S).close()
        return True
    except OSError:
        return False


class CatalogueTask(Task):
    source = "programbench"

    def __init__(self, instance_id: str):
        instances = catalogue()
        if instance_id not in instances:
            close = [i for i in instances if instance_id.split(".")[0] in i][:5]
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise TaskError(f"unknown ProgramBench instance {instance_id!r}{hint}: "
                            "python -m agensh_ray.tasks list --source programbench lists them")
        self.instance = instances[instance_id]
        self.instance_id = instance_id
        self.name = f"{CATALOGUE_PREFIX}{instance_id}"
        self.program = "executable"
        self.title = f"Rebuild {self.instance.get('repository', instance_id)}"
        self.image = f"{self.instance['image_name']}:{IMAGE_TAG}"

    def check_available(self) -> None:
        missing = missing_requirements(self.instance)
        if missing:
            lines = "\n".join(f"  - {m}" for m in missing)
            raise TaskUnavailable(f"{self.name} cannot run on this machine; it needs:\n{lines}")

    def text(self) -> str:
        return prompts.task(self.program, self.reference_relpath, self.instance.get("language", "any"))

    def _workspace(self, dest: Path) -> None:
        """Copy the cleanroom image's /workspace to `dest` (docker create + cp; nothing runs)."""
        self.check_available()
        rc, cid = _run([DOCKER_EXECUTABLE, "create", self.image], timeout=300)
        if rc != 0:
            raise TaskUnavailable(f"cannot create a container of {self.image}: {cid}")
        try:
            rc, out = _run([DOCKER_EXECUTABLE, "cp", f"{cid.splitlines()[-1]}:{WORKSPACE_DIR}/.", str(dest)], timeout=600)
            if rc != 0:
                raise TaskError(f"cannot copy {WORKSPACE_DIR} out of {self.image}: {out}")
        finally:
            _run([DOCKER_EXECUTABLE, "rm", "-f", cid.splitlines()[-1]], timeout=60)

    def materialize_starter(self, dest: Path) -> None:
        dest = Path(dest)
        dest.mkdir(parents=True, exist_ok=True)
        self._workspace(dest)
        (dest / "executable").unlink(missing_ok=True)  # the reference goes to reference/, untracked

    def build_reference(self, dest: Path) -> Path:
        with tempfile.TemporaryDirectory(prefix="agensh-cleanroom-") as tmp:
            self._workspace(Path(tmp))
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(Path(tmp) / "executable", dest)
        os.chmod(dest, 0o111)
        return dest

    def evaluate(self, submission: Path, scratch: Path | None = None,
                 cancel: threading.Event | None = None, strict: bool = False,
                 as_is: bool = False) -> EvaluationResult:
        """The package's own Docker evaluation, called as `programbench eval` calls it (runs to its end even when
        cancelled: the containers are the package's). Its containers are not looked into for files that change
        the test runner (no `runner_files` step: the strict score is unknown, `strict` has no effect)."""
        self.check_available()
        from programbench.utils.blob_store import get_blob_dir

        branches = get_active_branches(self.instance)
        data = self.instance.get("branches") or {}
        with tempfile.TemporaryDirectory(prefix="agensh-sub-", dir=scratch) as tmp:
            archive = submission_archive(Path(submission), Path(tmp), as_is)
            return Evaluator(
                image_name=self.instance["image_name"],
                solution_branch="submission",
                submission_archive=archive,
                blob_dir=get_blob_dir(self.instance_id),
                tests_branches=branches,
                remove_hashes=self.instance.get("eval_clean_hashes", []),
                image_tag=IMAGE_TAG,
                tests_by_branch={b: data[b]["tests"] for b in branches if b in data},
                ignored_tests=get_ignored_tests(self.instance),
                ignored_branches=get_ignored_branches(self.instance),
                instance_id=self.instance_id,
            ).run()
