"""Build a task folder for FIGlet from the installed Debian package `figlet` (apt-get install figlet).

    python tasks/debian/figlet.py [--out DIR]    # default: tasks/debian__figlet.<version>/

FIGlet (cmatsuoka/figlet, one of ProgramBench's 200 repositories) turns text into large letters
made of ordinary characters: text in, text out, deterministic. Nobody here wrote it. The task
folder is in ProgramBench's format and is not committed (the binary is Debian's):

* `executable`: the package's binary, the execute-only reference (its sha256 in eval_clean_hashes,
  so a submission cannot ship a copy of it);
* `workspace/`: what the workers start from: the manual (rendered man page), README and the FIGfont
  format description from /usr/share/doc/figlet; fonts stay in /usr/share/figlet, where the
  reference reads them;
* hidden tests the ProgramBench way (`agensh_ray.task.golden`): golden outputs recorded from the
  binary, 4 branches (basic, fonts, layout, and `info`, ignored: its output is this build's
  version and install paths), tests a trivial dummy passes ignored with reason dummy_pass;
* `agensh.hide`: the package's own program paths, masked in the scoring sandbox so a build
  cannot delegate to the installed figlet.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml
from programbench.constants import TASKS_DIR as PB_TASKS

from agensh_ray.paths import TASKS_DIR
from agensh_ray.task.golden import Case, write_tests

PACKAGE = "figlet"
REPOSITORY = "cmatsuoka/figlet"
CATALOGUE_ID = "cmatsuoka__figlet.202a0a8"  # ProgramBench's instance of the same program
FONTS = ["banner", "big", "block", "bubble", "digital", "lean", "mini", "script", "shadow", "slant", "small",
         "smscript", "smshadow", "smslant", "standard", "term"]
INFO_REASON = "version- and install-specific output (-v prints this build's version banner, -I1/-I2/-I5 its " \
              "version number, font directory and formats)"

WORDS = ["Hello", "hello world", "FIGlet", "ProgramBench", "a", "Ab", "123", "2 + 2 = 4", "C'est", "!?#&",
         "x_y-z", "(parens)", "[brackets]", "{braces}", "tab\there", "UPPER lower", "Mixed Case 42", "@home",
         "~tilde~", "back\\slash", "q", "zz", "The quick brown fox", "$5.00", "50%", "a.b,c;d:e", "<tag>",
         "\"quoted\"", "one  two", "end."]
LINES = ["two\nlines\n", "a\n\nb\n", "trailing   \n", "no final newline", "\n", "short\nand a much longer line\n",
         "wrap me please, this line is long enough to need wrapping at eighty columns for sure\n"]


def cases() -> list[Case]:
    out: list[Case] = []

    def add(branch: str, ident: str, args: list[str], stdin: str = "") -> None:
        out.append(Case(branch=branch, id=ident, args=args, stdin=stdin))

    for i, w in enumerate(WORDS, 1):
        add("basic", f"word-{i:02d}", [w])
    for i, text in enumerate(LINES, 1):
        add("basic", f"stdin-{i:02d}", [], text)
    add("basic", "two-args", ["two", "args"])
    add("basic", "empty-arg", [""])
    for font in FONTS:
        for j, w in enumerate(["Hi", "figlet 2", "Aa Zz"], 1):
            add("fonts", f"{font}-{j}", ["-f", font, w])
    add("fonts", "font-by-path", ["-f", "/usr/share/figlet/small.flf", "path"])
    add("fonts", "font-dir", ["-d", "/usr/share/figlet", "-f", "mini", "dir"])
    add("fonts", "no-such-font", ["-f", "nosuchfont", "x"])
    layout = [
        ("center", ["-c", "mid"]), ("right", ["-r", "right"]), ("left", ["-l", "left"]), ("auto-x", ["-x", "auto"]),
        ("width-40", ["-w", "40", "a long message here"]), ("width-20", ["-w", "20", "wrap"]),
        ("width-120", ["-w", "120", "very wide output line"]), ("width-1", ["-w", "1", "ab"]),
        ("kern", ["-k", "kerning"]), ("full-width", ["-W", "full"]), ("smush", ["-s", "smush"]),
        ("force-smush", ["-S", "forced"]), ("overlap", ["-o", "overlap"]), ("paragraph", ["-p"], "para one\ncontinues here\n\nnext para\n"),
        ("normal", ["-n", "normal"]), ("rtl", ["-R", "right to left"]), ("ltr", ["-L", "left to right"]),
        ("default-dir", ["-X", "dflt"]), ("center-width", ["-c", "-w", "50", "centered"]),
        ("right-width", ["-r", "-w", "60", "flush"]), ("slant-center", ["-f", "slant", "-c", "sc"]),
        ("small-kern", ["-f", "small", "-k", "sk"]), ("big-full", ["-f", "big", "-W", "bf"]),
        ("mini-right", ["-f", "mini", "-r", "-w", "30", "mr"]), ("term-font", ["-f", "term", "-c", "plain"]),
        ("width-stdin", ["-w", "30"], "a b c d e f g h i j k l\n"), ("paragraph-width", ["-p", "-w", "40"], "w x y z\nw x y z\n"),
        ("bad-option", ["-q", "x"]), ("missing-width", ["-w"]), ("dash-dash", ["--", "-x"]),
        ("smush-mode-0", ["-m", "0", "m0"]), ("smush-mode-1", ["-m", "1", "m1"]), ("smush-mode-15", ["-m", "15", "m15"]),
        ("smush-mode-neg", ["-m", "-1", "mneg"]), ("control-utf8", ["-C", "utf8", "utf"]),
        ("deutsch", ["-D", "deu"]), ("no-deutsch", ["-E", "deu"]), ("no-control", ["-N", "nc"]),
    ]
    for ident, args, *stdin in layout:
        add("layout", ident, args, stdin[0] if stdin else "")
    info = [("version", ["-v"]), ("info-0", ["-I0"]), ("info-1", ["-I1"]), ("info-2", ["-I2"]),
            ("info-3", ["-I3"]), ("info-4", ["-I4"]), ("info-5", ["-I5"]), ("info-slant", ["-f", "slant", "-I3"])]
    for ident, args in info:
        add("info", ident, args)
    return out


def installed_binary() -> tuple[Path, str]:
    """The package's real binary (through the alternatives link) and the package version."""
    exe = shutil.which("figlet")
    if exe is None:
        sys.exit("figlet is not installed: apt-get install figlet (.ci/run installs it)")
    version = subprocess.run(["dpkg-query", "-W", "-f=${Version}", PACKAGE], capture_output=True, text=True).stdout
    return Path(os.path.realpath(exe)), version.strip() or "unknown"


def render_man(page: Path) -> str:
    troff = gzip.decompress(page.read_bytes()).decode("utf-8", "replace")
    env = {**os.environ, "GROFF_NO_SGR": "1"}
    out = subprocess.run(["groff", "-man", "-Tascii", "-P-cbou"], input=troff, capture_output=True, text=True,
                         env=env)
    return out.stdout if out.returncode == 0 and out.stdout.strip() else troff


def build(out: Path | None = None) -> Path:
    binary, version = installed_binary()
    upstream = version.split("-")[0]
    iid = f"debian__figlet.{upstream}"
    out = Path(out) if out else TASKS_DIR / iid
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    shutil.copyfile(binary, out / "executable")
    (out / "executable").chmod(0o111)
    gold = hashlib.sha256(binary.read_bytes()).hexdigest()
    ws = out / "workspace"
    (ws / "docs").mkdir(parents=True)
    (ws / "docs" / "figlet.6.txt").write_text(render_man(Path("/usr/share/man/man6/figlet-figlet.6.gz")))
    for doc in ("README", "figfont.txt"):
        src = Path(f"/usr/share/doc/figlet/{doc}.gz")
        if src.is_file():
            (ws / "docs" / doc).write_bytes(gzip.decompress(src.read_bytes()))
    (ws / "README.md").write_text(
        "# FIGlet\n\nRebuild `figlet`: large letters out of ordinary screen characters. The manual is "
        "`docs/figlet.6.txt`, the font format `docs/figfont.txt`; the fonts (`*.flf`) and control files "
        "(`*.flc`) are in /usr/share/figlet, where the reference reads them too. `reference/figlet` is the "
        "reference executable (execute-only). `./compile.sh` must build `./executable`.\n")
    hide = sorted({str(binary), "/usr/bin/figlet", "/etc/alternatives/figlet", "/usr/bin/chkfont",
                   "/usr/bin/figlist", "/usr/bin/showfigfonts"})
    (out / "task.yaml").write_text(yaml.safe_dump({
        "repository": REPOSITORY, "commit": str(yaml.safe_load((PB_TASKS / CATALOGUE_ID / "task.yaml").read_text())["commit"]), "language": "c", "difficulty": "easy",
        "eval_clean_hashes": [gold],
        "agensh": {"title": f"Rebuild FIGlet {upstream} from its execute-only binary and manual", "program": "figlet",
                   "debian_package": f"{PACKAGE} {version}", "hide": hide},
    }, sort_keys=False))
    write_tests(out, cases(), out / "executable", ignored_branches={"info": INFO_REASON})
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Build the FIGlet task folder from the installed Debian package.")
    p.add_argument("--out", type=Path, default=None, help="the task folder to write (default: tasks/<instance id>)")
    a = p.parse_args(argv)
    out = build(a.out)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
