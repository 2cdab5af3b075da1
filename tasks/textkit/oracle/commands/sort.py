"""sort [-r] [-n]: stable sort of the lines (docs/textkit.md, "sort [-r] [-n]")."""

import re

from textkit import CommandError, UsageError, join_lines, split_lines

_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)")


def main(args: list[str], stdin: str) -> tuple[str, int]:
    numeric = descending = False
    for arg in args:
        if arg not in ("-r", "-n", "-rn", "-nr"):
            raise UsageError(f"unknown option {arg!r} (expected -r and/or -n)")
        numeric = numeric or "n" in arg
        descending = descending or "r" in arg
    lines = split_lines(stdin)
    if not numeric:
        return join_lines(sorted(lines, reverse=descending)), 0
    for line in lines:
        if not _NUMBER.fullmatch(line.strip()):
            raise CommandError(f"not a number: {line!r}")
    # sorted(reverse=True) keeps equal lines in input order, as the manual asks.
    return join_lines(sorted(lines, key=lambda s: float(s.strip()), reverse=descending)), 0
