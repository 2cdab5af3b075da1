"""freq [N]: the N most frequent words (docs/textkit.md, "freq [N]")."""

import re
from collections import Counter

from textkit import UsageError, join_lines

_INT = re.compile(r"-?[0-9]+")
_WORD = re.compile(r"[A-Za-z0-9]+")


def main(args: list[str], stdin: str) -> tuple[str, int]:
    if len(args) > 1:
        raise UsageError("usage: freq [N]")
    n = 10
    if args:
        if not _INT.fullmatch(args[0]) or int(args[0]) < 1:
            raise UsageError(f"N must be an integer >= 1, got {args[0]!r}")
        n = int(args[0])
    counts = Counter(word.lower() for word in _WORD.findall(stdin))
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:n]
    return join_lines(f"{count} {word}" for word, count in ranked), 0
