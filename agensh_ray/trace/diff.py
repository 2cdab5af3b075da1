"""diff_changes: a unified git diff as change blocks, the rows of the pr_changes table.

The forge snapshots a PR's diff (with context, possibly truncated) when it is opened, merged or
closed; the analysis wants what `git diff -U0` would show (which lines each PR touches, and in
which function) to find hotspots and duplicated work. This reads the one into the other.
"""

from __future__ import annotations

import re


def _funcname(line: str) -> str:
    """git's default funcname rule (xdiff def_ff) on a diff line: the text if it starts with a
    letter, _ or $, cut at 80 bytes like git's heading buffer."""
    text = line[1:]
    if text[:1].isalpha() or text[:1] in ("_", "$"):
        return text.encode()[:80].decode(errors="ignore").rstrip()
    return ""


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@ ?(.*)$")


def diff_changes(diff: str, files: list[str] = ()) -> list[dict]:
    """The change blocks of a unified git diff, as PrChangeRow fields (path, status, old/new
    start and lines, function): what `git diff -U0` would print, read from a diff with context.
    A block's function is the nearest old-side line above it that git's default funcname rule
    accepts (starts with a letter, _ or $), else the hunk's heading. Paths in `files` that the
    (possibly truncated) diff does not show get one row with null line numbers."""
    out: list[dict] = []
    path = status = None
    function = ""
    old_no = new_no = 0
    block: dict | None = None
    seen: set[str] = set()
    file_rows = 0

    def end_block() -> None:
        nonlocal block
        if block is not None:
            out.append(block)
            block = None

    def end_file() -> None:
        end_block()
        if path is not None and file_rows == len(out):  # no text hunk: one file-level row
            out.append(dict(path=path, status=status, old_start=None, old_lines=None, new_start=None,
                            new_lines=None, function=""))

    for line in diff.splitlines():
        if line.startswith("diff --git "):
            end_file()
            a, _, b = line[len("diff --git a/"):].partition(" b/")
            path, status, function, file_rows = b or a, "modified", "", len(out)
            seen.add(path)
        elif path is None:
            continue
        elif line.startswith("new file mode"):
            status = "added"
        elif line.startswith("deleted file mode"):
            status = "deleted"
        elif line.startswith("rename to "):
            status = "renamed"
        elif line.startswith("--- ") or line.startswith("+++ "):
            name = line[4:].rstrip("\t")
            if name.startswith(("a/", "b/")) and (line.startswith("+++ ") or status == "deleted"):
                seen.discard(path)
                path = name[2:]
                seen.add(path)
        elif line.startswith("@@"):
            end_block()
            m = _HUNK.match(line)
            if m:
                old_no, new_no, function = int(m.group(1)), int(m.group(3)), m.group(5).rstrip()
                # git numbers an empty side's range from the line it follows; make it the next line
                if m.group(2) == "0":
                    old_no += 1
                if m.group(4) == "0":
                    new_no += 1
        elif line[:1] in ("-", "+"):
            if block is None:
                block = dict(path=path, status=status, old_start=old_no, old_lines=0, new_start=new_no,
                             new_lines=0, function=function)
            if line[0] == "-":
                block["old_lines"] += 1
                old_no += 1
                function = _funcname(line) or function
            else:
                block["new_lines"] += 1
                new_no += 1
        elif line[:1] == " ":
            end_block()
            old_no += 1
            new_no += 1
            function = _funcname(line) or function
    end_file()
    for row in out:  # -U0 convention: an empty side starts at the line it follows
        if row["old_lines"] == 0:
            row["old_start"] -= 1
        if row["new_lines"] == 0:
            row["new_start"] -= 1
    for f in files:
        if f not in seen:
            out.append(dict(path=f, status="modified", old_start=None, old_lines=None, new_start=None,
                            new_lines=None, function=""))
    return out
