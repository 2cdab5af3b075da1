"""textkit, reference implementation: every subcommand in one file.

This is the behaviour the workers rebuild. They never see this source:
build.sh compiles it into an execute-only ELF (the interpreter embedded, the
code inside the binary) that each worker gets as `reference/textkit`, so the
only ways to learn the behaviour are the manual (`docs/textkit.md`) and
running the executable. The hidden tests are recorded from that executable.

Conventions shared by every subcommand (the manual states them too):

* Input is split into lines on "\\n"; a final newline ends the last line
  rather than starting an empty one, so "" has no lines and "a\\n\\n" has two.
* Line-oriented subcommands end every output line with "\\n".
* Text-oriented subcommands (upper, lower, title, rot13, caesar) map the
  input character by character and keep everything else byte-for-byte.
* Usage errors exit 2, other failures exit 1; both print a message on stderr
  and nothing on stdout.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from itertools import groupby
from typing import Callable

_INT = re.compile(r"-?[0-9]+")
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)")
_WORD = re.compile(r"[A-Za-z0-9]+")
_VOWELS = frozenset("aeiouAEIOU")


class UsageError(Exception):
    """Bad arguments: reported on stderr, exit code 2."""


class CommandError(Exception):
    """Valid arguments but unusable input: reported on stderr, exit code 1."""


def split_lines(text: str) -> list[str]:
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def join_lines(lines) -> str:
    return "".join(line + "\n" for line in lines)


def parse_int(arg: str, what: str) -> int:
    if not _INT.fullmatch(arg):
        raise UsageError(f"{what} must be an integer, got {arg!r}")
    return int(arg)


def no_args(name: str, args: list[str]) -> None:
    if args:
        raise UsageError(f"{name} takes no arguments")


def optional_count(name: str, args: list[str], default: int, minimum: int) -> int:
    """The single optional integer argument of head, tail and freq."""
    if len(args) > 1:
        raise UsageError(f"{name} takes at most one argument")
    if not args:
        return default
    n = parse_int(args[0], "N")
    if n < minimum:
        raise UsageError(f"N must be at least {minimum}, got {n}")
    return n


def shift_letters(text: str, shift: int) -> str:
    shift %= 26
    out = []
    for c in text:
        if "a" <= c <= "z":
            c = chr((ord(c) - ord("a") + shift) % 26 + ord("a"))
        elif "A" <= c <= "Z":
            c = chr((ord(c) - ord("A") + shift) % 26 + ord("A"))
        out.append(c)
    return "".join(out)


# --- text-oriented -------------------------------------------------------


def cmd_upper(args: list[str], text: str) -> str:
    no_args("upper", args)
    return text.upper()


def cmd_lower(args: list[str], text: str) -> str:
    no_args("lower", args)
    return text.lower()


def cmd_title(args: list[str], text: str) -> str:
    no_args("title", args)
    return re.sub(r"\S+", lambda m: m.group()[0].upper() + m.group()[1:].lower(), text)


def cmd_rot13(args: list[str], text: str) -> str:
    no_args("rot13", args)
    return shift_letters(text, 13)


def cmd_caesar(args: list[str], text: str) -> str:
    if len(args) != 1:
        raise UsageError("usage: caesar N")
    return shift_letters(text, parse_int(args[0], "N"))


# --- line-oriented -------------------------------------------------------


def cmd_reverse(args: list[str], text: str) -> str:
    no_args("reverse", args)
    return join_lines(line[::-1] for line in split_lines(text))


def cmd_tac(args: list[str], text: str) -> str:
    no_args("tac", args)
    return join_lines(reversed(split_lines(text)))


def cmd_head(args: list[str], text: str) -> str:
    n = optional_count("head", args, default=10, minimum=0)
    return join_lines(split_lines(text)[:n])


def cmd_tail(args: list[str], text: str) -> str:
    n = optional_count("tail", args, default=10, minimum=0)
    lines = split_lines(text)
    return join_lines(lines[len(lines) - n :] if n else [])


def cmd_uniq(args: list[str], text: str) -> str:
    if args not in ([], ["-c"]):
        raise UsageError("usage: uniq [-c]")
    groups = [(line, len(list(run))) for line, run in groupby(split_lines(text))]
    if args:
        return join_lines(f"{count:7d} {line}" for line, count in groups)
    return join_lines(line for line, _ in groups)


def cmd_sort(args: list[str], text: str) -> str:
    numeric = descending = False
    for arg in args:
        if arg not in ("-r", "-n", "-rn", "-nr"):
            raise UsageError(f"unknown option {arg!r} (expected -r and/or -n)")
        numeric = numeric or "n" in arg
        descending = descending or "r" in arg
    lines = split_lines(text)
    if numeric:
        for line in lines:
            if not _NUMBER.fullmatch(line.strip()):
                raise CommandError(f"not a number: {line!r}")
        return join_lines(sorted(lines, key=lambda s: float(s.strip()), reverse=descending))
    return join_lines(sorted(lines, reverse=descending))


def cmd_squeeze(args: list[str], text: str) -> str:
    no_args("squeeze", args)
    out: list[str] = []
    for line in split_lines(text):
        squeezed = " ".join(line.split())
        if squeezed == "" and out and out[-1] == "":
            continue
        out.append(squeezed)
    return join_lines(out)


def cmd_number(args: list[str], text: str) -> str:
    if len(args) > 1:
        raise UsageError("usage: number [START]")
    start = parse_int(args[0], "START") if args else 1
    return join_lines(f"{n:6d}\t{line}" for n, line in enumerate(split_lines(text), start))


def cmd_palindromes(args: list[str], text: str) -> str:
    no_args("palindromes", args)
    out = []
    for line in split_lines(text):
        key = "".join(c for c in line if c.isalnum()).lower()
        if key and key == key[::-1]:
            out.append(line)
    return join_lines(out)


# --- summaries -----------------------------------------------------------


def cmd_wc(args: list[str], text: str) -> str:
    no_args("wc", args)
    return f"{len(split_lines(text))} {len(text.split())} {len(text)}\n"


def cmd_count_vowels(args: list[str], text: str) -> str:
    no_args("count-vowels", args)
    return f"{sum(1 for c in text if c in _VOWELS)}\n"


def cmd_freq(args: list[str], text: str) -> str:
    n = optional_count("freq", args, default=10, minimum=1)
    counts = Counter(word.lower() for word in _WORD.findall(text))
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
    return join_lines(f"{count} {word}" for word, count in ranked)


COMMANDS: dict[str, Callable[[list[str], str], str]] = {
    "upper": cmd_upper,
    "lower": cmd_lower,
    "title": cmd_title,
    "rot13": cmd_rot13,
    "caesar": cmd_caesar,
    "reverse": cmd_reverse,
    "tac": cmd_tac,
    "head": cmd_head,
    "tail": cmd_tail,
    "uniq": cmd_uniq,
    "sort": cmd_sort,
    "squeeze": cmd_squeeze,
    "number": cmd_number,
    "palindromes": cmd_palindromes,
    "wc": cmd_wc,
    "count-vowels": cmd_count_vowels,
    "freq": cmd_freq,
}


def usage() -> str:
    return "usage: python -m textkit COMMAND [ARGS...]\ncommands: " + ", ".join(sorted(COMMANDS)) + "\n"


def run(argv: list[str], stdin: str) -> tuple[str, str, int]:
    """One invocation, without touching the process: (stdout, stderr, exit code)."""
    if not argv:
        return "", usage(), 2
    if argv[0] in ("-h", "--help"):
        return usage(), "", 0
    name, args = argv[0], argv[1:]
    command = COMMANDS.get(name)
    if command is None:
        return "", f"textkit: unknown command {name!r}\n" + usage(), 2
    try:
        return command(args, stdin), "", 0
    except UsageError as e:
        return "", f"textkit: {name}: {e}\n", 2
    except CommandError as e:
        return "", f"textkit: {name}: {e}\n", 1


def main() -> int:
    stdin = sys.stdin.read() if len(sys.argv) > 1 and sys.argv[1] in COMMANDS else ""
    out, err, code = run(sys.argv[1:], stdin)
    sys.stdout.write(out)
    sys.stderr.write(err)
    return code


if __name__ == "__main__":
    sys.exit(main())
