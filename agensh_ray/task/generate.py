"""Generated tasks: a program of F features sized for an organization, written in the bundled textkit's format
(ProgramBench's task.yaml + tests.json + tests/<branch>/eval/, workspace/, build.sh + src/, task.md, oracle/).

    python -m agensh_ray.tasks generate --features 1024 --seed 0 --out tasks/gen-1024-s0 [--depth L] [--width W]
        [--registries R] [--helpers H] [--helper-share P] [--size-alpha A] [--size-min M] [--size-max X] [--branches B]

The program, `genkit`, has one subcommand per feature: `genkit NAME [K]` reads lines on stdin and writes them
transformed: first by its primary dependency's transform (the feature on the level below it), then by a shared
helper (for a share P of the features), then by its own steps (string operations from `genkit/ops.py`, one line
each: a feature's size), and last every line gets its key and its other dependencies' keys appended. So a
feature cannot pass a test before its dependencies are merged (its module imports theirs), and a feature that
uses a helper needs that helper's line in `genkit/shared.py`, which whoever first needs it writes (duplicate work
and conflicts where two do so at once). Features register in one of R registry files.

Everything is drawn from `random.Random` seeded with strings of the seed: same arguments, byte-identical folder.
The code is rendered from compact templates; the reference is one file (the ops, a table of the features and a
dispatcher) compiled into an execute-only ELF by build.sh, as textkit's; the expected outputs of the hidden tests
are computed by the same code in this process (running the reference once per test would take minutes at
F=4096), and the tests a trivial dummy passes are ignored as `dummy_pass`, decided by the shipped test file's own
comparison (`golden.py`). The generated task's own tests (tests/test_task_generate.py) check that the compiled
reference scores 1.0 through the Evaluator.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from agensh_ray.paths import TASKS_DIR
from agensh_ray.task.golden import DUMMIES, FILES, _runner, golden_test_name

PROGRAM = "genkit"
SHARED = "genkit/shared.py"
HELPER_MARK = "# -- end of helpers: add new ones just above this line --"
GENERATOR_VERSION = 1

# The operations every feature is made of (the starter's genkit/ops.py; the reference has the same code).
OPS_SOURCE = '''\
def shift(lines, n):
    """Shift every ASCII letter n places along the alphabet (case kept)."""
    out = []
    for line in lines:
        chars = []
        for c in line:
            if "a" <= c <= "z":
                c = chr((ord(c) - 97 + n) % 26 + 97)
            elif "A" <= c <= "Z":
                c = chr((ord(c) - 65 + n) % 26 + 65)
            chars.append(c)
        out.append("".join(chars))
    return out


def rev(lines):
    """Reverse every line."""
    return [line[::-1] for line in lines]


def swap(lines):
    """Swap the case of every ASCII letter."""
    return [line.swapcase() for line in lines]


def rotl(lines, n):
    """Rotate every line n characters to the left."""
    return [line[n % len(line):] + line[:n % len(line)] if line else line for line in lines]


def drop(lines, n):
    """Remove every n-th character of every line (the n-th, the 2n-th, ...)."""
    return ["".join(c for i, c in enumerate(line) if (i + 1) % n) for line in lines]


def dup(lines, n):
    """Double every n-th character of every line (the first, the (n+1)-th, ...)."""
    return ["".join(c * 2 if i % n == 0 else c for i, c in enumerate(line)) for line in lines]


def sub(lines, a, b):
    """Replace the character a by b."""
    return [line.replace(a, b) for line in lines]


def flip(lines):
    """Reverse the order of the lines."""
    return lines[::-1]


def words(lines):
    """Sort the words (split on spaces) of every line; runs of spaces become one."""
    return [" ".join(sorted(line.split())) for line in lines]


def upw(lines, n):
    """Upper-case every n-th word (the first, the (n+1)-th, ...) of every line; runs of spaces become one."""
    return [" ".join(w.upper() if i % n == 0 else w for i, w in enumerate(line.split())) for line in lines]


def tag(lines, s):
    """Append s to every line."""
    return [line + s for line in lines]
'''

OP_DOCS = {
    "shift": "shift letters by {0}{k}", "rev": "reverse each line", "swap": "swap the case of letters",
    "rotl": "rotate each line left by {0}", "drop": "remove every {0}th character", "dup": "double every {0}th "
    "character from the first", "sub": "replace {0!r} by {1!r}", "flip": "reverse the order of the lines",
    "words": "sort the words of each line", "upw": "upper-case every {0}th word from the first",
}
OP_NAMES = sorted(OP_DOCS)
SUB_CHARS = "aeiostnrl _-.0123456789"

PARSE_K = '''\
def parse_k(args):
    """The optional integer argument K (default 0): shifts move K places further."""
    if len(args) > 1 or (args and not _INT.fullmatch(args[0])):
        raise UsageError("usage: NAME [K] (K an integer)")
    return int(args[0]) if args else 0
'''

REFERENCE_MAIN = '''\
def steps(spec, lines, k):
    for op, *a in spec:
        if op == "shift":
            lines = shift(lines, a[0] + k)
        else:
            lines = globals()[op](lines, *a)
    return lines


def transform(name, lines, k):
    dep, extra, helpers, own, key = SPEC[name]
    if dep:
        lines = transform(dep, lines, k)
    for h in helpers:
        lines = steps(HELPERS[h], lines, k)
    lines = steps(own, lines, k)
    return tag(lines, key + "".join(SPEC[x][4] for x in extra))


def main(argv):
    if not argv or argv[0] not in SPEC:
        sys.stderr.write("usage: genkit NAME [K]\\n")
        return 2
    try:
        k = parse_k(argv[1:])
    except UsageError as e:
        sys.stderr.write(f"genkit: {argv[0]}: {e}\\n")
        return 2
    out = transform(argv[0], split_lines(sys.stdin.read()), k)
    sys.stdout.write("".join(line + "\\n" for line in out))
    return 0


sys.exit(main(sys.argv[1:]))
'''

HEADER_COMMON = '''\
import re
import sys


class UsageError(Exception):
    pass


_INT = re.compile(r"-?[0-9]+")


def split_lines(text):
    lines = text.split("\\n")
    if lines[-1] == "":
        lines.pop()
    return lines


'''


@dataclass
class Params:
    """What `generate` is asked for; every field is a CLI option (python -m agensh_ray.tasks generate --help)."""

    features: int
    seed: int = 0
    depth: int = 4
    """L: the critical path, in features (the levels of the dependency graph)."""
    width: int | None = None
    """W: the most features on one level; default ceil(F / L), the least possible."""
    registries: int = 4
    """R: registry files the features register in (each feature in one, drawn at random)."""
    helpers: int | None = None
    """H: shared helpers in genkit/shared.py; default max(1, F // 16)."""
    helper_share: float = 0.2
    """P: the share of features whose transform uses a helper."""
    extra_deps: float = 0.5
    """Mean number of extra dependencies (keys of features on lower levels) per feature above level 0."""
    size_alpha: float = 1.2
    """Pareto shape of the feature sizes (lines of steps): smaller, heavier tail."""
    size_min: int = 2
    size_max: int = 200
    branches: int | None = None
    """Hidden test branches; default ceil(F / 128), at most 32."""

    def check(self) -> None:
        F, L = self.features, self.depth
        if F < 1:
            raise ValueError("--features must be at least 1")
        if not 1 <= L <= F:
            raise ValueError(f"--depth must be between 1 and F={F}")
        W = self.width_
        if not math.ceil(F / L) <= W <= F - L + 1:
            raise ValueError(f"--width must be between ceil(F/L)={math.ceil(F / L)} and F-L+1={F - L + 1}")
        if self.registries < 1 or self.helpers_ < 1 or not 0 <= self.helper_share <= 1:
            raise ValueError("--registries and --helpers must be >= 1, --helper-share in [0, 1]")
        if not 1 <= self.size_min <= self.size_max or self.size_alpha <= 0:
            raise ValueError("sizes: 1 <= --size-min <= --size-max, --size-alpha > 0")

    @property
    def width_(self) -> int:
        return self.width if self.width is not None else math.ceil(self.features / self.depth)

    @property
    def helpers_(self) -> int:
        return self.helpers if self.helpers is not None else max(1, self.features // 16)

    @property
    def branches_(self) -> int:
        return self.branches if self.branches is not None else max(1, min(32, math.ceil(self.features / 128)))


@dataclass
class Feat:
    name: str
    index: int
    level: int
    registry: str
    size: int
    dep: str | None = None
    extra: list[str] = field(default_factory=list)
    helpers: list[str] = field(default_factory=list)
    steps: list[list] = field(default_factory=list)
    key: str = ""

    @property
    def module(self) -> str:
        return f"genkit/commands/{self.name}.py"

    @property
    def registry_line(self) -> str:
        return f'    "{self.name}": "genkit.commands.{self.name}",'

    @property
    def deps(self) -> list[str]:
        return ([self.dep] if self.dep else []) + self.extra


def _rng(p: Params, what: str) -> random.Random:
    return random.Random(f"agensh-generate:{GENERATOR_VERSION}:{p.seed}:{what}")


def _step(rng: random.Random) -> list:
    op = rng.choice(OP_NAMES)
    if op == "shift":
        return [op, rng.randint(1, 25)]
    if op == "rotl":
        return [op, rng.randint(1, 7)]
    if op in ("drop", "dup", "upw"):
        return [op, rng.randint(2, 5)]
    if op == "sub":
        a, b = rng.sample(SUB_CHARS, 2)
        return [op, a, b]
    return [op]


def level_sizes(p: Params) -> list[int]:
    """How many features each of the L levels holds: each at least 1, at most W, one exactly W, summing to F."""
    F, L, W = p.features, p.depth, p.width_
    rng = _rng(p, "levels")
    sizes = [1] * L
    widest = rng.randrange(L)
    sizes[widest] = W
    left = F - sum(sizes)
    open_ = [i for i in range(L) if sizes[i] < W]
    while left > 0:  # spread the rest evenly at random: fill levels round-robin in a shuffled order
        rng.shuffle(open_)
        for i in list(open_):
            if left == 0:
                break
            sizes[i] += 1
            left -= 1
            if sizes[i] == W:
                open_.remove(i)
    return sizes


def design(p: Params) -> tuple[list[Feat], dict[str, list[list]]]:
    """The features (graph, sizes, registries, helpers, steps, keys) and the helpers' steps."""
    p.check()
    F = p.features
    digits = max(4, len(str(F - 1)))
    names = [f"f{i:0{digits}d}" for i in range(F)]
    order = list(range(F))
    _rng(p, "order").shuffle(order)  # which feature index sits on which level: not by number
    levels: list[list[int]] = []
    at = 0
    for n in level_sizes(p):
        levels.append(sorted(order[at:at + n]))
        at += n
    feats: dict[int, Feat] = {}
    sizes_rng, reg_rng, dep_rng, help_rng, step_rng = (_rng(p, w) for w in ("sizes", "registries", "deps", "helpers",
                                                                             "steps"))
    helper_names = [f"h{j:03d}" for j in range(p.helpers_)]
    below: list[int] = []  # every feature on a level under the current one
    for lvl, idxs in enumerate(levels):
        if lvl > 0:
            below += levels[lvl - 1]
        for i in idxs:
            u = sizes_rng.random()
            size = min(p.size_max, int(p.size_min * (1.0 - u) ** (-1.0 / p.size_alpha)))
            f = Feat(names[i], i, lvl, f"genkit/registry/r{reg_rng.randrange(p.registries):02d}.py", size)
            if lvl > 0:
                f.dep = names[dep_rng.choice(levels[lvl - 1])]
                n_extra = 0
                while p.extra_deps > 0 and dep_rng.random() < p.extra_deps / (1 + p.extra_deps) and n_extra < 3:
                    n_extra += 1
                cand = sorted({names[j] for j in dep_rng.sample(below, min(n_extra, len(below)))} - {f.dep})
                f.extra = cand
            if help_rng.random() < p.helper_share:
                f.helpers = [help_rng.choice(helper_names)]
            # size = lines of the transform: its steps and the final tag line
            f.steps = [_step(step_rng) for _ in range(size - 1)]
            f.key = "".join(step_rng.choice("abcdefghijkmnpqrstuvwxyz23456789") for _ in range(3))
            feats[i] = f
    hrng = _rng(p, "helper-steps")
    helpers = {h: [_step(hrng) for _ in range(hrng.randint(2, 3))] for h in helper_names}
    return [feats[i] for i in range(F)], helpers


# -- rendering -------------------------------------------------------------------------------------------
def _call(step: list) -> str:
    op, *a = step
    if op == "shift":
        return f"ops.shift(lines, {a[0]} + k)"
    return f"ops.{op}(lines{''.join(', ' + repr(x) for x in a)})"


def helper_line(name: str, steps: list[list]) -> str:
    """The one line that defines a helper in genkit/shared.py."""
    expr = "lines"
    for op, *a in steps:
        rest = "".join(", " + repr(x) for x in a)
        expr = f"ops.shift({expr}, {a[0]} + k)" if op == "shift" else f"ops.{op}({expr}{rest})"
    return f"def {name}(lines, k): return {expr}"


def render_module(f: Feat) -> str:
    """The feature's module as the oracle writes it."""
    deps = ", ".join(f.deps)
    about = f"builds on {deps}" if deps else "no dependencies"
    body = [f'"""{f.name} [K]: {about} (docs/genkit.md, "{f.name}")."""', "",
            "from genkit import join_lines, ops, split_lines", "", f'KEY = "{f.key}"', "", "",
            "def transform(lines: list[str], k: int) -> list[str]:"]
    if f.dep:
        body.append(f"    from genkit.commands.{f.dep} import transform as {f.dep}")
    for x in f.extra:
        body.append(f"    from genkit.commands.{x} import KEY as {x}_key")
    if f.helpers:
        body.append("    from genkit import shared")
    if f.dep:
        body.append(f"    lines = {f.dep}(lines, k)")
    for h in f.helpers:
        body.append(f"    lines = shared.{h}(lines, k)")
    for s in f.steps:
        body.append(f"    lines = {_call(s)}")
    body.append(f"    lines = ops.tag(lines, {' + '.join(['KEY'] + [x + '_key' for x in f.extra])})")
    body += ["    return lines", "", "",
             "def main(args: list[str], stdin: str) -> tuple[str, int]:",
             "    return join_lines(transform(split_lines(stdin), ops.parse_k(args))), 0", ""]
    return "\n".join(body)


def bug(f: Feat) -> tuple[str, str]:
    """The oracle's planted bug: a wrong key (every output line ends differently)."""
    return f'KEY = "{f.key}"', f'KEY = "{f.key[::-1]}_"'


def doc_entry(f: Feat) -> str:
    steps = []
    if f.dep:
        steps.append(f"the output of `{f.dep}` (same K)")
    steps += [f"helper `{h}`" for h in f.helpers]
    for op, *a in f.steps:
        steps.append(OP_DOCS[op].format(*a, k=" + K" if op == "shift" else ""))
    keys = " + ".join([f"`{f.key}`"] + [f"the key of `{x}`" for x in f.extra])
    steps.append(f"append {keys} to each line")
    return f"### {f.name}\n\nKey `{f.key}`. " + "; then ".join(steps) + ".\n"


# -- the reference and the expected outputs -------------------------------------------------------------
def reference_source(feats: list[Feat], helpers: dict[str, list[list]]) -> str:
    spec = {f.name: (f.dep, tuple(f.extra), tuple(f.helpers), tuple(tuple(s) for s in f.steps), f.key) for f in feats}
    hs = {h: tuple(tuple(s) for s in st) for h, st in helpers.items()}
    return ('"""genkit, reference implementation (generated: agensh_ray/task/generate.py). Never shown to the '
            'workers:\nbuild.sh compiles it into an execute-only ELF."""\n\n' + HEADER_COMMON + OPS_SOURCE + "\n\n"
            + PARSE_K + "\n\nSPEC = " + repr(spec) + "\nHELPERS = " + repr(hs) + "\n\n\n" + REFERENCE_MAIN)


class Engine:
    """The reference's code, in this process: expected outputs without a process per test."""

    def __init__(self, source: str):
        self.ns: dict = {"__name__": "genkit_reference"}
        exec(compile(source.replace("\nsys.exit(main(sys.argv[1:]))\n", "\n"), "genkit_ref", "exec"), self.ns)
        self.memo: dict = {}

    def run(self, args: list[str], stdin: str) -> dict:
        ns = self.ns
        try:
            k = ns["parse_k"](args[1:])
        except ns["UsageError"]:
            return {"stdout": "", "exit_code": 2, "stderr": True}
        out = ns["transform"](args[0], ns["split_lines"](stdin), k)
        return {"stdout": "".join(line + "\n" for line in out), "exit_code": 0, "stderr": False}


WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa "
         "quebec romeo sierra tango uniform victor whiskey xray yankee zulu Ada Bob CAT dog EEL fig 42 7 x-ray a.b "
         "ok_go").split()


def _input(rng: random.Random) -> str:
    lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 4))) for _ in range(rng.randint(1, 3))]
    text = "\n".join(lines)
    return text if rng.random() < 0.2 else text + "\n"


def cases(p: Params, feats: list[Feat]) -> list[dict]:
    """The hidden tests' inputs: 1 + floor(log2(size)) per feature, every other one with a K; a usage error
    for every 16th feature (a dummy passes it: ignored, as ProgramBench ignores such tests)."""
    rng = _rng(p, "cases")
    out = []
    for f in feats:
        n = f.size.bit_length()
        for j in range(n):
            args = [f.name] + ([str(rng.randint(-3, 30))] if j % 2 else [])
            out.append({"feature": f.name, "id": f"{f.name}-{j + 1:02d}", "args": args, "stdin": _input(rng)})
        if f.index % 16 == 0:
            out.append({"feature": f.name, "id": f"{f.name}-{n + 1:02d}", "args": [f.name, "x"],
                        "stdin": _input(rng)})
    return out


def dummy_outcomes(stdin: str) -> list[dict]:
    """What each of golden.DUMMIES does on one case (the shipped test file's run_case, worked out)."""
    return [{"stdout": "", "exit_code": 0, "stderr": False}, {"stdout": "", "exit_code": 1, "stderr": False},
            {"stdout": "", "exit_code": 1, "stderr": True}, {"stdout": "", "exit_code": 2, "stderr": True},
            {"stdout": stdin, "exit_code": 0, "stderr": False}]


assert list(DUMMIES) == ["silent success", "silent failure", "error", "usage error", "echo stdin"]


# -- the workspace ---------------------------------------------------------------------------------------
INIT = '''\
"""genkit: a command-line line transformer, one module per subcommand (docs/genkit.md).

Shared by every command module, so keep it small and stable: the errors, and the line convention
("" has no lines; a final "\\\\n" ends the last line; every output line ends with "\\\\n")."""

from __future__ import annotations


class UsageError(Exception):
    """Bad arguments: stderr message, exit code 2."""


class CommandError(Exception):
    """Valid arguments but unusable input: stderr message, exit code 1."""


def split_lines(text: str) -> list[str]:
    lines = text.split("\\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def join_lines(lines) -> str:
    return "".join(line + "\\n" for line in lines)
'''

MAIN = '''\
"""`python -m genkit COMMAND [K]`: look COMMAND up in the registries and run it (do not change)."""

from __future__ import annotations

import importlib
import sys

from genkit import CommandError, UsageError
from genkit.registry import commands


def main(argv: list[str]) -> int:
    registered = commands()
    if not argv or argv[0] not in registered:
        names = ", ".join(sorted(registered)) or "(none registered yet)"
        sys.stderr.write(f"usage: python -m genkit COMMAND [K]\\ncommands: {names}\\n")
        return 2
    name, args = argv[0], argv[1:]
    command = importlib.import_module(registered[name])
    try:
        out, code = command.main(args, sys.stdin.read())
    except UsageError as e:
        sys.stderr.write(f"genkit: {name}: {e}\\n")
        return 2
    except CommandError as e:
        sys.stderr.write(f"genkit: {name}: {e}\\n")
        return 1
    sys.stdout.write(out)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
'''

REGISTRY_INIT = '''\
"""The command registries: {n} files, r00.py to r{last:02d}.py, each a dict COMMANDS of subcommand -> module.
Which file a command registers in is given in docs/genkit.md ("registry rNN")."""

import importlib

NAMES = {names!r}


def commands() -> dict[str, str]:
    out: dict[str, str] = {{}}
    for name in NAMES:
        out.update(importlib.import_module(f"genkit.registry.{{name}}").COMMANDS)
    return out
'''

REGISTRY = '''\
"""Registry {name}: add exactly ONE line for your command, just above the closing brace, and change nothing
else here. When a merge conflicts here, keep every side's lines."""

COMMANDS: dict[str, str] = {{
    # one line per command, just above the closing brace
}}
'''

SHARED_PY = f'''\
"""Shared helpers: one line each, `def hNNN(lines, k): return ...` (docs/genkit.md, "Helpers"). A command that
uses a helper nobody has written yet adds its line just above the end mark. When a merge conflicts here, keep
every side's lines (one copy of a helper that both sides added)."""

from genkit import ops  # noqa: F401

{HELPER_MARK}
'''

COMPILE = '''\
#!/bin/sh
# Builds ./executable, the program the hidden tests run: a launcher of this repository's genkit package.
set -e
cd "$(dirname "$0")"
cat > executable <<'LAUNCHER'
#!/bin/sh
HERE=$(dirname "$(readlink -f "$0")")
PYTHONPATH="$HERE" exec python3 -S -m genkit "$@"
LAUNCHER
chmod +x executable
'''

CHECK = '''\
"""Visible checks: does the build behave like the reference on the sample inputs?

    python checks/check.py                 # every registered command
    python checks/check.py f0001 f0002     # just these

Each sample is run through both `reference/genkit` and `python -m genkit`; stdout and exit code are compared.
One line per command: `PASS <cmd>` or `FAIL <cmd>: <reason>`; exit 0 only if all pass. The samples are few:
passing is necessary, not sufficient."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "reference" / "genkit"
SAMPLES = [([], "Hello World\\nabc xyz 123\\n"), (["3"], "one two three\\nfour"), ([], "")]


def run(argv: list[str], stdin: str) -> tuple[str, int]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONIOENCODING="utf-8", PYTHONDONTWRITEBYTECODE="1")
    try:
        p = subprocess.run(argv, input=stdin.encode(), capture_output=True, cwd=ROOT, env=env, timeout=10)
    except subprocess.TimeoutExpired:
        return "", -1
    return p.stdout.decode("utf-8", "replace"), p.returncode


def verdict(name: str, registered: dict) -> str | None:
    if name not in registered:
        return "not registered in genkit/registry/"
    for args, stdin in SAMPLES:
        want = run([str(REFERENCE), name, *args], stdin)
        got = run([sys.executable, "-m", "genkit", name, *args], stdin)
        if got != want:
            return f"`{' '.join([name, *args])}` on {stdin[:40]!r}: got {got!r:.80}, reference {want!r:.80}"
    return None


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(ROOT))
    try:
        from genkit.registry import commands

        registered = commands()
    except Exception as e:  # a broken registry (e.g. merge markers) fails every check
        for name in argv or ["registry"]:
            print(f"FAIL {name}: the registries do not import: {type(e).__name__}: {e}")
        return 1
    names = argv or sorted(registered)
    if not names:
        print("nothing to check: no command is registered yet")
        return 0
    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        reasons = list(pool.map(lambda n: verdict(n, registered), names))
    for name, reason in zip(names, reasons):
        print(f"PASS {name}" if reason is None else f"FAIL {name}: {reason}")
    return 0 if all(r is None for r in reasons) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
'''


def graph_summary(p: Params, feats: list[Feat]) -> dict:
    F, L = p.features, p.depth
    levels = [0] * L
    for f in feats:
        levels[f.level] += 1
    heavy: dict[str, int] = {}
    for f in sorted(feats, key=lambda f: f.level):  # heaviest chain of sizes (the critical path in lines)
        heavy[f.name] = f.size + max((heavy[d] for d in f.deps), default=0)
    total = sum(f.size for f in feats)
    return {
        "features": F, "critical_path": L, "width": max(levels), "levels": levels,
        "edges": sum(len(f.deps) for f in feats), "max_parallelism": F / L,
        "ideal_speedup": "min(N, F/L)",
        "ideal_speedup_at": {str(n): round(min(n, F / L), 3) for n in (1, 8, 64, 256, 1024)},
        "total_size": total, "critical_size": max(heavy.values()),
        "size_speedup_bound": round(total / max(heavy.values()), 3),
        "helpers_used": len({h for f in feats for h in f.helpers}),
        "features_with_helper": sum(bool(f.helpers) for f in feats),
        "registries": p.registries,
        "deps": {f.name: f.deps for f in feats if f.deps},
        "level_of": {f.name: f.level for f in feats},
    }


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    os.chmod(path, mode)


def _dumps(obj) -> str:
    return json.dumps(obj, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def _lines_json(items: list) -> str:
    """A JSON list, one item a line: compact and still diffable."""
    return "[\n" + ",\n".join(json.dumps(x, sort_keys=True, ensure_ascii=False) for x in items) + "\n]\n"


def generate(p: Params, out: Path) -> dict:
    """Write the task folder `out` (replaced if it exists and is a generated task or empty). Returns graph.json."""
    p.check()
    out = Path(out)
    if out.exists():
        if any(out.iterdir()) and not (out / "oracle" / "graph.json").is_file():
            raise FileExistsError(f"{out} exists and is not a generated task: not overwriting it")
        shutil.rmtree(out)
    feats, helpers = design(p)
    F = p.features
    registries = sorted({f"genkit/registry/r{i:02d}.py" for i in range(p.registries)})
    graph = graph_summary(p, feats)

    # task.yaml: ProgramBench's fields and the agensh section
    agensh = {
        "title": f"Rebuild genkit, a line transformer of {F} subcommands, from its reference executable and manual",
        "program": PROGRAM, "registry": registries[0], "registries": registries, "shared": [SHARED],
        "generated": {"generator_version": GENERATOR_VERSION, "features": F, "seed": p.seed, "depth": p.depth,
                      "width": p.width_, "registries": p.registries, "helpers": p.helpers_,
                      "helper_share": p.helper_share, "extra_deps": p.extra_deps, "size_alpha": p.size_alpha,
                      "size_min": p.size_min, "size_max": p.size_max, "branches": p.branches_,
                      "critical_path": graph["critical_path"], "max_parallelism": graph["max_parallelism"],
                      "ideal_speedup": "min(N, F/L)", "total_size": graph["total_size"],
                      "critical_size": graph["critical_size"]},
    }
    import yaml

    head = ("# Generated by `python -m agensh_ray.tasks generate` (agensh_ray/task/generate.py); "
            "ProgramBench's format.\n")
    _write(out / "task.yaml", head + yaml.safe_dump({
        "repository": f"agensh/genkit-{F}-s{p.seed}", "commit": "0000000000000000000000000000000000000002",
        "language": "python", "difficulty": "hard" if F > 256 else "medium", "agensh": agensh,
    }, sort_keys=False, width=120))

    # the reference: build.sh + src/ (textkit's builder: the interpreter embedded, the code inside the ELF)
    src = reference_source(feats, helpers)
    _write(out / "src" / "genkit_ref.py", src)
    _write(out / "src" / "build_exe.py", (TASKS_DIR / "textkit" / "src" / "build_exe.py").read_text(encoding="utf-8"))
    _write(out / "build.sh", "#!/bin/bash\n# Builds ./executable, the genkit reference, from src/ (execute-only ELF).\n"
           "set -euo pipefail\npython3 build_exe.py genkit_ref.py executable genkit\n", 0o755)

    # hidden tests: expected outputs from the reference's own code; dummy passes ignored
    engine = Engine(src)
    runner = _runner()
    nb = p.branches_
    by_branch: dict[str, list[dict]] = {f"part{b:02d}": [] for b in range(nb)}
    branch_of = {f.name: f"part{f.index * nb // F:02d}" for f in feats}
    data: dict = {"branches": {}}
    ignored: dict[str, list[str]] = {b: [] for b in by_branch}
    for c in cases(p, feats):
        rec = {"id": c["id"], "args": c["args"], "stdin": c["stdin"], **engine.run(c["args"], c["stdin"])}
        b = branch_of[c["feature"]]
        by_branch[b].append(rec)
        if any(runner.matches(d, rec) for d in dummy_outcomes(c["stdin"])):
            ignored[b].append(golden_test_name(c["id"]))
    run_sh = (FILES / "run.sh").read_text()
    test_py = (FILES / "test_golden.py").read_text()
    for b, recs in by_branch.items():
        _write(out / "tests" / b / "eval" / "run.sh", run_sh, 0o755)
        _write(out / "tests" / b / "eval" / "tests" / "test_golden.py", test_py)
        _write(out / "tests" / b / "eval" / "tests" / "cases.json", _lines_json(recs))
        data["branches"][b] = {"ignored": False, "ignore_reason": "",
                               "tests": [golden_test_name(r["id"]) for r in recs],
                               "ignored_tests": [{"name": n, "reasons": [{"id": "dummy_pass"}]} for n in ignored[b]]}
    _write(out / "tests.json", json.dumps(data, indent=2, sort_keys=True) + "\n")

    # the workspace: the repository's first commit
    ws = out / "workspace"
    _write(ws / "compile.sh", COMPILE, 0o755)
    _write(ws / ".gitignore", "/executable\n/reference/\n__pycache__/\n")
    _write(ws / "genkit" / "__init__.py", INIT)
    _write(ws / "genkit" / "__main__.py", MAIN)
    _write(ws / "genkit" / "ops.py", '"""The operations every command is made of (docs/genkit.md, "Operations")."""\n\n'
           "import re\n\nfrom genkit import UsageError\n\n_INT = re.compile(r\"-?[0-9]+\")\n\n\n"
           + OPS_SOURCE + "\n\n" + PARSE_K)
    _write(ws / "genkit" / "shared.py", SHARED_PY)
    _write(ws / "genkit" / "commands" / "__init__.py", '"""One module per subcommand: genkit/commands/<name>.py."""\n')
    names = [Path(r).stem for r in registries]
    _write(ws / "genkit" / "registry" / "__init__.py", REGISTRY_INIT.format(n=len(names), last=len(names) - 1,
                                                                            names=tuple(names)))
    for r in registries:
        _write(ws / r, REGISTRY.format(name=Path(r).stem))
    _write(ws / "checks" / "check.py", CHECK)
    _write(ws / "README.md", f"# genkit\n\nA line transformer of {F} subcommands: `python -m genkit NAME [K]`. "
           "The manual "
           "is `docs/genkit.md`; `reference/genkit` is the reference to match (execute-only). `./compile.sh` builds "
           "`./executable`, what the hidden tests run. Check a subcommand: `python checks/check.py NAME`.\n")
    by_level = sorted(feats, key=lambda f: (f.level, f.index))
    manual = [f"# genkit manual\n\n`genkit NAME [K]` reads lines on stdin and writes them transformed, one "
              f"transformation per subcommand ({F} of them). K is an optional integer (default 0): every `shift` "
              "moves K places further; anything else as argument is a usage error (exit 2, a message on stderr).\n\n"
              "## Conventions\n\nInput is split into lines on \"\\n\" (a final newline ends the last line; empty "
              "input has no lines); every output line ends with \"\\n\". A subcommand transforms the lines in order: "
              "first the output of the subcommand it builds on, then its helper, then its own steps, then it appends "
              "its key (and the keys of the other subcommands it names) to each line.\n\n## Operations\n\n"
              "`genkit/ops.py` has them all, one function each: " + ", ".join(f"`{o}`" for o in OP_NAMES)
              + ", `tag`.\n\n## Helpers\n\n" + "".join(f"- `{h}`: " + "; then ".join(
                  OP_DOCS[op].format(*a, k=" + K" if op == "shift" else "") for op, *a in st) + "\n"
                  for h, st in helpers.items())
              + "\n## Subcommands\n\nIn dependency order (a subcommand needs the ones it builds on merged first); "
              "each says its registry file.\n\n"]
    for f in by_level:
        manual.append(doc_entry(f).replace("\n\nKey", f"\n\nRegistry `{Path(f.registry).stem}`. Key", 1) + "\n")
    _write(ws / "docs" / "genkit.md", "".join(manual))

    # the task text
    _write(out / "task.md", TASK_MD.format(F=F, L=p.depth, W=p.width_, R=p.registries, last=p.registries - 1,
                                           example=feats[0].name))

    # the oracle: what only the sim reads
    hl = {h: {"file": SHARED, "line": helper_line(h, st), "size": len(st)} for h, st in helpers.items()}
    _write(out / "oracle" / "features.json", _lines_json([
        {"name": f.name, "module": f.module, "registry_line": f.registry_line, "registry": f.registry,
         "deps": f.deps, "helpers": f.helpers, "size": f.size} for f in feats]))
    _write(out / "oracle" / "helpers.json", _dumps(hl))
    _write(out / "oracle" / "program.json", _lines_json(
        [{"name": f.name, "dep": f.dep, "extra": f.extra, "helpers": f.helpers, "steps": f.steps, "key": f.key}
         for f in feats]))
    _write(out / "oracle" / "graph.json", _dumps(graph))
    return graph


TASK_MD = '''\
# Rebuild genkit

`genkit` is a command-line line transformer with {F} subcommands:

```
python -m genkit SUBCOMMAND [K]
```

It reads lines on stdin and writes them transformed on stdout (exit 0); a bad argument is a usage error
(exit 2, a message on stderr). **Your job, together with the other workers: rebuild genkit in this repository
so that every subcommand behaves exactly like the reference.** Everyone works on the same repository; split
the subcommands between you.

## What you have

- `reference/genkit`: the reference executable (execute-only: run it, it cannot be read):
  `printf 'hello\\n' | reference/genkit {example}`.
- `docs/genkit.md`: the manual: the conventions, the operations, the helpers, and every subcommand: what it
  builds on, its steps, its key and its registry file.
- `checks/check.py`: the visible checks.

Hidden tests, run after the session on `./executable` (built by `./compile.sh`), compare stdout, exit code and
whether anything went to stderr with the reference on inputs you have not seen.

## Repository structure

```
genkit/__init__.py           UsageError, CommandError, split_lines, join_lines
genkit/__main__.py           the dispatcher (do not change)
genkit/ops.py                the operations (do not change)
genkit/shared.py             shared helpers, one line each (shared!)
genkit/registry/rNN.py       {R} registries, r00 to r{last:02d}: subcommand -> module (shared!)
genkit/commands/<name>.py    one module per subcommand
checks/check.py              the visible checks
docs/genkit.md               the manual
```

## Dependencies

Subcommands build on others (at most {L} in a chain; at most {W} at the same depth): one's output is the input of
the next, and a subcommand appends the keys of the others it names. Its module imports theirs, so it cannot pass
its checks, and cannot be merged, before they are on `main`. Take a subcommand whose dependencies are merged.

## How to add a subcommand

1. Create `genkit/commands/<name>.py` defining `transform(lines, k)` (its steps, one line each, with the
   functions of `genkit/ops.py`), `KEY` and `main(args, stdin) -> (stdout, exit code)`; import the
   subcommands it builds on inside `transform`. If it uses a helper that is not in `genkit/shared.py` yet,
   add the helper's line just above the end mark there.
2. Register it with ONE line in its registry file (the manual says which), just above the closing `}}`:
   `    "{example}": "genkit.commands.{example}",`. Merges of these files and of `genkit/shared.py` often
   conflict; the resolution is always to keep every side's lines (one copy of a helper both sides added).

## How to verify

`python checks/check.py <name>` compares the build with the reference on sample inputs (`PASS`/`FAIL`). Also
compare on your own inputs.

## Iron rules

1. Never push to `main` directly. Work on a branch and merge through a pull request.
2. Keep `main` passing: before merging, update your branch with the latest `main`, resolve conflicts and run
   the checks again.
3. Do not edit another subcommand's module, the dispatcher or the operations. In the registries and in
   `genkit/shared.py` only add lines.
'''


def oracle_module(root: Path, name: str) -> str:
    """A generated task's module for `name`, rendered from oracle/program.json."""
    f = _program(root)[name]
    return render_module(f)


def oracle_bug(root: Path, name: str) -> tuple[str, str]:
    return bug(_program(root)[name])


_PROGRAMS: dict[Path, dict[str, Feat]] = {}


def _program(root: Path) -> dict[str, Feat]:
    root = Path(root)
    if root not in _PROGRAMS:
        rows = json.loads((root / "oracle" / "program.json").read_text(encoding="utf-8"))
        _PROGRAMS[root] = {r["name"]: Feat(r["name"], i, 0, "", len(r["steps"]) + 1, r["dep"], r["extra"], r["helpers"],
                                           r["steps"], r["key"]) for i, r in enumerate(rows)}
    return _PROGRAMS[root]
