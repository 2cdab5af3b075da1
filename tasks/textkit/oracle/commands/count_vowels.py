"""count-vowels: number of ASCII vowels in the input (docs/textkit.md, "count-vowels")."""

from textkit import UsageError

_VOWELS = frozenset("aeiouAEIOU")


def main(args: list[str], stdin: str) -> tuple[str, int]:
    if args:
        raise UsageError("count-vowels takes no arguments")
    return f"{sum(1 for c in stdin if c in _VOWELS)}\n", 0
