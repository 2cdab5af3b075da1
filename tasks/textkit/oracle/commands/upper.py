"""upper: convert every character to upper case (docs/textkit.md, "upper")."""

from textkit import UsageError


def main(args: list[str], stdin: str) -> tuple[str, int]:
    if args:
        raise UsageError("upper takes no arguments")
    return stdin.upper(), 0
