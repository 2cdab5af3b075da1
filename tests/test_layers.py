"""The architecture, checked: imports go one way (core -> services -> actors ->
driver/CLI) and only actors/ and the driver/CLI import ray. The contracts live in
pyproject.toml ([tool.importlinter]); import-linter checks them here on the package
laid out as it installs (actors/ as agensh_ray/actors, ...)."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from agensh_ray.paths import PROJECT_ROOT


def _package_dirs() -> dict[str, str]:
    return tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]


def _installed_layout(dest: Path) -> Path:
    """The .py files of the tree at the places a wheel puts them."""
    root = dest / "site"
    for package, folder in sorted(_package_dirs().items(), key=lambda kv: kv[0].count(".")):
        target = root.joinpath(*package.split("."))
        for src in (PROJECT_ROOT / folder).rglob("*.py"):
            rel = src.relative_to(PROJECT_ROOT / folder)
            if any(part in _package_dirs().values() for part in rel.parts[:1]) and package == "agensh_ray":
                continue
            out = target / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, out)
    return root


def test_import_contracts_hold(tmp_path):
    site = _installed_layout(tmp_path)
    lint = Path(sys.executable).with_name("lint-imports")
    res = subprocess.run(
        [str(lint), str(PROJECT_ROOT / "pyproject.toml"), "--no-cache"],
        cwd=site, env={**os.environ, "PYTHONPATH": str(site)}, capture_output=True, text=True, timeout=300,
    )
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-2000:]
    assert "0 broken" in res.stdout


def test_every_package_folder_is_installed():
    """pyproject.toml lists the packages by hand (package-dir mapping): a new folder must be listed."""
    listed = set(tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = set()
    for package, folder in _package_dirs().items():
        for init in (PROJECT_ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(PROJECT_ROOT / folder)
            if package == "agensh_ray" and rel.parts and rel.parts[0] in _package_dirs().values():
                continue
            found.add(".".join([package, *rel.parts]))
    assert found == listed, f"missing from pyproject.toml: {sorted(found - listed)}; listed but absent: {sorted(listed - found)}"


def test_ray_appears_only_in_actors_and_the_driver():
    """The grep of the acceptance, on the package's own folders (tests and bench drive Ray, of course)."""
    offenders = []
    for folder in ("agensh_ray", "services", "analysis", "actors"):
        for path in (PROJECT_ROOT / folder).rglob("*.py"):
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                    [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
                if any(n == "ray" or n.startswith("ray.") for n in names):
                    rel = path.relative_to(PROJECT_ROOT)
                    allowed = rel.parts[0] == "actors" or rel.parts[:2] == ("agensh_ray", "driver") or (
                        rel.parts == ("agensh_ray", "run.py"))
                    if not allowed:
                        offenders.append(f"{rel}:{node.lineno}")
    assert not offenders, offenders
