"""The board's in-memory layout: what makes `grep` over 1,000,000 entries fast and an entry cheap.

* per entry, parallel compact columns: `seq`/`ts` (array 'q'), type code (bytearray), block-local
  start offset and text length (array 'i'), worker id (interned str) and request id (str or None);
* the searchable content of each entry, `text` or `text + "\\n" + detail`, followed by a "\\n"
  separator, joined into blocks of `BLOCK` entries: one original-case string per block (for display
  and exact regex verification) and one *folded* copy (`query.fold`: ASCII lower-cased, length
  preserving) for fast case-insensitive literal search with `str.rfind`;
* an index of request ids, so a retried write finds the entry it already wrote.

`Columns` only stores and locates; numbering, validation and durability are `Board`'s
(`agensh_ray.board.store`), the search is `agensh_ray.board.search`.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable

from agensh_ray.board.limits import CLAIM_BYTE, TYPES
from agensh_ray.board.query import fold
from agensh_ray.models import BoardEntry
from agensh_ray.wire import Row

BLOCK_SHIFT = 10
BLOCK = 1 << BLOCK_SHIFT
"""Entries per search block (1,024)."""


class Columns:
    """The entries in columns and search blocks (plain, single-threaded; see module docstring)."""

    def __init__(self) -> None:
        self.seq = array("q")
        self.ts = array("q")
        self.type = bytearray()
        self.start = array("i")
        """Where entry i's segment starts in its block (or in the tail)."""
        self.tlen = array("i")
        self.worker: list[str] = []
        self.rid: list[str | None] = []
        self._interned: dict[str, str] = {}
        # idempotency index: request_id -> index (first writer); other writers of the same id in _rid2
        self._rid_index: dict[str, int] = {}
        self._rid2: dict[tuple[str, str], int] = {}
        # search blocks: full ones joined, the newest (partial) one as a list of segments
        self.blocks: list[str] = []
        self.fblocks: list[str] = []
        self._tail: list[str] = []
        self._ftail: list[str] = []
        self._tail_len = 0
        self._tail_cache: tuple[str, str] | None = None

    def __len__(self) -> int:
        return len(self.seq)

    @property
    def last_seq(self) -> int:
        return self.seq[-1] if self.seq else 0

    @property
    def last_ts(self) -> int:
        return self.ts[-1] if self.ts else 0

    def append(
        self, seq: int, ts: int, code: int, text: str, detail: str | None, worker: str, rid: str | None
    ) -> None:
        i = len(self.seq)
        seg = text if not detail else text + "\n" + detail
        self.seq.append(seq)
        self.ts.append(ts)
        self.type.append(code)
        self.start.append(self._tail_len)
        self.tlen.append(len(text))
        worker = self._interned.setdefault(worker, worker)
        self.worker.append(worker)
        self.rid.append(rid)
        if rid is not None:
            j = self._rid_index.setdefault(rid, i)
            if j != i and self.worker[j] != worker:
                self._rid2.setdefault((worker, rid), i)
        self._tail.append(seg)
        self._ftail.append(fold(seg))
        self._tail_len += len(seg) + 1
        self._tail_cache = None
        if len(self._tail) == BLOCK:
            self.blocks.append("\n".join(self._tail) + "\n")
            self.fblocks.append("\n".join(self._ftail) + "\n")
            self._tail = []
            self._ftail = []
            self._tail_len = 0

    def find_request(self, worker: str, rid: str) -> int | None:
        """The index of the entry `worker` wrote with request id `rid`, if any."""
        i = self._rid_index.get(rid)
        if i is None:
            return None
        if self.worker[i] == worker:
            return i
        return self._rid2.get((worker, rid))

    def locate(self, i: int) -> tuple[str, int, int]:
        """(string, start, end) of entry i's segment (text[+"\\n"+detail])."""
        b = i >> BLOCK_SHIFT
        if b < len(self.blocks):
            s = self.start[i]
            blk = self.blocks[b]
            e = self.start[i + 1] - 1 if (i + 1) & (BLOCK - 1) else len(blk) - 1
            return blk, s, e
        seg = self._tail[i - (b << BLOCK_SHIFT)]
        return seg, 0, len(seg)

    def entry(self, i: int, detail: bool = False) -> BoardEntry:
        s, a, e = self.locate(i)
        tl = self.tlen[i]
        has_detail = e - a > tl
        return BoardEntry(
            seq=self.seq[i],
            ts=self.ts[i],
            type=TYPES[self.type[i]],
            text=s[a : a + tl],
            worker_id=self.worker[i],
            has_detail=has_detail,
            detail=s[a + tl + 1 : e] if (detail and has_detail) else None,
            request_id=self.rid[i],
        )

    def row(self, i: int, detail: bool = False) -> Row:
        s, a, e = self.locate(i)
        tl = self.tlen[i]
        has = e - a > tl
        return Row(self.seq[i], self.ts[i], TYPES[self.type[i]].value, s[a : a + tl], self.worker[i], has,
                   s[a + tl + 1 : e] if (detail and has) else None, self.rid[i])

    def view_start(self, cap: int, cutoff: int) -> int:
        """Index of the oldest entry of the recent view: the newest `cap` entries that are not CLAIMs
        stamped before `cutoff`. Counts expired CLAIMs with C-speed `find`s instead of a Python loop."""
        ts, types = self.ts, self.type
        i, got = len(self.seq), 0
        while i > 0 and got < cap:
            lo = max(0, i - (cap - got))
            expired = 0
            j = types.find(CLAIM_BYTE, lo, i)
            while j >= 0:
                expired += ts[j] < cutoff
                j = types.find(CLAIM_BYTE, j + 1, i)
            got += (i - lo) - expired
            i = lo
        return i

    def search_blocks(self) -> Iterable[tuple[str, str, int, int]]:
        """(original, folded, first index, end index) per block, newest first."""
        n = len(self.seq)
        nb = len(self.blocks)
        if self._tail:
            if self._tail_cache is None:
                self._tail_cache = ("\n".join(self._tail) + "\n", "\n".join(self._ftail) + "\n")
            yield self._tail_cache[0], self._tail_cache[1], nb << BLOCK_SHIFT, n
        for b in range(nb - 1, -1, -1):
            yield self.blocks[b], self.fblocks[b], b << BLOCK_SHIFT, (b + 1) << BLOCK_SHIFT
