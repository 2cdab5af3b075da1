"""textkit: a small command-line text utility, one module per subcommand.

Shared by every command module, so keep it small and stable:

* `UsageError` / `CommandError`: raise them from a command's `main`; the
  dispatcher (`textkit/__main__.py`) prints the message on stderr and exits
  2 or 1, so no command has to know about stderr or exit codes for errors.
* `split_lines` / `join_lines`: the one line convention of the manual
  (`docs/textkit.md`, "Conventions"), written once so that commands agree.
"""

from __future__ import annotations

from collections.abc import Iterable


class UsageError(Exception):
    """Bad arguments (missing, extra, invalid): stderr message, exit code 2."""


class CommandError(Exception):
    """Valid arguments but unusable input: stderr message, exit code 1."""


def split_lines(text: str) -> list[str]:
    """Lines of `text` without their "\\n"; a final "\\n" does not start an empty line.

    "" -> [], "a" -> ["a"], "a\\n" -> ["a"], "a\\n\\n" -> ["a", ""].
    """
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def join_lines(lines: Iterable[str]) -> str:
    """The output form of line-oriented commands: every line ends with "\\n"."""
    return "".join(line + "\n" for line in lines)
