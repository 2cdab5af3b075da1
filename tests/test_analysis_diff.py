"""diff_changes (the forge's PR snapshots for table pr_changes) against real git:
its change blocks, read from an ordinary diff with context, must be the hunks
`git diff -U0` prints."""

from __future__ import annotations

import re
import subprocess

from agensh_ray.trace import diff_changes


def git(repo, *args) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


def u0_blocks(diff: str) -> list[tuple]:
    out, path = [], None
    for line in diff.splitlines():
        if line.startswith("+++ b/") or line.startswith("--- a/"):
            path = line[6:]
        m = re.match(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@ ?(.*)$", line)
        if m:
            o0, ol, n0, nl = int(m[1]), int(m[2] or 1), int(m[3]), int(m[4] or 1)
            out.append((path, o0, ol, n0, nl, m[5].strip()))
    return out


def test_change_blocks_are_what_git_diff_U0_prints(git_env):
    repo = git_env / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    body = [f"    x{i} = {i}" for i in range(1, 41)]
    src = ["def parse(text):", *body[:20], "", "def render(x):", *body[20:]]
    (repo / "core.py").write_text("\n".join(src) + "\n")
    (repo / "gone.txt").write_text("bye\n")
    long_def = "def " + "a" * 120 + "(x):\n"  # git cuts headings at 80 bytes
    (repo / "long.py").write_text(long_def + "".join(f"    y{i} = 1\n" for i in range(10)))
    (repo / "moved.txt").write_text("".join(f"line {i}\n" for i in range(30)))
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    new = list(src)
    new[3] = "    x3 = 33"  # rewrite one line
    new[10:12] = []  # delete two
    new.insert(25, "    inserted = True")  # pure insertion in render
    new.append("    tail = 1")
    (repo / "core.py").write_text("\n".join(new) + "\n")
    (repo / "gone.txt").unlink()
    (repo / "long.py").write_text(long_def + "".join(f"    y{i} = {2 if i == 1 else 1}\n" for i in range(10)))
    (repo / "added.py").write_text("a = 1\nb = 2\n")
    (repo / "logo.png").write_bytes(bytes(range(256)))
    git(repo, "mv", "moved.txt", "renamed.txt")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "change")

    rows = diff_changes(git(repo, "diff", "-M", "HEAD~1", "HEAD"), files=["logo.png", "not-in-diff.txt"])
    blocks = [(r["path"], r["old_start"], r["old_lines"], r["new_start"], r["new_lines"], r["function"])
              for r in rows if r["old_start"] is not None]
    assert blocks == u0_blocks(git(repo, "diff", "-U0", "-M", "HEAD~1", "HEAD"))
    status = {r["path"]: r["status"] for r in rows}
    assert status == {"added.py": "added", "core.py": "modified", "long.py": "modified", "gone.txt": "deleted", "logo.png": "added",
                      "renamed.txt": "renamed", "not-in-diff.txt": "modified"}
    file_level = sorted(r["path"] for r in rows if r["old_start"] is None)
    assert file_level == ["logo.png", "not-in-diff.txt", "renamed.txt"]
    assert any(b[0] == "core.py" and b[2] == 0 and b[5] == "def render(x):" for b in blocks)  # the insertion
