"""Files that change ProgramBench's test runner: what a submission, or its build, leaves where the
hidden tests' pytest (or the shell and the Python that start it) reads it.

Each test branch runs, in the post-build workspace with the branch's `eval/` unpacked over it,
`bash -lc "./eval/run.sh"`, whose line is `python3 -m pytest eval/tests/ --junitxml=eval/results.xml
-q -p no:cacheprovider` (cwd `/workspace`, HOME `/root`). What that reads from places the submission
or its `compile.sh` can write (`/workspace`, and in our sandbox `/root`, `/etc`, `/tmp`, which persist
from the build into every branch), by the rule that makes it read it:

* **the tests' folder**, `eval/`: pytest collects every `test_*.py` there, imports its `__init__.py`
  and `conftest.py` files, puts `eval/tests` first on `sys.path` for the test modules' imports, reads
  config files there, and loads assertion-rewrite caches from its `__pycache__`. The branch's archive
  only overwrites its own files, so anything the workspace has there after the build is flagged.
* **pytest's rootdir**, `/workspace` (the common ancestor of the invocation dir and `eval/tests`; it is
  also the `confcutdir`): `conftest.py`; `__init__.py` (pytest then collects `/workspace` as a package
  and imports it before the tests); the config files pytest looks for in `eval/tests`, `eval` and
  `/workspace`, in its order: `pytest.toml`, `.pytest.toml`, `pytest.ini`, `.pytest.ini` (always
  config), `pyproject.toml` with a `[tool.pytest]` table, `tox.ini` with `[pytest]`, `setup.cfg` with
  `[tool:pytest]` (or `[pytest]`, an error).
* **`sys.path[0]`**: `python3 -m` puts the cwd first on `sys.path`, so a top-level module or package
  named like one that Python would otherwise find (the standard library, anything installed, pytest's
  optional imports, ProgramBench's rerun plugin) replaces it: `pytest.py`, `pluggy/`, `subprocess.py`;
  and a `*.dist-info` / `*.egg-info` there whose `entry_points.txt` has a `[pytest11]` section is a
  plugin pytest loads at start (importlib.metadata searches `sys.path`).
* **interpreter and shell start-up**: the user site-packages under HOME (`.pth` files,
  `sitecustomize`, `usercustomize`, modules ahead of site-packages), HOME's login-shell files
  (`.profile`, `.bash_profile`, `.bash_login`, `.bashrc`, `.bash_logout`: every step is `bash -lc`),
  an `/etc` entry the build replaced (`profile`, `ld.so.preload`, a `python3.X/sitecustomize.py`, ...),
  and anything already in ProgramBench's rerun-plugin folder (put on `PYTHONPATH` for the tests).

Not flagged, because nothing reads them: `sitecustomize.py`, `usercustomize.py` and `*.pth` at the
workspace's top level (site runs before the cwd is put on `sys.path`, and `*.pth` files are read only
in site directories), a `conftest.py` outside the rootdir and the tests' folder, a `pyproject.toml`
without pytest settings.

`scan(env_root)` reads an environment's folders on the host after the build, when nothing runs in
it: it never follows a link (a link where a checked file should be is flagged as it is) and reads at
most `MAX_READ` bytes of a file. `removal_command` is what the strict evaluation runs inside the
sandbox to take them away.
"""

from __future__ import annotations

import configparser
import functools
import importlib.machinery
import json
import os
import pkgutil
import shlex
import stat
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from programbench.eval.pytest_timeout_retry import PYTEST_TIMEOUT_RETRY_PLUGIN_DIR, PYTEST_TIMEOUT_RETRY_PLUGIN_MODULE

from agensh_ray.inputs import escape_all_controls
from agensh_ray.task.sandbox import ETC_COPIED, HOST_ETC

HOST_ROOT = HOST_ETC.removesuffix("/etc")
"""Where the sandbox sees the host's /etc (read-only): `<HOST_ROOT>/etc/<name>`."""

TESTS_DIR = "eval"
"""The folder each branch's tests unpack into, under the workspace (ProgramBench's layout)."""
MAX_READ = 1 << 20
"""Bytes read of a config file or entry_points.txt; a bigger one is flagged unread."""
MAX_LISTED = 200
"""Files listed under the tests' folder (the folder is removed as a whole; the list says what it held)."""
ALWAYS_CONFIG = ("pytest.toml", ".pytest.toml", "pytest.ini", ".pytest.ini")
SHELL_STARTUP = (".profile", ".bash_profile", ".bash_login", ".bashrc", ".bash_logout")
PYTEST_OPTIONAL = frozenset({
    "pytest", "_pytest", "py", "pluggy", "iniconfig", "packaging", "exceptiongroup", "tomli", "pygments",
    "argcomplete", "pexpect", "colorama", "xdist", "pytest_timeout", "pytest_rerunfailures",
    PYTEST_TIMEOUT_RETRY_PLUGIN_MODULE})
"""Names pytest, its plugins or the Evaluator import that may not be installed where the scorer runs."""


def shown(path: str) -> str:
    """A path the build chose, fit to print and store: bytes that are not UTF-8 and control characters escaped."""
    return escape_all_controls(os.fsencode(path).decode("utf-8", "backslashreplace"))


@dataclass(frozen=True)
class RunnerFile:
    path: str
    """As the sandbox sees it: relative to /workspace (`conftest.py`, `eval/tests/x.py`), else absolute; escaped
    (`shown`)."""
    why: str
    remove: str
    """The absolute path the strict evaluation removes (the tests' folder as a whole), as it is on disk."""

    def __init__(self, path: str, why: str, remove: str):
        object.__setattr__(self, "path", shown(path))
        object.__setattr__(self, "why", why)
        object.__setattr__(self, "remove", remove)

    def as_dict(self) -> dict:
        return {"path": self.path, "why": self.why}


@functools.cache
def shadowed_names() -> frozenset[str]:
    """Top-level module names `python3 -m pytest` could import from somewhere other than the cwd: the
    standard library, every module on the scoring interpreter's own sys.path (asked of it with -I, which
    leaves the cwd out), and pytest's optional imports."""
    names = set(sys.stdlib_module_names) | set(sys.builtin_module_names) | PYTEST_OPTIONAL
    try:
        out = subprocess.run([sys.executable, "-I", "-c", "import json, sys; print(json.dumps(sys.path))"],
                             capture_output=True, text=True, timeout=60, cwd="/").stdout
        paths = [p for p in json.loads(out) if p and os.path.isdir(p)]
    except (OSError, subprocess.SubprocessError, ValueError):
        paths = [p for p in sys.path if p and os.path.isdir(p) and os.path.abspath(p) != os.getcwd()]
    names.update(m.name for m in pkgutil.iter_modules(paths))
    return frozenset(names)


def _module_name(name: str) -> str | None:
    """The module a top-level file of this name would be imported as, if any."""
    for suffix in sorted(importlib.machinery.all_suffixes(), key=len, reverse=True):
        if name.endswith(suffix) and len(name) > len(suffix):
            stem = name[: -len(suffix)]
            return stem if stem.isidentifier() else None
    return None


def _read(path: Path) -> bytes | None:
    """A regular file's bytes (at most MAX_READ), never through a link; None if it is not one or bigger."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_READ:
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(MAX_READ + 1)
    finally:
        os.close(fd)


def _ini_sections(data: bytes) -> set[str] | None:
    parser = configparser.RawConfigParser(strict=False, interpolation=None)
    try:
        parser.read_string(data.decode("utf-8"))
    except (configparser.Error, UnicodeDecodeError):
        return None
    return set(parser.sections())


def _config_why(path: Path, name: str) -> str | None:
    """Why pytest would take `name` in that folder as its configuration, or None if it would not."""
    if name in ALWAYS_CONFIG:
        return f"pytest's configuration file ({name} is read even when empty)"
    if name not in ("pyproject.toml", "tox.ini", "setup.cfg"):
        return None
    data = _read(path)
    if data is None:
        return f"a {name} pytest would read that is not a plain readable file (a link, or over {MAX_READ} bytes)"
    if name == "pyproject.toml":
        try:
            doc = tomllib.loads(data.decode("utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError):
            return "a pyproject.toml pytest would read and that does not parse"
        tool = doc.get("tool")
        return "pytest settings in pyproject.toml ([tool.pytest])" if isinstance(tool, dict) and "pytest" in tool \
            else None
    sections = _ini_sections(data)
    if sections is None:
        return f"a {name} pytest would read and that does not parse"
    if name == "tox.ini" and "pytest" in sections:
        return "pytest settings in tox.ini ([pytest])"
    if name == "setup.cfg" and sections & {"tool:pytest", "pytest"}:
        return "pytest settings in setup.cfg ([tool:pytest])"
    return None


def _plugin_entry_points(meta: Path) -> bool:
    """A *.dist-info / *.egg-info folder registering a pytest plugin (or one that cannot be checked)."""
    ep = meta / "entry_points.txt"
    if not os.path.lexists(ep):
        return False
    data = _read(ep)
    if data is None:
        return True
    return any(line.strip().replace(" ", "") == "[pytest11]" for line in data.decode("utf-8", "replace").splitlines())


def _is_package(path: Path) -> bool:
    """A real folder with an __init__ module (a regular package, which takes precedence over later ones)."""
    try:
        return any(_module_name(n) == "__init__" for n in os.listdir(path))
    except OSError:
        return False


def _tests_folder(workspace: Path) -> list[RunnerFile]:
    root = workspace / TESTS_DIR
    remove = f"/workspace/{TESTS_DIR}"
    if not os.path.lexists(root):
        return []
    if os.path.islink(root) or not root.is_dir():
        return [RunnerFile(TESTS_DIR, "the tests' folder, replaced by a link or a file", remove)]
    found: list[RunnerFile] = []
    more = 0
    stack = [root]
    while stack:
        d = stack.pop()
        try:
            entries = sorted(os.scandir(d), key=lambda e: e.name)
        except OSError:
            continue
        for e in entries:
            if e.is_dir(follow_symlinks=False):
                stack.append(Path(e.path))
                continue
            if len(found) < MAX_LISTED:
                rel = os.path.relpath(e.path, workspace)
                found.append(RunnerFile(rel, "in the tests' folder: pytest collects, imports or reads it with "
                                             "the hidden tests", remove))
            else:
                more += 1
    if more:
        found.append(RunnerFile(f"{TESTS_DIR}/... ({more} more)", "in the tests' folder", remove))
    return found


def scan_workspace(workspace: Path) -> list[RunnerFile]:
    """What the workspace (after the build) holds that changes the test runner."""
    workspace = Path(workspace)
    found = _tests_folder(workspace)
    try:
        entries = sorted(os.listdir(workspace))
    except OSError:
        return found
    names = shadowed_names()
    for name in entries:
        path = workspace / name
        remove = f"/workspace/{name}"
        link = os.path.islink(path)
        if name == TESTS_DIR:
            continue
        if name == "conftest.py":
            found.append(RunnerFile(name, "a conftest.py at pytest's rootdir: pytest loads it before the tests",
                                    remove))
        elif name == "__init__.py":
            found.append(RunnerFile(name, "makes pytest's rootdir a package: pytest imports it before the tests",
                                    remove))
        elif (why := _config_why(path, name)) is not None:
            found.append(RunnerFile(name, why, remove))
        elif name.endswith((".dist-info", ".egg-info")) and (link or path.is_dir()) and (
                link or _plugin_entry_points(path)):
            found.append(RunnerFile(name, "registers a pytest plugin (a pytest11 entry point on sys.path): pytest "
                                          "loads it at start", remove))
        else:
            module = _module_name(name)
            # a plain folder is a namespace package, which a regular module elsewhere on sys.path wins over;
            # but it is imported, submodules and all, under a name installed nowhere (pytest's optional imports)
            if module is None and (link or (path.is_dir() and (_is_package(path) or name in PYTEST_OPTIONAL))):
                module = name
            if module is not None and module in names:
                found.append(RunnerFile(name, f"shadows the module {module!r} (python3 -m pytest puts the workspace "
                                              "first on sys.path)", remove))
    return found


def scan_home(home: Path, home_in_sandbox: str = "/root") -> list[RunnerFile]:
    """HOME's login-shell files and the user site-packages (every file there)."""
    found = []
    for name in SHELL_STARTUP:
        if os.path.lexists(home / name):
            found.append(RunnerFile(f"{home_in_sandbox}/{name}", "read by the login shell every evaluation step runs "
                                                                 "in (bash -lc)", f"{home_in_sandbox}/{name}"))
    for rel in (".local", ".local/lib"):
        if os.path.islink(home / rel):
            return [*found, RunnerFile(f"{home_in_sandbox}/{rel}", "a link where Python looks for user packages",
                                       f"{home_in_sandbox}/{rel}")]
    lib = home / ".local" / "lib"
    try:
        pythons = sorted(n for n in os.listdir(lib) if n.startswith("python"))
    except OSError:
        return found
    for py in pythons:
        site = lib / py / "site-packages"
        if os.path.islink(lib / py) or os.path.islink(site):
            entries = [""]
        else:
            try:
                entries = sorted(os.listdir(site))
            except OSError:
                continue
        for e in entries:
            p = f"{home_in_sandbox}/.local/lib/{py}/site-packages" + (f"/{e}" if e else "")
            found.append(RunnerFile(p, "in the user site-packages: Python reads its .pth, sitecustomize and "
                                       "usercustomize at start, and imports its modules ahead of site-packages", p))
    return found


def scan_etc(etc: Path) -> list[RunnerFile]:
    """/etc entries of the sandbox the build added or replaced (a fresh one is links into the host's copy)."""
    found = []
    try:
        entries = sorted(os.listdir(etc))
    except OSError:
        return found
    for name in entries:
        path = etc / name
        if name in ETC_COPIED and not os.path.islink(path):
            continue
        if os.path.islink(path) and os.readlink(path) == f"{HOST_ETC}/{name}" and os.path.lexists(f"/etc/{name}"):
            continue
        found.append(RunnerFile(f"/etc/{name}", "system configuration the build added or replaced (the shell, the "
                                                "dynamic loader and Python read /etc)", f"/etc/{name}"))
    return found


def scan(env_root: Path) -> list[RunnerFile]:
    """Everything a scoring environment (agensh_ray/task/sandbox.py's folders: workspace, root, etc, tmp)
    holds after the build that changes the test runner."""
    env_root = Path(env_root)
    found = scan_workspace(env_root / "workspace") + scan_home(env_root / "root") + scan_etc(env_root / "etc")
    plugins = env_root / PYTEST_TIMEOUT_RETRY_PLUGIN_DIR.lstrip("/")
    if os.path.lexists(plugins):
        found.append(RunnerFile(PYTEST_TIMEOUT_RETRY_PLUGIN_DIR, "ProgramBench's rerun-plugin folder, on PYTHONPATH "
                                                                 "for the tests, made by the build",
                                PYTEST_TIMEOUT_RETRY_PLUGIN_DIR))
    return found


REMOVE_SCRIPT = (
    'for p in "$@"; do rm -rf -- "$p" || exit 1; case "$p" in /etc/*) '
    f'if [ -e "{HOST_ROOT}$p" ] || [ -L "{HOST_ROOT}$p" ]; then ln -s -- "{HOST_ROOT}$p" "$p" || exit 1; fi;; '
    'esac; done')
"""Run by `sh -c` inside the sandbox (no login shell: HOME's files are among what it removes) with the paths as
arguments: each removed; an /etc entry the host has put back as the link to the host's copy it was."""


def removal_argv(found: list[RunnerFile]) -> list[str]:
    """The command (run inside the sandbox, no shell parsing of the paths) that takes them away."""
    return ["sh", "-c", REMOVE_SCRIPT, "sh", *dict.fromkeys(f.remove for f in found)]


def removal_command(found: list[RunnerFile]) -> str:
    """`removal_argv` as a line for the evaluation's log (paths escaped)."""
    return "rm -rf -- " + " ".join(shlex.quote(shown(r)) for r in dict.fromkeys(f.remove for f in found))
