"""tail [N]: the last N lines, default 10 (docs/textkit.md, "tail [N]").

Slices from `len - n`, not `-n`: `lines[-0:]` would be every line.
"""

import re

from textkit import UsageError, join_lines, split_lines

_INT = re.compile(r"-?[0-9]+")


def main(args: list[str], stdin: str) -> tuple[str, int]:
    if len(args) > 1:
        raise UsageError("usage: tail [N]")
    n = 10
    if args:
        if not _INT.fullmatch(args[0]) or int(args[0]) < 0:
            raise UsageError(f"N must be an integer >= 0, got {args[0]!r}")
        n = int(args[0])
    lines = split_lines(stdin)
    return join_lines(lines[max(len(lines) - n, 0) :] if n else []), 0
