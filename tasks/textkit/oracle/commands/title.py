"""title: capitalise every whitespace-separated word (docs/textkit.md, "title").

Not `str.title()`: that one starts a new word after every non-letter
("it's" -> "It'S"), while textkit words are runs of non-whitespace.
"""

import re

from textkit import UsageError

_WORD = re.compile(r"\S+")


def _capitalise(match: re.Match) -> str:
    word = match.group()
    return word[0].upper() + word[1:].lower()


def main(args: list[str], stdin: str) -> tuple[str, int]:
    if args:
        raise UsageError("title takes no arguments")
    return _WORD.sub(_capitalise, stdin), 0
