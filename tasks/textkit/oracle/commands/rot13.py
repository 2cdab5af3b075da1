"""rot13: rotate ASCII letters by 13 places (docs/textkit.md, "rot13")."""

from textkit import UsageError


def _rotate(c: str) -> str:
    if "a" <= c <= "z":
        return chr((ord(c) - ord("a") + 13) % 26 + ord("a"))
    if "A" <= c <= "Z":
        return chr((ord(c) - ord("A") + 13) % 26 + ord("A"))
    return c


def main(args: list[str], stdin: str) -> tuple[str, int]:
    if args:
        raise UsageError("rot13 takes no arguments")
    return "".join(_rotate(c) for c in stdin), 0
