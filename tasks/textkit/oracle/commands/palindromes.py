"""palindromes: lines that read the same both ways (docs/textkit.md, "palindromes")."""

from textkit import UsageError, join_lines, split_lines


def _is_palindrome(line: str) -> bool:
    key = "".join(c for c in line if c.isalnum()).lower()
    return bool(key) and key == key[::-1]


def main(args: list[str], stdin: str) -> tuple[str, int]:
    if args:
        raise UsageError("palindromes takes no arguments")
    return join_lines(line for line in split_lines(stdin) if _is_palindrome(line)), 0
