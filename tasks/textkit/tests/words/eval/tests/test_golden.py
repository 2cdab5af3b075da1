"""Golden tests, recorded from the reference: each case runs ./executable with its arguments and
stdin, and compares stdout, the exit code and whether anything was written on stderr (its wording
is free) with what the reference did. Shipped in every test branch as eval/tests/test_golden.py,
next to that branch's eval/tests/cases.json."""

import json
import subprocess
from pathlib import Path

import pytest

CASES = json.loads((Path(__file__).with_name("cases.json")).read_text(encoding="utf-8"))
TIMEOUT_S = 10


def run_case(executable: str, case: dict, cwd: str = ".") -> dict:
    """What `executable` does on one case: {"stdout", "exit_code", "stderr"} (stderr: written to or not)."""
    try:
        p = subprocess.run([executable, *case["args"]], input=case["stdin"].encode("utf-8"), capture_output=True,
                           timeout=TIMEOUT_S, cwd=cwd)
    except subprocess.TimeoutExpired:
        return {"stdout": None, "exit_code": None, "stderr": None}
    except OSError as e:
        return {"stdout": None, "exit_code": None, "stderr": str(e)}
    return {"stdout": p.stdout.decode("utf-8", "replace"), "exit_code": p.returncode, "stderr": bool(p.stderr)}


def matches(got: dict, case: dict) -> bool:
    return got == {"stdout": case["stdout"], "exit_code": case["exit_code"], "stderr": case["stderr"]}


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_golden(case):
    got = run_case("./executable", case)
    assert got["stdout"] == case["stdout"], "stdout differs from the reference"
    assert got["exit_code"] == case["exit_code"], "exit code differs from the reference"
    assert got["stderr"] == case["stderr"], "the reference wrote on stderr" if case["stderr"] else "the reference wrote nothing on stderr"
