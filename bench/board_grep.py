"""Grep over 1,000,000 board entries, and what a hostile pattern does to the writes around it.

No Ray: the board actor's own logic (`BoardService`: group commit with fsync to a log in a temporary
folder, the grep as the actor runs it) on this process's event loop, so the figures are the search's
and not Ray's calls. bench/board_router.py measures the same greps through the actor, at the end of a
much longer run.

Phases:
1. fill: --entries entries in batches of 2,000, with the texts bench/board_router.py fills its board
   with (16 hosts' `fill_text`): fill_entries_per_s.
2. grep: bench/board_router.py's phase-3 patterns, each --runs times; grep_1m_ms is the slowest of
   their medians (as there), grep_1m_no_literal_ms the slowest median of the regexes without a word to
   index on (a scan of the whole history).
3. hostile: a second board of --hostile-entries crafted entries (--hostile-a times "a", then "!",
   padded with "b" to 100 characters), so a backtracking engine explodes on `(a|a)+$` and
   `(.*a){12}$`. The latency of --writes sequential writes alone, then of the same writes while
   ordinary greps run back to back (the baseline), then while greps with those patterns do; every
   hostile grep's answer and answer time.
4. budget: a third board of --budget-entries entries whose details are 8,000 random a's and b's, on
   which RE2's DFA gives up for the patterns of BUDGET_PATTERNS (the second one an RE2 program near
   the board's limit: the slowest per character): each grep runs into --budget-s and is answered
   then; when it answered, what it said, how long after its answer its thread stopped, and the
   latency of the writes made meanwhile (the newest entries the grep searched include them).

    python bench/board_grep.py                                 # 1,000,000 entries
    python bench/board_grep.py --entries 200000 --hostile-a 20 --hostile-entries 8
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agensh_ray.board import BoardLimits, BoardService  # noqa: E402
from agensh_ray.board.query import compile_query  # noqa: E402
from bench.board_router import GREP_NO_LITERAL, GREP_PATTERNS  # noqa: E402
from bench.board_router_host import TYPES, fill_text  # noqa: E402
from bench.common import machine_facts, pct, print_result, say  # noqa: E402

HOSTILE_PATTERNS = (r"(a|a)+$", r"(.*a){12}$")
ORDINARY_PATTERNS = (r"[0-9]{3}x", "aaaa!")
"""The baseline: a regex scan and a word search over the same board."""
BUDGET_PATTERNS = (r"[ab]*a[ab]{20}c", r"[ab]*a[ab]{600}c|[ab]*b[ab]{600}d|[ab]*a[ab]{600}d|[ab]*b[ab]{550}c")
"""Regex scans that outrun any budget on a board of a/b details."""


def entry(t: str, text: str, worker: str) -> tuple:
    """A write request in the board's wire form (type, text, detail, worker, request id)."""
    return (t, text, None, worker, None)


async def fill(svc: BoardService, total: int, hosts: int = 16, batch: int = 2000) -> float:
    """Write `total` entries like bench/board_router.py's hosts do; returns entries per second."""
    t = time.perf_counter()
    done = k = 0
    while done < total:
        for h in range(hosts):
            n = min(batch, total - done)
            if n <= 0:
                break
            host = f"h{h:02d}"
            await svc.write_acks([entry(TYPES[j % len(TYPES)], fill_text(host, k, j), f"w{h:02d}{j % 64:02d}")
                                  for j in range(n)])
            done += n
        k += 1
    return total / (time.perf_counter() - t)


async def timed_grep(svc: BoardService, pattern: str, regex: bool) -> tuple[float, object]:
    t = time.perf_counter()
    res = await svc.grep(pattern, regex, 50)
    return (time.perf_counter() - t) * 1000, res


def answer(res: object) -> str:
    return f"{len(res)} hits" if isinstance(res, list) else f"refused: {res}"


async def writes(svc: BoardService, n: int, tag: str) -> list[float]:
    lat = []
    for i in range(n):
        t = time.perf_counter()
        await svc.write_acks([entry("FACT", f"{tag} write {i}", "w0001")])
        lat.append((time.perf_counter() - t) * 1000)
    return lat


async def writes_during_greps(svc: BoardService, patterns: tuple[str, ...], n: int,
                              tag: str) -> tuple[list[float], list[tuple[str, float, str]]]:
    """The latencies of `n` writes while greps of `patterns` run back to back, and the greps'."""
    greps: list[tuple[str, float, str]] = []
    stop = False

    async def grep_loop() -> None:
        while not stop:
            for pat in patterns:
                ms, res = await timed_grep(svc, pat, True)
                greps.append((pat, ms, answer(res)))

    loop_task = asyncio.create_task(grep_loop())
    await asyncio.sleep(0)  # the first grep starts before the first write
    lat = await writes(svc, n, tag)
    stop = True
    await loop_task
    return lat, greps


async def hostile(a, tmp: Path, t0: float, out: dict) -> None:
    svc = BoardService(str(tmp / "hostile.jsonl"), BoardLimits(grep_budget_s=a.budget_s))
    try:
        text = ("a" * a.hostile_a + "!").ljust(100, "b")
        await svc.write_acks([entry("OBSERVED", text, "w0666") for _ in range(a.hostile_entries)])
        base = await writes(svc, a.writes, "baseline")
        say(t0, f"phase 3: {a.hostile_entries} entries {text[:40]!r}...; {a.writes} writes alone: "
                f"p50 {pct(base, 0.5):.2f} ms, p99 {pct(base, 0.99):.2f} ms, max {max(base):.2f} ms")
        ordinary, _ = await writes_during_greps(svc, ORDINARY_PATTERNS, a.writes, "ordinary")
        say(t0, f"  the same writes during ordinary greps {ORDINARY_PATTERNS}: p50 {pct(ordinary, 0.5):.2f} ms, "
                f"p99 {pct(ordinary, 0.99):.2f} ms, max {max(ordinary):.2f} ms")
        during, greps = await writes_during_greps(svc, HOSTILE_PATTERNS, a.writes, "during")
        say(t0, f"  the same writes during hostile greps: p50 {pct(during, 0.5):.2f} ms, "
                f"p99 {pct(during, 0.99):.2f} ms, max {max(during):.2f} ms")
        for pat in HOSTILE_PATTERNS:
            mine = [(ms, ans) for p, ms, ans in greps if p == pat]
            say(t0, f"  grep {pat!r}: {len(mine)} runs, median {statistics.median(m for m, _ in mine):.1f} ms, "
                    f"max {max(m for m, _ in mine):.1f} ms; answered {mine[-1][1]}")
            out[f"hostile_grep_ms_max {pat}"] = round(max(m for m, _ in mine), 1)
        out.update(hostile_write_ms_p50_alone=round(pct(base, 0.5), 2), hostile_write_ms_max_alone=round(max(base), 2),
                   hostile_write_ms_p50_ordinary=round(pct(ordinary, 0.5), 2),
                   hostile_write_ms_p99_ordinary=round(pct(ordinary, 0.99), 2),
                   hostile_write_ms_p50_during=round(pct(during, 0.5), 2),
                   hostile_write_ms_p99_during=round(pct(during, 0.99), 2),
                   hostile_write_ms_max_during=round(max(during), 2))
    finally:
        svc.close()


async def budget(a, tmp: Path, t0: float, out: dict) -> None:
    svc = BoardService(str(tmp / "budget.jsonl"), BoardLimits(grep_budget_s=a.budget_s))
    try:
        rnd = random.Random(1)
        ab = ["".join(rnd.choice("ab") for _ in range(8000)) for _ in range(16)]
        await svc.write_acks([("OBSERVED", f"ab {i}", ab[i % 16], "w0666", None) for i in range(a.budget_entries)])
        say(t0, f"phase 4: {a.budget_entries} entries with 8,000 a's and b's of detail; budget {a.budget_s} s")
        for k, pat in enumerate(BUDGET_PATTERNS):
            grep = asyncio.create_task(timed_grep(svc, pat, True))
            await asyncio.sleep(0)
            lat = []
            while not grep.done():
                lat += await writes(svc, 1, f"budget {k}")
            ms, res = grep.result()
            t_answer = time.perf_counter()
            while (await svc.info())["greps_running"]:
                await asyncio.sleep(0.001)
            tail_ms = (time.perf_counter() - t_answer) * 1000
            said = re.search(r"stopped after (\S+) s having searched the newest ([\d,]+)", str(res))
            told = (f"said: stopped after {said.group(1)} s, newest {said.group(2)} entries searched" if said
                    else answer(res))
            say(t0, f"  grep {pat[:40]!r} (RE2 program {compile_query(pat, True).cost:,}): answered after {ms:.0f} ms "
                    f"({told}); its thread stopped {tail_ms:.0f} ms later; {len(lat)} writes meanwhile: "
                    f"p50 {pct(lat, 0.5):.2f} ms, max {max(lat):.2f} ms")
            out[f"budget_grep_answer_ms {k}"] = round(ms, 1)
            out[f"budget_grep_said_s {k}"] = float(said.group(1)) if said else None
            out[f"budget_grep_thread_after_ms {k}"] = round(tail_ms, 1)
            out[f"budget_write_ms_p50 {k}"] = round(pct(lat, 0.5), 2)
            out[f"budget_write_ms_max {k}"] = round(max(lat), 2)
    finally:
        svc.close()


async def run(a, tmp: Path, t0: float) -> dict:
    out: dict = {}
    svc = BoardService(str(tmp / "board.jsonl"))
    try:
        rate = await fill(svc, a.entries)
        out["fill_entries_per_s"] = round(rate)
        say(t0, f"phase 1: filled {len(svc.board):,} entries ({rate:,.0f} entries/s)")
        medians = []
        for pat, rx in GREP_PATTERNS:
            runs = [await timed_grep(svc, pat, rx) for _ in range(a.runs)]
            medians.append(statistics.median(ms for ms, _ in runs))
            say(t0, f"phase 2: grep {pat!r:28} {answer(runs[-1][1]):10} median {medians[-1]:8.1f} ms "
                    f"(runs: {', '.join(f'{ms:.1f}' for ms, _ in runs)})")
        slow = []
        for pat in GREP_NO_LITERAL:
            runs = [await timed_grep(svc, pat, True) for _ in range(a.runs)]
            slow.append(statistics.median(ms for ms, _ in runs))
            say(t0, f"  grep {pat!r:28} (no literal) {answer(runs[-1][1])[:60]} median {slow[-1]:8.1f} ms")
        out["grep_1m_ms"] = round(max(medians), 1)
        out["grep_1m_no_literal_ms"] = round(max(slow), 1)
        out["grep_entries"] = len(svc.board)
    finally:
        svc.close()
    await hostile(a, tmp, t0, out)
    await budget(a, tmp, t0, out)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries", type=int, default=1_000_000, help="entries of the grep board")
    ap.add_argument("--runs", type=int, default=5, help="times each grep is timed (the median is kept)")
    ap.add_argument("--hostile-entries", type=int, default=10_000, help="crafted entries of the hostile board")
    ap.add_argument("--hostile-a", type=int, default=99, help="a's at the start of each crafted entry (then '!')")
    ap.add_argument("--writes", type=int, default=200, help="writes timed alone, then during the hostile greps")
    ap.add_argument("--budget-s", type=float, default=BoardLimits().grep_budget_s,
                    help="the hostile and budget boards' grep budget (seconds)")
    ap.add_argument("--budget-entries", type=int, default=600, help="entries of the budget board")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    a = ap.parse_args()
    t0 = time.time()
    facts = machine_facts()
    print("machine:", json.dumps(facts), flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="bench-board-grep-"))
    try:
        out = asyncio.run(run(a, tmp, t0))
    finally:
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    print_result({**out, "entries_arg": a.entries, "hostile_a": a.hostile_a, "hostile_entries": a.hostile_entries,
                  "budget_s": a.budget_s, "budget_entries": a.budget_entries})


if __name__ == "__main__":
    main()
