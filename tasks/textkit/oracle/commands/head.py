"""head [N]: the first N lines, default 10 (docs/textkit.md, "head [N]")."""

import re

from textkit import UsageError, join_lines, split_lines

_INT = re.compile(r"-?[0-9]+")


def main(args: list[str], stdin: str) -> tuple[str, int]:
    if len(args) > 1:
        raise UsageError("usage: head [N]")
    n = 10
    if args:
        if not _INT.fullmatch(args[0]) or int(args[0]) < 0:
            raise UsageError(f"N must be an integer >= 0, got {args[0]!r}")
        n = int(args[0])
    return join_lines(split_lines(stdin)[:n]), 0
