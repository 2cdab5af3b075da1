"""Hidden-test scorer for a textkit build.

    python tasks/textkit/score.py REPO_DIR [--json]

Runs every case of `hidden_tests/cases.json` against `python -m textkit` as
built in REPO_DIR and compares stdout and exit code (stderr is free). Prints
`PASS|FAIL <test_id>` per case and `N passed, M failed`, or with --json one
object {"passed", "failed", "total", "pass_rate", "tests": [{"id", "feature",
"ok"}]}. A case only counts for a subcommand registered in the build's
`textkit/registry.py` (see `child`).

Speed: one child interpreter (cwd and PYTHONPATH = REPO_DIR) runs all the
cases in-process, executing `textkit` as `__main__` via runpy exactly as
`python -m textkit` would, with argv, stdin, stdout and stderr swapped per
case. Robustness: whatever the build does (import or syntax errors, a crash,
a hang), the child reports each finished case on its own line of a results
file; a case that hangs is interrupted after CASE_TIMEOUT_S, a case that kills
the child fails and a new child resumes after it, and any case still without
a report when the run's time is up fails. A broken build scores failures
instead of crashing the scorer.
"""

from __future__ import annotations

import argparse
import importlib
import io
import json
import os
import runpy
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

CASES = Path(__file__).resolve().parent / "hidden_tests" / "cases.json"
CASE_TIMEOUT_S = 2.0
RUN_TIMEOUT_S = 120.0


def load_cases() -> list[dict]:
    return json.loads(CASES.read_text(encoding="utf-8"))["cases"]


# --- child: runs inside the build's environment -----------------------------


class _CaseTimeout(BaseException):
    """BaseException so that a build's `except Exception` cannot swallow it."""


def _on_alarm(signum, frame):
    raise _CaseTimeout()


def _exit_code(code: object) -> int:
    """The process exit status `sys.exit(code)` would produce."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    return 1


def _text_stream(data: bytes) -> io.TextIOWrapper:
    """A UTF-8 text stream over bytes, translating no newlines (like Linux stdio)."""
    return io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", newline="\n", write_through=True)


def run_case(case: dict) -> tuple[str | None, int]:
    """(stdout, exit code) of `python -m textkit ARGS` with the case's stdin, in-process.

    stdout is None when it could not be read back (it never matches then).
    """
    saved_argv, saved_stdin = sys.argv, sys.stdin
    # Byte-backed text streams, like the real ones, so `.buffer` works too.
    out, err = _text_stream(b""), _text_stream(b"")
    sys.argv = ["textkit", case["feature"], *case["args"]]
    sys.stdin = _text_stream(case["stdin"].encode("utf-8"))
    use_alarm = hasattr(signal, "setitimer")
    if use_alarm:
        signal.setitimer(signal.ITIMER_REAL, CASE_TIMEOUT_S)
    try:
        with redirect_stdout(out), redirect_stderr(err):
            try:
                runpy.run_module("textkit", run_name="__main__", alter_sys=True)
                code = 0
            except SystemExit as e:
                code = _exit_code(e.code)
    except _CaseTimeout:
        code = -1
    except BaseException:  # any crash is what `python -m textkit` would exit 1 for
        code = 1
    finally:
        if use_alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
        sys.argv, sys.stdin = saved_argv, saved_stdin
    try:
        out.flush()
        stdout = out.buffer.getvalue().decode("utf-8")
    except (ValueError, UnicodeDecodeError):  # stream closed by the build, or bad bytes
        stdout = None
    return stdout, code


def registered_commands() -> set[str]:
    """Subcommands named in the build's registry; none if it does not import."""
    if hasattr(signal, "setitimer"):
        signal.setitimer(signal.ITIMER_REAL, CASE_TIMEOUT_S)
    try:
        with redirect_stdout(_text_stream(b"")), redirect_stderr(_text_stream(b"")):
            return set(importlib.import_module("textkit.registry").COMMANDS)
    except BaseException:
        return set()
    finally:
        if hasattr(signal, "setitimer"):
            signal.setitimer(signal.ITIMER_REAL, 0)


def child(repo_dir: str, results_path: str, first: int) -> int:
    """Run cases[first:], appending one {"id", "ok"} line per case to results_path."""
    sys.path[0] = repo_dir  # not this script's directory
    if hasattr(signal, "SIGALRM"):
        signal.signal(signal.SIGALRM, _on_alarm)
    registered = registered_commands()
    with open(results_path, "a", encoding="utf-8") as results:
        for case in load_cases()[first:]:
            # An unregistered subcommand scores nothing: an unknown subcommand
            # exits 2 with no output, which would otherwise "pass" every
            # usage-error case of a subcommand nobody has built.
            ok = False
            if case["feature"] in registered:
                try:
                    stdout, code = run_case(case)
                    ok = stdout == case["stdout"] and code == case["exit_code"]
                except BaseException:
                    ok = False
            results.write(json.dumps({"id": case["id"], "ok": ok}) + "\n")
            results.flush()
    return 0


# --- parent ------------------------------------------------------------------


def _read_results(path: Path) -> dict[str, bool]:
    outcomes: dict[str, bool] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line cut short by a crash
        outcomes[record["id"]] = bool(record["ok"])
    return outcomes


def run_cases(repo_dir: Path, cases: list[dict], timeout_s: float) -> dict[str, bool]:
    """Outcome per case id. Cases without one (time ran out) count as failed.

    If the child dies mid-run (a build calling os._exit, a segfault), the
    case it was running fails and a fresh child resumes after it, so one
    crashing subcommand costs its own cases and not everyone else's.
    """
    env = dict(
        os.environ,
        PYTHONPATH=str(repo_dir),
        PYTHONIOENCODING="utf-8",
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONHASHSEED="0",
    )
    deadline = time.monotonic() + timeout_s
    with tempfile.TemporaryDirectory(prefix="textkit-score-") as tmp:
        results_path = Path(tmp) / "results.jsonl"
        results_path.touch()
        outcomes: dict[str, bool] = {}
        first = 0
        while first < len(cases):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                subprocess.run(
                    [sys.executable, str(Path(__file__).resolve()), "--child"]
                    + [str(repo_dir), str(results_path), str(first)],
                    cwd=repo_dir,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    timeout=remaining,
                )
            except subprocess.TimeoutExpired:
                pass
            outcomes.update(_read_results(results_path))
            first = next((i for i, case in enumerate(cases) if case["id"] not in outcomes), len(cases))
            if first < len(cases):
                outcomes[cases[first]["id"]] = False  # the case the child died on
                first += 1
        return outcomes


def score(repo_dir: Path, timeout_s: float = RUN_TIMEOUT_S) -> dict:
    cases = load_cases()
    outcomes = run_cases(repo_dir, cases, timeout_s)
    tests = [{"id": c["id"], "feature": c["feature"], "ok": outcomes.get(c["id"], False)} for c in cases]
    passed = sum(t["ok"] for t in tests)
    total = len(tests)
    return {
        "passed": passed,
        "failed": total - passed,
        "total": total,
        "pass_rate": passed / total if total else 0.0,
        "tests": tests,
    }


def main(argv: list[str]) -> int:
    if argv[:1] == ["--child"] and len(argv) == 4:
        return child(argv[1], argv[2], int(argv[3]))
    parser = argparse.ArgumentParser(description="Score a textkit build against the hidden tests.")
    parser.add_argument("repo_dir", type=Path)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--timeout", type=float, default=RUN_TIMEOUT_S, help="seconds for the whole run")
    opts = parser.parse_args(argv)
    if not opts.repo_dir.is_dir():
        parser.error(f"not a directory: {opts.repo_dir}")
    result = score(opts.repo_dir.resolve(), opts.timeout)
    if opts.json:
        print(json.dumps(result))
    else:
        for test in result["tests"]:
            print(f"{'PASS' if test['ok'] else 'FAIL'} {test['id']}")
        print(f"{result['passed']} passed, {result['failed']} failed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
