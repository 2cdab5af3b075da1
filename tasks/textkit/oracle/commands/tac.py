"""tac: write the lines last to first (docs/textkit.md, "tac")."""

from textkit import UsageError, join_lines, split_lines


def main(args: list[str], stdin: str) -> tuple[str, int]:
    if args:
        raise UsageError("tac takes no arguments")
    return join_lines(reversed(split_lines(stdin))), 0
