"""reverse: reverse the characters of each line (docs/textkit.md, "reverse")."""

from textkit import UsageError, join_lines, split_lines


def main(args: list[str], stdin: str) -> tuple[str, int]:
    if args:
        raise UsageError("reverse takes no arguments")
    return join_lines(line[::-1] for line in split_lines(stdin)), 0
