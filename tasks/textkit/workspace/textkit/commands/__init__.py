"""One module per subcommand: `textkit/commands/<name>.py` defines
`main(args: list[str], stdin: str) -> tuple[str, int]` (a name with a dash,
like count-vowels, uses an underscore in the module name: count_vowels.py)."""
