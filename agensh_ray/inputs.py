"""What every boundary checks in the values an agent gives it: whole numbers in their range, texts
that cannot pass for something else, and the forge texts' sizes (`FORGE_TEXTS`; the board's are in
`agensh_ray.board.limits`, the chat's in `services/chat/rules.py`).

A worker's text reaches every other worker, so it must not be able to look like a line the system
wrote (a board entry, a DM) or act on a reader's terminal. Two kinds of field:

* one-line fields (a board entry's text, a PR title) hold no line break and no control character at
  all: `one_line_problem` says what is wrong, and the boundary refuses the text with that message
  (refused, not rewritten: the writer learns to put more lines in the detail or body);
* longer texts (a board entry's detail, a chat message, a PR body or comment) keep their line breaks
  and tabs; every other control character is escaped (`escape_controls`: ESC becomes the four
  visible characters `\\x1b`), and a Windows line end becomes a line end.

"Control character" here means the Unicode controls (C0, DEL, C1), the line and paragraph separators
U+2028/U+2029, and the bidirectional formatting characters that reorder how a line is displayed
(U+200E/U+200F, U+202A-U+202E, U+2066-U+2069). How a reader sees where a worker's text begins and ends
is `agensh_ray.render`'s part.
"""

from __future__ import annotations

import re
from typing import Any

_CONTROLS = "\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2028\u2029\u2066-\u2069"
_ANY_CONTROL = re.compile(f"[{_CONTROLS}]")
"""Characters a one-line field refuses (tab and line feed included)."""
_ESCAPED = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2028\u2029\u2066-\u2069]")
"""Characters a longer text escapes: the controls but tab and line feed."""
_NAMES = {"\n": "a line break (\\n)", "\r": "a carriage return (\\r)", "\t": "a tab (\\t)",
          "\x1b": "an escape character (\\x1b)", "\x00": "a NUL character (\\x00)", "\x08": "a backspace (\\x08)",
          "\u2028": "a line separator (\\u2028)", "\u2029": "a paragraph separator (\\u2029)"}


def escape_char(ch: str) -> str:
    """The visible escape of one character: `\\n`, `\\t`, `\\r`, `\\xNN` or `\\uNNNN`."""
    if ch == "\n":
        return "\\n"
    if ch == "\t":
        return "\\t"
    if ch == "\r":
        return "\\r"
    return f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}"


def _esc(m: re.Match[str]) -> str:
    return escape_char(m.group())


def one_line_problem(text: str) -> str | None:
    """None if `text` may stand in a one-line field, else what is wrong with it, for a refusal
    ("a line break (\\n) at position 3")."""
    if text.isprintable():  # C speed; also false for harmless characters (a no-break space), hence:
        return None
    m = _ANY_CONTROL.search(text)
    if m is None:
        return None
    ch = m.group()
    return f"{_NAMES.get(ch, f'a control character ({escape_char(ch)})')} at position {m.start()}"


def escape_controls(text: str) -> str:
    """`text` with its control characters escaped but line feeds and tabs (CR LF becomes LF first)."""
    if "\r" in text:
        text = text.replace("\r\n", "\n")
    if _ESCAPED.search(text) is None:
        return text
    return _ESCAPED.sub(_esc, text)


def escape_all_controls(text: str) -> str:
    """`text` on one line: every control character escaped, line feeds and tabs too."""
    if _ANY_CONTROL.search(text) is None:
        return text
    return _ANY_CONTROL.sub(_esc, text)


PR_TITLE_MAX = 200
"""Longest PR title, in characters (one line in every PR list; Gitea's own limit is 255)."""
PR_TEXT_MAX = 65_536
"""Longest PR body, review body or comment, in characters (64 KiB of ASCII: pages of prose; a log or a diff
belongs in a file on the branch). A 1 MB body was accepted and grew the forge's state log by 1 MB."""
BRANCH_NAME_MAX = 200
"""Longest branch name a PR may name, in characters (a name is echoed in refusals and kept in the PR)."""
FORGE_TEXTS: dict[str, tuple[str, int, str]] = {
    "title": ("a PR title", PR_TITLE_MAX, "put the rest in the body"),
    "body": ("the PR body", PR_TEXT_MAX, "put long material in a file on your branch and name it"),
    "review": ("the review body", PR_TEXT_MAX, "say the gist; put long material in a file on your branch"),
    "comment": ("the comment", PR_TEXT_MAX, "say the gist; put long material in a file on your branch"),
    "head": ("the head branch name", BRANCH_NAME_MAX, "name it <your id>/<topic>"),
    "base": ("the base branch name", BRANCH_NAME_MAX, "PRs target main"),
}
"""Each forge text an agent writes: how a refusal names it, its limit, and what to do instead. Both forges
refuse past the limit (services/forge/rules.py) and the tools check first (agensh_ray/worker/backend.py), so
a long text never crosses to the forge actor; same words either way."""


def forge_text_problem(kind: str, text: object) -> str | None:
    """None if `text` (a "title", "body", "review", "comment", a "head" or "base" branch name) is within its
    limit, else the refusal
    ("the PR body is 1,048,576 characters; the limit is 65,536 (put long material in ...)")."""
    what, limit, hint = FORGE_TEXTS[kind]
    if isinstance(text, str) and len(text) > limit:
        return f"{what} is {len(text):,} characters; the limit is {limit:,} ({hint})"
    return None


def whole_number(value: Any, name: str, lo: int, hi: int | None, error: type[Exception]) -> int:
    """`value` if it is an int (not a bool) in [lo, hi] (hi None: no upper bound), else `error` with a
    message naming the argument and its range."""
    if isinstance(value, bool) or not isinstance(value, int) or value < lo or (hi is not None and value > hi):
        span = f"from {lo:,} to {hi:,}" if hi is not None else f"{lo:,} or more"
        raise error(f"{name} must be a whole number {span}, not {value!r}")
    return value
