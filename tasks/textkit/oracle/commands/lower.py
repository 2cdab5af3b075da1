"""lower: convert every character to lower case (docs/textkit.md, "lower")."""

from textkit import UsageError


def main(args: list[str], stdin: str) -> tuple[str, int]:
    if args:
        raise UsageError("lower takes no arguments")
    return stdin.lower(), 0
