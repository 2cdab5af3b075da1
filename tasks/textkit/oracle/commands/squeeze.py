"""squeeze: collapse whitespace in lines and runs of empty lines (docs/textkit.md, "squeeze")."""

from textkit import UsageError, join_lines, split_lines


def main(args: list[str], stdin: str) -> tuple[str, int]:
    if args:
        raise UsageError("squeeze takes no arguments")
    out: list[str] = []
    for line in split_lines(stdin):
        squeezed = " ".join(line.split())
        if squeezed or not out or out[-1]:
            out.append(squeezed)
    return join_lines(out), 0
