"""Regenerate the hidden tests (tests/<branch>/ and tests.json) from the reference, the ProgramBench way.

    python tasks/textkit/hidden_tests/generate.py           # rewrite tests/ and tests.json
    python tasks/textkit/hidden_tests/generate.py --check   # exit 1 if they are stale

Only the inputs are written by hand (CASES below); the reference executable is built from src/
(build.sh) and every expected stdout, exit code and "wrote on stderr" is recorded from running it
(`agensh_ray.task.golden`), so the hidden tests cannot disagree with the reference the workers
compare against. Tests a trivial dummy executable passes are ignored with reason dummy_pass. The
inputs are deliberately different from the visible `checks/samples.json` and lean on the edge
cases the manual documents. Output is deterministic.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from agensh_ray.task.golden import Case, write_tests
from agensh_ray.task.local import LocalTask

HERE = Path(__file__).resolve().parent
TASK_DIR = HERE.parent
# The three test branches, by subcommand.
BRANCHES = {
    "case": ("upper", "lower", "title", "rot13", "caesar"),
    "lines": ("reverse", "tac", "head", "tail", "uniq", "sort", "squeeze", "number"),
    "words": ("palindromes", "wc", "count-vowels", "freq"),
}

FIFTEEN = "".join(f"row {i}\n" for i in range(1, 16))
TWELVE_WORDS = "kiwi fig apple lime date cherry banana grape mango nut orange pear\n"

# (subcommand, args, stdin)
CASES: list[tuple[str, list[str], str]] = [
    ("upper", [], "stra\u00dfe and \u01c6\n"),
    ("upper", [], ""),
    ("upper", [], "ALREADY UP\n"),
    ("upper", [], "tabs\tand  spaces\n\n"),
    ("upper", ["-u"], "abc"),
    ("lower", [], "\u00c0\u00c9\u00ce ABC\n"),
    ("lower", [], ""),
    ("lower", [], "MiXeD 123 !?\nline2"),
    ("lower", ["x", "y"], "ABC"),
    ("lower", [], "Gro\u00df STRA\u00dfE\n"),
    ("title", [], "hello world"),
    ("title", [], "  leading and trailing  \n"),
    ("title", [], "o'NEIL mcDONALD 3rd\n"),
    ("title", [], ""),
    ("title", [], "\u00c9COLE \u00e9l\u00e8ve\tx-RAY\n"),
    ("title", ["x"], "abc"),
    ("rot13", [], "Why did the chicken cross the road?\n"),
    ("rot13", [], "\u00dcn\u00efc\u00f6d\u00e9 stays ABCxyz"),
    ("rot13", [], ""),
    ("rot13", [], "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ\n"),
    ("rot13", ["x"], "abc"),
    ("caesar", ["1"], "zZ aA\n"),
    ("caesar", ["27"], "abc"),
    ("caesar", ["-27"], "abc\n"),
    ("caesar", ["0"], "Same Text\n"),
    ("caesar", ["x"], "abc"),
    ("caesar", ["1.5"], "abc"),
    ("caesar", ["1", "2"], "abc"),
    ("caesar", ["+3"], "abc"),
    ("reverse", [], "abc"),
    ("reverse", [], ""),
    ("reverse", [], "\n\n"),
    ("reverse", [], "racecar level\nsmile :)\n"),
    ("reverse", ["-x"], "abc"),
    ("tac", [], ""),
    ("tac", [], "only\n"),
    ("tac", [], "a\n\nb\n"),
    ("tac", [], "x\ny\nz"),
    ("tac", ["2"], "a\nb\n"),
    ("head", ["1"], "first\nsecond\n"),
    ("head", ["5"], "a\nb"),
    ("head", [], FIFTEEN),
    ("head", ["3"], ""),
    ("head", ["0"], "x\ny\n"),
    ("head", ["-1"], "a\n"),
    ("head", ["x"], "a\n"),
    ("head", ["1", "2"], "a\n"),
    ("tail", ["1"], "first\nsecond\n"),
    ("tail", ["5"], "a\nb"),
    ("tail", [], FIFTEEN),
    ("tail", ["0"], "x\ny\n"),
    ("tail", ["2"], "a\nb\nc"),
    ("tail", ["007"], FIFTEEN),
    ("tail", ["-2"], "a\n"),
    ("uniq", [], ""),
    ("uniq", [], "a\nb\na\nb\n"),
    ("uniq", [], "x\nx\n\n\ny\n"),
    ("uniq", ["-c"], "same\nsame\nsame"),
    ("uniq", ["-c"], "z\n" * 12 + "w\n"),
    ("uniq", ["-c", "-c"], "a\n"),
    ("sort", [], ""),
    ("sort", [], "b\nB\na\nab\n"),
    ("sort", ["-r"], "b\na\nc\n"),
    ("sort", ["-n"], "3\n 1\n2.5\n1.0\n"),
    ("sort", ["-n", "-r"], "1\n1.0\n2\n"),
    ("sort", ["-nr"], "+5\n.5\n3.\n-0\n"),
    ("sort", ["-n"], "1\nabc\n"),
    ("sort", ["-n"], "1\n\n2\n"),
    ("sort", ["-x"], "a\n"),
    ("squeeze", [], ""),
    ("squeeze", [], "\n\n\n"),
    ("squeeze", [], "a  b\tc\n"),
    ("squeeze", [], "  x  \n\n  \ny\n\n"),
    ("squeeze", [], "no change"),
    ("squeeze", ["x"], ""),
    ("number", [], ""),
    ("number", [], "a\nb\n"),
    ("number", ["-2"], "a\nb\nc\nd\n"),
    ("number", ["999999"], "a\nb\n"),
    ("number", ["0"], "\n"),
    ("number", ["1", "2"], "a\n"),
    ("number", ["x"], "a\n"),
    ("palindromes", [], ""),
    ("palindromes", [], "Was it a car or a cat I saw?\nNot one\n12321\n"),
    ("palindromes", [], "a\n\n!\nb b\n"),
    ("palindromes", [], "No 'x' in Nixon"),
    ("palindromes", ["x"], "a\n"),
    ("wc", [], "one two  three\n"),
    ("wc", [], "\n"),
    ("wc", [], "\u00fcn\u00efcode \u2603\n"),
    ("wc", [], "  \t  "),
    ("wc", [], "a\nb\nc"),
    ("wc", ["-l"], "a\n"),
    ("count-vowels", [], ""),
    ("count-vowels", [], "rhythm\n"),
    ("count-vowels", [], "Programming In PYTHON is fun\n"),
    ("count-vowels", [], "\u00e9\u00e8\u00e0 AEIOU"),
    ("count-vowels", ["x"], "a\n"),
    ("freq", [], ""),
    ("freq", ["1"], "dog cat dog\n"),
    ("freq", [], "It's the end. Don't stop!\n"),
    ("freq", ["2"], "B b A a c C\n"),
    ("freq", [], TWELVE_WORDS),
    ("freq", ["5"], "100 apples, 100 pears\n"),
    ("freq", ["-1"], "a\n"),
    ("freq", ["x"], "a\n"),
    ("freq", ["1", "2"], "a\n"),
]


def cases() -> list[Case]:
    branch_of = {f: b for b, fs in BRANCHES.items() for f in fs}
    out, seen = [], {}
    for feature, args, stdin in CASES:
        seen[feature] = seen.get(feature, 0) + 1
        out.append(Case(branch=branch_of[feature], id=f"{feature}-{seen[feature]:02d}", args=[feature, *args],
                        stdin=stdin))
    return out


def generate(task_dir: Path) -> dict:
    """Write tests/ and tests.json into task_dir (a copy of this task folder)."""
    with tempfile.TemporaryDirectory() as tmp:
        reference = LocalTask(TASK_DIR).build_reference(Path(tmp) / "textkit")
        return write_tests(task_dir, cases(), reference)


def snapshot(task_dir: Path) -> dict[str, bytes]:
    files = [task_dir / "tests.json", *sorted((task_dir / "tests").rglob("*"))]
    return {str(p.relative_to(task_dir)): p.read_bytes() for p in files if p.is_file()}


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        with tempfile.TemporaryDirectory() as tmp:
            data = generate(Path(tmp))
            if snapshot(Path(tmp)) != snapshot(TASK_DIR):
                print(f"tests/ and tests.json are stale: run {Path(__file__).name} to regenerate", file=sys.stderr)
                return 1
        return 0
    if argv:
        print("usage: generate.py [--check]", file=sys.stderr)
        return 2
    data = generate(TASK_DIR)
    n = sum(len(b["tests"]) for b in data["branches"].values())
    dummy = sum(len(b["ignored_tests"]) for b in data["branches"].values())
    print(f"wrote {n} tests in {len(data['branches'])} branches ({dummy} ignored: dummy_pass) to {TASK_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
