"""`python -m textkit COMMAND [ARGS...]`: look COMMAND up in the registry and run it.

The dispatcher owns everything the commands share (reading stdin, writing
stdout, error messages, exit codes), so that a command module is a pure
function `main(args, stdin) -> (stdout, exit_code)` and can be written and
tested on its own. Commands are imported lazily by module path, so one broken
command module cannot break the others.
"""

from __future__ import annotations

import importlib
import sys

from textkit import CommandError, UsageError
from textkit.registry import COMMANDS


def usage() -> str:
    names = ", ".join(sorted(COMMANDS)) or "(none registered yet)"
    return f"usage: python -m textkit COMMAND [ARGS...]\ncommands: {names}\n"


def main(argv: list[str]) -> int:
    if not argv:
        sys.stderr.write(usage())
        return 2
    if argv[0] in ("-h", "--help"):
        sys.stdout.write(usage())
        return 0
    name, args = argv[0], argv[1:]
    if name not in COMMANDS:
        sys.stderr.write(f"textkit: unknown command {name!r}\n" + usage())
        return 2
    command = importlib.import_module(COMMANDS[name])
    try:
        out, code = command.main(args, sys.stdin.read())
    except UsageError as e:
        sys.stderr.write(f"textkit: {name}: {e}\n")
        return 2
    except CommandError as e:
        sys.stderr.write(f"textkit: {name}: {e}\n")
        return 1
    sys.stdout.write(out)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
