"""number [START]: prefix lines with their number (docs/textkit.md, "number [START]")."""

import re

from textkit import UsageError, join_lines, split_lines

_INT = re.compile(r"-?[0-9]+")


def main(args: list[str], stdin: str) -> tuple[str, int]:
    if len(args) > 1:
        raise UsageError("usage: number [START]")
    start = 1
    if args:
        if not _INT.fullmatch(args[0]):
            raise UsageError(f"START must be an integer, got {args[0]!r}")
        start = int(args[0])
    lines = split_lines(stdin)
    return join_lines(f"{n:6d}\t{line}" for n, line in enumerate(lines, start)), 0
