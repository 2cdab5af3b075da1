"""The command registry: subcommand name -> module path, imported lazily.

This is the one file every command touches. Add exactly ONE line for your
command, just above the closing brace, and change nothing else here:

    "name": "textkit.commands.name",

When a merge conflicts here, the fix is to keep every side's lines.
"""

COMMANDS: dict[str, str] = {
    # one line per command, just above the closing brace
}
