"""The grep walk over the store's search blocks, newest first, in steps of bounded work.

A plain (ASCII) pattern is a single C-speed `rfind` over the folded block; a regex contributes its
longest required ASCII literal (see `agensh_ray.board.query`) as a prefilter: a block with none is
skipped, a block with a few candidate entries has each of them checked with the real, case-insensitive
RE2 regex on its own UTF-8 text, and a block with more (or a pattern without a usable literal) is
scanned with RE2, a window of whole entries per call, newest window first.

Work is counted as characters handed to RE2 times the size of its program (`Query.cost`). A step ends
after about `step_work` of it (`BoardLimits.grep_step_work`), or at the end of a block, so whoever runs
the steps can stop a search at its budget after at most one bounded step. The board service runs them in a thread
(`agensh_ray.board.service`); RE2 releases the GIL while it matches, so the board's event loop serves
writes meanwhile.

The walk reads only what existed when its caller listed the blocks (immutable strings, and the
`start`/`type` columns below that point), so writes may go on meanwhile in another thread; it returns
entry indexes, and the caller makes the entries.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Generator, Sequence

from agensh_ray.board.columns import Columns
from agensh_ray.board.query import Query

WINDOW_MAX = 1 << 18
"""Most characters one RE2 call of a scan searches."""
BULK = 8
"""A block with more entries holding a regex's literal than this is scanned whole by RE2 (one call per
window and per hit) instead of checking each candidate entry with its own call (measured: one call with
its slice costs about a twelfth of a scan of a 30,000-character block)."""

Block = tuple[str, str, int, int]
"""(original text, folded text, first entry index, end entry index): `Columns.search_blocks()`."""


def _utf8(s: str) -> bytes:
    return s.encode("utf-8", "surrogatepass")


def _candidates(F: str, start: Sequence[int], lo: int, hi: int, lits: tuple[str, ...]) -> list[int]:
    """Indexes of the entries of a block whose folded text contains one of `lits`, newest first."""
    L = len(F)
    cands: set[int] = set()
    for lit in lits:
        # newest first within the block: rfind, then restart before the candidate's entry
        ln = len(lit)
        end = L
        while True:
            o = F.rfind(lit, 0, end)
            if o < 0:
                break
            j = bisect_right(start, o, lo, hi) - 1
            s = start[j]
            e = start[j + 1] - 1 if j + 1 < hi else L - 1
            if j not in cands and (o + ln <= e or F.find(lit, s, e) >= 0):
                cands.add(j)
            end = s
    return sorted(cands, reverse=True)


def _scan_window(S: str, ws: int, we: int, j0: int, j1: int, start: Sequence[int], q: Query,
                 types: bytearray, code: int | None) -> list[int]:
    """Entries j0..j1-1 (text S[ws:we]) that match, oldest first: one RE2 search per hit over the window's
    UTF-8, then on to the next entry; a match that runs past its entry's end is checked on that entry
    alone."""
    pat = q.verify
    B = _utf8(S[ws:we])
    nB = len(B)
    bst: list[int] | None = None  # byte starts of the entries, when characters and bytes differ
    if nB != we - ws:
        bst = [0]
        for j in range(j0, j1 - 1):
            bst.append(bst[-1] + len(_utf8(S[start[j]:start[j + 1]])))
    found: list[int] = []
    pos = 0
    while pos < nB:
        m = pat.search(B, pos)
        if m is None:
            break
        o = m.start()
        if o >= nB:
            break
        if bst is None:
            j = bisect_right(start, ws + o, j0, j1) - 1
            bs = start[j] - ws
            e = start[j + 1] - ws - 1 if j + 1 < j1 else nB - 1
        else:
            k = bisect_right(bst, o) - 1
            j = j0 + k
            bs = bst[k]
            e = bst[k + 1] - 1 if k + 1 < len(bst) else nB - 1
        if (code is None or types[j] == code) and (m.end() <= e or pat.search(B[bs:e]) is not None):
            found.append(j)
        pos = e + 1
    return found


def search_steps(blocks: list[Block], cols: Columns, q: Query, limit: int, code: int | None,
                 step_work: int) -> Generator[int, None, list[int]]:
    """Indexes of the entries matching `q` (of type `code`, if given), newest first, at most `limit`
    (> 0), over `blocks` (listed by the caller, newest first); yields how many of the newest entries
    it has searched after each step of about `step_work` (characters x RE2 instructions)."""
    hits: list[int] = []
    start, types = cols.start, cols.type
    lits, pat, cost = q.literals, q.verify, q.cost
    searched = 0
    work = 0
    for S, F, lo, hi in blocks:
        L = len(S)
        # One RE2 call per candidate costs more than one scan of the block once there are a few of them.
        bulk = pat is not None and not q.per_entry and (not lits or sum(F.count(x) for x in lits) > BULK)
        if not bulk:
            cands = _candidates(F, start, lo, hi, lits) if lits else range(hi - 1, lo - 1, -1)
            for j in cands:
                if code is not None and types[j] != code:
                    continue
                if pat is not None:
                    s = start[j]
                    e = start[j + 1] - 1 if j + 1 < hi else L - 1
                    work += (e - s) * cost
                    if pat.search(_utf8(S[s:e])) is None:
                        if work >= step_work:
                            yield searched + (hi - j)
                            work = 0
                        continue
                hits.append(j)
                if len(hits) >= limit:
                    return hits
        else:
            window = max(1, min(WINDOW_MAX, step_work // cost))
            j_end, we = hi, L
            while j_end > lo:
                j0 = min(bisect_left(start, we - window, lo, j_end), j_end - 1)
                ws = start[j0]
                for j in reversed(_scan_window(S, ws, we, j0, j_end, start, q, types, code)):
                    hits.append(j)
                    if len(hits) >= limit:
                        return hits
                work += (we - ws) * cost
                j_end, we = j0, ws
                if work >= step_work and j_end > lo:
                    yield searched + (hi - j_end)
                    work = 0
        searched += hi - lo
        work = 0
        yield searched
    return hits
