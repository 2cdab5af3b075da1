"""wc: count lines, words and characters (docs/textkit.md, "wc").

Lines follow the textkit convention, not `wc -l`: a last line without "\\n" counts.
"""

from textkit import UsageError, split_lines


def main(args: list[str], stdin: str) -> tuple[str, int]:
    if args:
        raise UsageError("wc takes no arguments")
    return f"{len(split_lines(stdin))} {len(stdin.split())} {len(stdin)}\n", 0
