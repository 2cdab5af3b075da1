"""Regenerate `cases.json`, the hidden tests, from the reference implementation.

    python tasks/textkit/hidden_tests/generate.py           # rewrite cases.json
    python tasks/textkit/hidden_tests/generate.py --check   # exit 1 if it is stale

Only the inputs are written by hand (CASES below); every expected stdout and
exit code comes from running `reference_src/textkit_ref.py`, so the hidden
tests cannot disagree with the reference the workers compare against. The
inputs are deliberately different from the visible `checks/samples.json` and
lean on the edge cases the manual documents. Output is deterministic: same
inputs and reference, byte-identical file.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REFERENCE_SRC = HERE.parent / "reference_src" / "textkit_ref.py"
OUTPUT = HERE / "cases.json"

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


def load_reference():
    spec = importlib.util.spec_from_file_location("textkit_ref", REFERENCE_SRC)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build() -> str:
    ref = load_reference()
    cases, seen = [], {}
    for feature, args, stdin in CASES:
        seen[feature] = seen.get(feature, 0) + 1
        stdout, _stderr, code = ref.run([feature, *args], stdin)
        cases.append(
            {
                "id": f"{feature}-{seen[feature]:02d}",
                "feature": feature,
                "args": args,
                "stdin": stdin,
                "stdout": stdout,
                "exit_code": code,
            }
        )
    doc = {"generated_by": "hidden_tests/generate.py", "cases": cases}
    return json.dumps(doc, indent=1, ensure_ascii=True) + "\n"


def main(argv: list[str]) -> int:
    text = build()
    if argv == ["--check"]:
        current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
        if current != text:
            print(f"{OUTPUT} is stale: run {Path(__file__).name} to regenerate", file=sys.stderr)
            return 1
        return 0
    if argv:
        print("usage: generate.py [--check]", file=sys.stderr)
        return 2
    OUTPUT.write_text(text, encoding="utf-8")
    print(f"wrote {len(json.loads(text)['cases'])} cases to {OUTPUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
