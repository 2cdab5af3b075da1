"""uniq [-c]: collapse runs of identical adjacent lines (docs/textkit.md, "uniq [-c]")."""

from itertools import groupby

from textkit import UsageError, join_lines, split_lines


def main(args: list[str], stdin: str) -> tuple[str, int]:
    if args not in ([], ["-c"]):
        raise UsageError("usage: uniq [-c]")
    runs = [(line, sum(1 for _ in run)) for line, run in groupby(split_lines(stdin))]
    if args:
        return join_lines(f"{count:7d} {line}" for line, count in runs), 0
    return join_lines(line for line, _ in runs), 0
