"""The grep walk over the store's search blocks, newest first, one step per block.

A plain (ASCII) pattern is a single C-speed `rfind` over the folded block; a regex contributes its
longest required ASCII literal (see `agensh_ray.board.query`) as a prefilter and only the entries
containing that literal are checked with the real, case-insensitive regex. Patterns without a usable
literal fall back to scanning the blocks with the regex (compiled without IGNORECASE when the pattern
has no cased character, which Python's `re` runs about ten times faster).

It yields after each block so the board service can interleave writes with a long search and stop
it at its budget (`agensh_ray.board.service`).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Generator

from agensh_ray.board.columns import Columns
from agensh_ray.board.query import Query
from agensh_ray.models import BoardEntry


def search_steps(cols: Columns, q: Query, limit: int, code: int | None) -> Generator[int, None, list[BoardEntry]]:
    """Entries matching `q` (of type `code`, if given), newest first, at most `limit` (> 0); yields
    the number of entries searched so far after each block. Searches the blocks that existed when it
    started, so writes between steps do not disturb it."""
    hits: list[int] = []
    start, types = cols.start, cols.type
    lits, pat = q.literals, q.verify
    searched = 0
    for S, F, lo, hi in list(cols.search_blocks()):
        L = len(S)
        if lits:
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
            for j in sorted(cands, reverse=True):
                if code is not None and types[j] != code:
                    continue
                if pat is not None:
                    s = start[j]
                    e = start[j + 1] - 1 if j + 1 < hi else L - 1
                    if pat.search(S, s, e) is None:
                        continue
                hits.append(j)
                if len(hits) >= limit:
                    return [cols.entry(x) for x in hits]
        else:
            assert pat is not None
            found: list[int] = []
            pos = 0
            while pos < L:
                m = pat.search(S, pos)
                if m is None:
                    break
                o = m.start()
                if o >= L:
                    break
                j = bisect_right(start, o, lo, hi) - 1
                s = start[j]
                e = start[j + 1] - 1 if j + 1 < hi else L - 1
                if (code is None or types[j] == code) and (m.end() <= e or pat.search(S, s, e) is not None):
                    found.append(j)
                pos = e + 1
            for j in reversed(found):
                hits.append(j)
                if len(hits) >= limit:
                    return [cols.entry(x) for x in hits]
        searched += hi - lo
        yield searched
    return [cols.entry(x) for x in hits]
