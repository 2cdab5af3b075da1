"""Visible checks: does the build behave like the reference on the sample inputs?

    python checks/check.py                 # every registered command
    python checks/check.py upper caesar    # just these

For each command, every sample in `checks/samples.json` is run through both
`reference/textkit` (the execute-only reference) and `python -m textkit` (this repository), and
their stdout and exit code are compared (stderr wording is free). One line per
command: `PASS <cmd>` or `FAIL <cmd>: <reason>`. Exit code 0 only if every
requested command passes.

The samples are few on purpose: passing here is necessary, not sufficient.
Compare with the reference on your own inputs too, especially edge cases
from `docs/textkit.md`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "reference" / "textkit"
SAMPLES = ROOT / "checks" / "samples.json"
TIMEOUT_S = 10.0


def run(argv: list[str], stdin: str) -> tuple[str, int]:
    """(stdout, exit code) of one process (`argv` after the interpreter, or the reference's path
    first); a timeout counts as exit code -1."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONIOENCODING="utf-8", PYTHONDONTWRITEBYTECODE="1")
    try:
        proc = subprocess.run(
            argv if argv[0] == str(REFERENCE) else [sys.executable, *argv],
            input=stdin.encode("utf-8"),
            capture_output=True,
            cwd=ROOT,
            env=env,
            timeout=TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return "", -1
    return proc.stdout.decode("utf-8", errors="replace"), proc.returncode


def short(text: str, limit: int = 60) -> str:
    text = repr(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_sample(name: str, sample: dict) -> str | None:
    """None if the build matches the reference on this sample, else why not."""
    args, stdin = sample["args"], sample["stdin"]
    want_out, want_code = run([str(REFERENCE), name, *args], stdin)
    got_out, got_code = run(["-m", "textkit", name, *args], stdin)
    shown = " ".join([name, *args])
    if got_code != want_code:
        return f"`{shown}` on {short(stdin)}: exit code {got_code}, reference {want_code}"
    if got_out != want_out:
        return f"`{shown}` on {short(stdin)}: stdout {short(got_out)}, reference {short(want_out)}"
    return None


def check_command(name: str, samples: list[dict]) -> str | None:
    for sample in samples:
        reason = check_sample(name, sample)
        if reason:
            return reason
    return None


def registered_commands() -> dict[str, str]:
    sys.path.insert(0, str(ROOT))
    from textkit.registry import COMMANDS

    return dict(COMMANDS)


def main(argv: list[str]) -> int:
    samples = json.loads(SAMPLES.read_text(encoding="utf-8"))
    try:
        registered = registered_commands()
    except Exception as e:  # a broken registry (e.g. merge markers) fails every check
        reason = f"textkit/registry.py does not import: {type(e).__name__}: {e}"
        for name in argv or ["registry"]:
            print(f"FAIL {name}: {reason}")
        return 1
    names = argv or sorted(registered)
    if not names:
        print("nothing to check: no command is registered yet")
        return 0
    if not REFERENCE.exists():
        for name in names:
            print(f"FAIL {name}: {REFERENCE.relative_to(ROOT)} not found")
        return 1

    def verdict(name: str) -> str | None:
        if name not in samples:
            return f"unknown command (known: {', '.join(sorted(samples))})"
        if name not in registered:
            return "not registered in textkit/registry.py"
        return check_command(name, samples[name])

    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        reasons = list(pool.map(verdict, names))
    for name, reason in zip(names, reasons):
        print(f"PASS {name}" if reason is None else f"FAIL {name}: {reason}")
    return 0 if all(reason is None for reason in reasons) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
