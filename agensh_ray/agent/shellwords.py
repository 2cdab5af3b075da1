"""How a shell would split a command line, as far as the permission policy
(policy.py) needs it: here-documents removed as data, command substitutions
(`$(...)`, backquotes, `<(...)`) taken out as commands of their own, and
the options of the programs whose arguments are not paths (patterns, code,
wrapped commands)."""

from __future__ import annotations

import re

HEREDOC = re.compile(r"(?<!<)<<(?!<)(-?)\s*(['\"]?)([A-Za-z_][\w.-]*)\2")
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def without_heredocs(text: str) -> str:
    """The command lines of `text`, one per `;`, with continuation lines joined and here-documents removed."""
    lines = text.replace("\\\n", " ").split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        i += 1
        for m in HEREDOC.finditer(line):
            strip, delim = m.group(1) == "-", m.group(3)
            while i < len(lines) and (lines[i].lstrip("\t") if strip else lines[i]) != delim:
                i += 1
            i += 1
    return " ; ".join(out)


def substitutions(text: str) -> tuple[str, list[str]]:
    """`text` with each `$(...)`, `<(...)`, `>(...)` and backquoted command replaced by a word, and those commands."""
    out: list[str] = []
    inner: list[str] = []
    i, quote = 0, ""
    while i < len(text):
        c = text[i]
        if quote != '"' and c == "'" and not quote:
            j = text.find("'", i + 1)
            j = len(text) - 1 if j < 0 else j
            out.append(text[i:j + 1])
            i = j + 1
            continue
        if c == '"':
            quote = "" if quote else '"'
        if c == "\\" and i + 1 < len(text):
            out.append(text[i:i + 2])
            i += 2
            continue
        if text.startswith(("$(", "<(", ">("), i):
            depth, j = 1, i + 2
            while j < len(text) and depth:
                depth += {"(": 1, ")": -1}.get(text[j], 0)
                j += 1
            inner.append(text[i + 2:j - 1])
            out.append("SUBST")
            i = j
            continue
        if c == "`":
            j = text.find("`", i + 1)
            j = len(text) if j < 0 else j
            inner.append(text[i + 1:j])
            out.append("SUBST")
            i = j + 1
            continue
        out.append(c)
        i += 1
    return "".join(out), inner


def flag_value(args: list[str], flags: tuple[str, ...], cluster: bool = False) -> str | None:
    """The argument after the first of `flags` (for `cluster`, also after -lc style groups)."""
    for i, a in enumerate(args[:-1]):
        if a in flags or (cluster and a.startswith("-") and not a.startswith("--") and "c" in a[1:]):
            return args[i + 1]
    return None


def pattern_index(args: list[str]) -> int | None:
    """Where the pattern of grep/sed/awk/jq is among `args` (None when -e/-f gives it)."""
    for i, a in enumerate(args):
        if a in ("-e", "-f", "--regexp", "--file", "--expression") or a.startswith(("--regexp=", "--expression=")):
            return None
        if not a.startswith("-"):
            return i
    return None


def wrapped(family: str, args: list[str]) -> list[str]:
    """The command a wrapper (env, timeout, xargs, ...) runs: its arguments after its own options."""
    takes_arg = {"env": ("-u", "-C", "-S"), "timeout": ("-s", "-k", "--signal", "--kill-after"), "nice": ("-n",),
                 "xargs": ("-I", "-n", "-P", "-d", "-L", "-s", "-a", "-E"), "stdbuf": ("-i", "-o", "-e")}
    own = takes_arg.get(family, ())
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            i += 1
            break
        if a in own:
            i += 2
        elif a.startswith("-") or (family == "env" and ASSIGNMENT.match(a)):
            i += 1
        else:
            break
    if family == "timeout" and i < len(args):
        i += 1  # the duration
    return args[i:]
