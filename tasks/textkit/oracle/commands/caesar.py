"""caesar N: shift ASCII letters by N places, modulo 26 (docs/textkit.md, "caesar N")."""

import re

from textkit import UsageError

_INT = re.compile(r"-?[0-9]+")


def _shift(c: str, n: int) -> str:
    if "a" <= c <= "z":
        return chr((ord(c) - ord("a") + n) % 26 + ord("a"))
    if "A" <= c <= "Z":
        return chr((ord(c) - ord("A") + n) % 26 + ord("A"))
    return c


def main(args: list[str], stdin: str) -> tuple[str, int]:
    if len(args) != 1:
        raise UsageError("usage: caesar N")
    if not _INT.fullmatch(args[0]):
        raise UsageError(f"N must be an integer, got {args[0]!r}")
    n = int(args[0]) % 26
    return "".join(_shift(c, n) for c in stdin), 0
