"""The board: a typed, append-only, durable log that every worker reads and writes.

`Board` is a plain single-threaded class (the `BoardActor` serializes calls). It
keeps the full history in memory in a compact columnar layout and appends every
acknowledged entry to a JSON-lines log, one write + fsync per batch.

In-memory layout (what makes `grep` fast over 1,000,000 entries):

* per entry, parallel compact columns: `seq`/`ts` (array 'q'), type code
  (bytearray), block-local start offset and text length (array 'i'), worker id
  (interned str) and request id (str or None);
* the searchable content of each entry, `text` or `text + "\\n" + detail`,
  followed by a "\\n" separator, joined into blocks of `BLOCK` entries: one
  original-case string per block (for display and exact regex verification)
  and one *folded* copy (ASCII lower-cased, length preserving) for fast
  case-insensitive literal search with `str.rfind`.

`grep` walks the blocks newest first. A plain (ASCII) pattern is a single
C-speed `rfind` over the folded block; a regex contributes its longest required
ASCII literal (read from the parsed pattern) as a prefilter and only the
entries containing that literal are checked with the real, case-insensitive
regex. Patterns without a usable literal fall back to scanning the blocks with
the regex (compiled without IGNORECASE when the pattern has no cased
character, which Python's `re` runs about ten times faster).
"""

from __future__ import annotations

import gc
import json
import logging
import re
import time
from array import array
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Generator, Iterable, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agensh_ray.applog import AppendLog
from agensh_ray.errors import BoardError
from agensh_ray.models import BoardEntry, BoardEntryIn, EntryType

try:  # Python >= 3.11
    import re._constants as _sre_c  # type: ignore[import-not-found]
    import re._parser as _sre_parse  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - older Pythons
    import sre_constants as _sre_c  # type: ignore[no-redef]
    import sre_parse as _sre_parse  # type: ignore[no-redef]

log = logging.getLogger(__name__)

BLOCK_SHIFT = 10
BLOCK = 1 << BLOCK_SHIFT
"""Entries per search block (1,024)."""

_TYPES: tuple[EntryType, ...] = tuple(EntryType)
_TYPE_CODE: dict[str, int] = {t.value: i for i, t in enumerate(_TYPES)}
_VALID_TYPES = ", ".join(t.value for t in _TYPES)
_CLAIM_CODE = _TYPE_CODE[EntryType.CLAIM.value]
_CLAIM_BYTE = bytes([_CLAIM_CODE])
_MIN_PREFILTER_LITERAL = 2


def _default_text_max() -> dict[str, int]:
    return {"OBSERVED": 100, "FACT": 100, "FAIL": 100, "CLAIM": 100, "PATCH_SUMMARY": 300}


class BoardLimits(BaseModel):
    """Size and visibility limits of the board."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid")

    text_max: dict[str, int] = Field(default_factory=_default_text_max)
    """Maximum length of `text`, in characters, per entry type."""
    detail_max: int = 8000
    """Maximum length of `detail`, in characters (any type)."""
    recent_limit: int = 2000
    """Most entries `recent()` returns (the newest ones)."""
    claim_ttl_s: float = 3600
    """CLAIMs older than this (board clock seconds) are hidden from `recent()`; grep still finds them."""
    grep_limit_max: int = 500
    """Upper bound for `grep(limit=...)`."""
    grep_budget_s: float = 3.0
    """Wall seconds one grep may take in the BoardActor before it is stopped with an error that says
    how far it got (a pattern without a literal word scans the whole history with the regex)."""


# ---------------------------------------------------------------- folding / regex analysis


def _fold(s: str) -> str:
    """Length-preserving case fold for literal search.

    ASCII letters are lower-cased; the four non-ASCII characters that Python's
    `re.IGNORECASE` treats as equal to an ASCII letter map to that letter.
    (U+0130 is the only character whose `lower()` is longer, so it is replaced
    first.) Other characters may be lower-cased too, which never maps them to
    ASCII, so an ASCII literal's matches are exactly preserved.
    """
    if s.isascii():
        return s.lower()
    return s.replace("\u0130", "i").replace("\u0131", "i").replace("\u017f", "s").lower()


_REPEATS = tuple(
    getattr(_sre_c, n) for n in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT") if hasattr(_sre_c, n)
)
_ATOMIC = getattr(_sre_c, "ATOMIC_GROUP", None)


def _required_literals(p: Iterable[tuple[Any, Any]]) -> tuple[list[str], str | None]:
    """Folded ASCII substrings every match of parsed pattern `p` contains.

    Returns (runs, whole): `whole` is the literal when all of `p` is one.
    """
    runs: list[str] = []
    cur: list[str] = []
    whole = True

    def flush() -> None:
        if cur:
            runs.append("".join(cur))
            cur.clear()

    for op, av in p:
        if op is _sre_c.LITERAL:
            ch = chr(av)
            if ch.isascii():
                cur.append(ch.lower())
                continue
        elif op is _sre_c.AT:
            continue
        elif op is _sre_c.SUBPATTERN or (_ATOMIC is not None and op is _ATOMIC):
            sub = av[-1] if op is _sre_c.SUBPATTERN else av
            r, w = _required_literals(sub)
            if w is not None:
                cur.append(w)
                continue
            flush()
            runs.extend(r)
            whole = False
            continue
        elif op in _REPEATS:
            lo, hi, sub = av
            if lo >= 1:
                r, w = _required_literals(sub)
                if w is not None and lo == hi and len(w) * lo <= 256:
                    cur.append(w * lo)
                    continue
                if w is not None:
                    cur.append(w)  # the first copy; more may follow
                    flush()
                else:
                    flush()
                    runs.extend(r)
                whole = False
                continue
        flush()
        whole = False
    flush()
    if whole:
        return runs, (runs[0] if runs else "")
    return runs, None


def _cased(ch: str) -> bool:
    return ch.lower() != ch or ch.upper() != ch or ch.casefold() != ch


def _case_neutral(p: Iterable[tuple[Any, Any]]) -> bool:
    """True if IGNORECASE cannot change what parsed pattern `p` matches."""
    c = _sre_c
    for op, av in p:
        if op is c.LITERAL or op is c.NOT_LITERAL:
            if _cased(chr(av)):
                return False
        elif op is c.IN:
            for op2, av2 in av:
                if op2 is c.LITERAL or op2 is c.NOT_LITERAL:
                    if _cased(chr(av2)):
                        return False
                elif op2 is c.RANGE:
                    lo, hi = av2
                    if hi - lo > 4096 or any(_cased(chr(x)) for x in range(lo, hi + 1)):
                        return False
                elif op2 is c.CATEGORY or op2 is c.NEGATE:
                    continue
                else:
                    return False
        elif op is c.SUBPATTERN:
            if not _case_neutral(av[-1]):
                return False
        elif _ATOMIC is not None and op is _ATOMIC:
            if not _case_neutral(av):
                return False
        elif op in _REPEATS:
            if not _case_neutral(av[2]):
                return False
        elif op is c.BRANCH:
            if not all(_case_neutral(b) for b in av[1]):
                return False
        elif op is c.ASSERT or op is c.ASSERT_NOT:
            if not _case_neutral(av[1]):
                return False
        elif op is c.GROUPREF_EXISTS:
            _, yes, no = av
            if not _case_neutral(yes) or (no is not None and not _case_neutral(no)):
                return False
        elif op is c.ANY or op is c.AT or op is c.CATEGORY:
            continue
        else:  # GROUPREF (compares case-insensitively) and anything unknown
            return False
    return True


@dataclass
class _Query:
    """A compiled grep: folded literals (plain) or a regex with an optional prefilter."""

    literals: tuple[str, ...] = ()
    """Folded literals searched with rfind: an entry is a candidate if it contains any of them (the
    whole query when `verify` is None)."""
    verify: re.Pattern[str] | None = None
    """Regex run on an entry's original text to confirm a candidate (or to scan, without literals)."""


def _nested_repeat(p: Iterable[tuple[Any, Any]], inside: bool = False) -> bool:
    """True if parsed pattern `p` repeats something that itself repeats without bound, like (a+)+ or
    (x*y*)*: Python's `re` can backtrack exponentially on those and cannot be interrupted."""
    c = _sre_c
    for op, av in p:
        if op in _REPEATS:
            lo, hi, sub = av
            unbounded = hi is c.MAXREPEAT or hi > 64
            if unbounded and inside:
                return True
            if _nested_repeat(sub, inside or unbounded):
                return True
        elif op is c.SUBPATTERN:
            if _nested_repeat(av[-1], inside):
                return True
        elif _ATOMIC is not None and op is _ATOMIC:
            continue  # no backtracking into an atomic group
        elif op is c.BRANCH:
            if any(_nested_repeat(b, inside) for b in av[1]):
                return True
        elif op is c.ASSERT or op is c.ASSERT_NOT:
            if _nested_repeat(av[1], inside):
                return True
    return False


def _any_of_literals(p: Any) -> tuple[str, ...]:
    """For a pattern that is an alternation (a|b|c, maybe in a group), one required literal per branch;
    () if a branch has none: then every match contains at least one of them."""
    items = list(p)
    if len(items) == 1 and items[0][0] is _sre_c.SUBPATTERN:
        return _any_of_literals(items[0][1][-1])
    if len(items) != 1 or items[0][0] is not _sre_c.BRANCH:
        return ()
    out = []
    for branch in items[0][1][1]:
        runs, _ = _required_literals(branch)
        best = max(runs, key=len, default="")
        if len(best) < _MIN_PREFILTER_LITERAL:
            return ()
        out.append(best)
    return tuple(dict.fromkeys(out))


def _compile_query(pattern: str, regex: bool) -> _Query:
    if not isinstance(pattern, str) or pattern == "":
        raise BoardError("grep pattern is empty; give a word or a regular expression")
    if not regex:
        if pattern.isascii():
            return _Query(literals=(pattern.lower(),))
        pattern = re.escape(pattern)
    flags = re.IGNORECASE | re.MULTILINE
    try:
        compiled = re.compile(pattern, flags)
        parsed = _sre_parse.parse(pattern, flags)
    except (re.error, RecursionError, OverflowError) as exc:
        raise BoardError(f"invalid pattern {pattern!r}: {exc}") from None
    if _nested_repeat(parsed):
        raise BoardError(
            f"pattern {pattern!r} repeats a repetition (like (a+)+), which can take exponential time; "
            "drop the outer repeat or use a plain word"
        )
    if len(parsed) and all(op is _sre_c.LITERAL and av < 128 for op, av in parsed):
        # a bare ASCII word: the folded literal search is exact, no regex needed
        return _Query(literals=("".join(chr(av) for _, av in parsed).lower(),))
    runs, _ = _required_literals(parsed)
    best = max(runs, key=len, default="")
    if len(best) >= _MIN_PREFILTER_LITERAL:
        return _Query(literals=(best,), verify=compiled)
    alternatives = _any_of_literals(parsed)
    if alternatives:
        return _Query(literals=alternatives, verify=compiled)
    if _case_neutral(parsed):
        compiled = re.compile(pattern, re.MULTILINE)
    return _Query(verify=compiled)


# ---------------------------------------------------------------- the board


class Row(NamedTuple):
    """An entry as the board hands it across process boundaries: a plain tuple, about ten times
    cheaper to pickle than the `BoardEntry` model (same field names; `entry()` makes the model)."""

    seq: int
    ts: int
    type: str
    text: str
    worker_id: str
    has_detail: bool = False
    detail: str | None = None
    request_id: str | None = None

    def entry(self) -> BoardEntry:
        return BoardEntry(
            seq=self.seq, ts=self.ts, type=self.type, text=self.text, worker_id=self.worker_id,
            has_detail=self.has_detail, detail=self.detail, request_id=self.request_id,
        )


EntryFields = tuple[str, str, "str | None", str, "str | None"]
"""A write request as a plain tuple: (type, text, detail, worker_id, request_id)."""


Ack = tuple[int, int]
"""A new entry's answer to its writer: (seq, ts). The writer has the rest, so the board does not send
it back (a batch's answer is a few ints per entry, the cheapest thing Ray can carry)."""


def entries_from_acks(requests: list[tuple], acks: list[Any]) -> list[BoardEntry | BoardError]:
    """The entries a writer wrote, from its requests (`EntryFields` tuples) and the board's answers:
    `(seq, ts)` for a new entry, the stored `Row` for a request id written before, a `BoardError` for a
    refusal."""
    out: list[BoardEntry | BoardError] = []
    for req, ack in zip(requests, acks):
        if isinstance(ack, tuple) and not isinstance(ack, Row):
            if isinstance(req, dict):
                req = tuple(req.get(k) for k in ("type", "text", "detail", "worker_id", "request_id"))
            t, text, detail, worker, rid = req
            # The board accepted these fields (its answer says so): no second validation.
            out.append(BoardEntry.model_construct(
                seq=ack[0], ts=ack[1], type=EntryType(str(getattr(t, "value", t)).strip().upper()), text=text,
                worker_id=worker, has_detail=bool(detail), detail=detail or None, request_id=rid))
        else:
            out.append(ack.entry() if isinstance(ack, Row) else ack)
    return out


@dataclass(slots=True)
class _Pending:
    """One validated entry awaiting durability (seq reserved, not yet visible)."""

    row: Row
    code: int


@dataclass
class PreparedBatch:
    """The result of `Board.prepare_batch`: what to write, and what to answer."""

    results: list[Row | BoardError]
    acks: list[Ack | Row | BoardError] = field(default_factory=list)
    """The same answers in the compact form writers get (see `entries_from_acks`)."""
    new: list[_Pending] = field(default_factory=list)
    data: bytes = b""
    next_seq_before: int = 0


class RecentDelta(NamedTuple):
    """`Board.recent_delta`'s answer (plain tuples: it crosses to every host several times a second)."""

    reset: bool
    first_seq: int
    """The view holds no entry older than this."""
    claim_cutoff: int
    """CLAIMs stamped before this (board clock, us) are not in the view."""
    rows: list[Row]
    """The entries the reader lacks, oldest first, without details."""
    last_seq: int = 0
    """The board's newest seq when it answered: the view is complete up to here."""
    limit: int = 0
    """The view's size (`BoardLimits.recent_limit`)."""
    claim_ttl_us: int = 0
    """How long a CLAIM stays in the view (board clock, us)."""


def apply_recent_delta(held: list[BoardEntry], delta: RecentDelta) -> list[BoardEntry]:
    """The new recent view from the view a reader held (oldest first) and the board's delta."""
    rows = [r.entry() for r in delta.rows]
    if delta.reset or not held:
        return rows
    lo, hi = held[0].seq, held[-1].seq
    k = bisect_left(held, delta.first_seq, key=_seq_of)
    claim, cutoff = EntryType.CLAIM, delta.claim_cutoff
    kept = [e for e in held[k:] if e.type is not claim or e.ts >= cutoff]
    return [e for e in rows if e.seq < lo] + kept + [e for e in rows if e.seq > hi]


_json_str = json.encoder.encode_basestring_ascii  # type: ignore[attr-defined]
"""JSON string literal of a str, ASCII only (C speed): lone surrogates become \\u escapes."""


def _seq_of(e: BoardEntry) -> int:
    return e.seq


class Board:
    """The append-only board (plain, single-threaded class; see module docstring)."""

    def __init__(
        self,
        log_path: Path | str,
        limits: BoardLimits | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.log_path = Path(log_path)
        self.limits = limits if limits is not None else BoardLimits()
        self.clock = clock
        # columns
        self._seq = array("q")
        self._ts = array("q")
        self._type = bytearray()
        self._start = array("i")
        self._tlen = array("i")
        self._worker: list[str] = []
        self._rid: list[str | None] = []
        self._interned: dict[str, str] = {}
        # idempotency index: request_id -> index (first writer); other writers of the same id in _rid2
        self._rid_index: dict[str, int] = {}
        self._rid2: dict[tuple[str, str], int] = {}
        # search blocks
        self._blocks: list[str] = []
        self._fblocks: list[str] = []
        self._tail: list[str] = []
        self._ftail: list[str] = []
        self._tail_len = 0
        self._tail_cache: tuple[str, str] | None = None
        self._next_seq = 1
        self._open_and_reload()

    # ------------------------------------------------------------ persistence

    def _open_and_reload(self) -> None:
        self._log = AppendLog(self.log_path)
        gc_was_enabled = gc.isenabled()
        gc.disable()  # millions of short-lived dicts; nothing cyclic is built here
        try:
            self._reload()
        finally:
            if gc_was_enabled:
                gc.enable()
        if len(self):
            log.info("board log %s: reloaded %d entries, last seq %d", self.log_path, len(self), self.last_seq)

    def _reload(self) -> None:
        line_no = 0
        for chunk in self._log.chunks():
            try:  # fast path: the whole chunk as one JSON array (each line ends with whitespace)
                recs: list[Any] = json.loads(b"[" + b",".join(chunk) + b"]")
                numbered = list(enumerate(recs, line_no + 1))
            except ValueError:
                numbered = []
                for k, line in enumerate(chunk, line_no + 1):
                    if not line.strip():
                        continue
                    try:
                        numbered.append((k, json.loads(line)))
                    except ValueError as exc:
                        self._log.skipped(k, exc)
            line_no += len(chunk)
            for k, d in numbered:
                try:
                    seq = int(d["seq"])
                    if seq < self._next_seq:
                        raise ValueError(f"seq {seq} is not above {self._next_seq - 1}")
                    self._append(
                        seq, int(d["ts"]), _TYPE_CODE[d["type"]], d["text"], d.get("detail"), d["worker_id"],
                        d.get("request_id"),
                    )
                except (ValueError, KeyError, TypeError) as exc:
                    self._log.skipped(k, repr(exc))

    def close(self) -> None:
        self._log.close()

    def __enter__(self) -> Board:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:
            pass

    # ------------------------------------------------------------ in-memory append

    def _append(
        self, seq: int, ts: int, code: int, text: str, detail: str | None, worker: str, rid: str | None
    ) -> None:
        i = len(self._seq)
        seg = text if not detail else text + "\n" + detail
        self._seq.append(seq)
        self._ts.append(ts)
        self._type.append(code)
        self._start.append(self._tail_len)
        self._tlen.append(len(text))
        worker = self._interned.setdefault(worker, worker)
        self._worker.append(worker)
        self._rid.append(rid)
        if rid is not None:
            j = self._rid_index.setdefault(rid, i)
            if j != i and self._worker[j] != worker:
                self._rid2.setdefault((worker, rid), i)
        self._tail.append(seg)
        self._ftail.append(_fold(seg))
        self._tail_len += len(seg) + 1
        self._tail_cache = None
        if len(self._tail) == BLOCK:
            self._blocks.append("\n".join(self._tail) + "\n")
            self._fblocks.append("\n".join(self._ftail) + "\n")
            self._tail = []
            self._ftail = []
            self._tail_len = 0
        self._next_seq = seq + 1

    def _find_request(self, worker: str, rid: str) -> int | None:
        i = self._rid_index.get(rid)
        if i is None:
            return None
        if self._worker[i] == worker:
            return i
        return self._rid2.get((worker, rid))

    # ------------------------------------------------------------ writes

    def validate(self, e: BoardEntryIn | dict[str, Any] | tuple) -> EntryFields:
        """Check one request against the limits; returns its fields with the type normalized."""
        if isinstance(e, tuple):
            if len(e) != 5:
                raise BoardError("a board entry tuple is (type, text, detail, worker_id, request_id)")
            t, text, detail, worker, rid = e
        else:
            if isinstance(e, dict):
                try:
                    e = BoardEntryIn.model_validate(e)
                except ValidationError as exc:
                    msgs = "; ".join(f"{'.'.join(map(str, er['loc'])) or 'entry'}: {er['msg']}" for er in exc.errors())
                    raise BoardError(f"invalid board entry: {msgs}") from None
            elif not isinstance(e, BoardEntryIn):
                raise BoardError(f"a board entry must be a BoardEntryIn or a dict, not {type(e).__name__}")
            t, text, detail, worker, rid = e.type, e.text, e.detail, e.worker_id, e.request_id
        code = _TYPE_CODE.get(t) if t.__class__ is str else None
        if code is None:
            t = t.strip().upper() if isinstance(t, str) else t
            if t not in _TYPE_CODE:
                raise BoardError(f"unknown entry type {e[0] if isinstance(e, tuple) else e.type!r}; valid types: {_VALID_TYPES}")
        if not isinstance(worker, str) or not worker.strip():
            raise BoardError("worker_id is empty")
        tmax = self.limits.text_max.get(t, 100)
        if not isinstance(text, str) or not text.strip():
            raise BoardError(f"{t} text is empty; write one line of at most {tmax} characters (details go in detail)")
        if len(text) > tmax:
            raise BoardError(f"{t} text is {len(text)} characters; the limit is {tmax} (put the rest in detail)")
        if detail is not None and (not isinstance(detail, str) or len(detail) > self.limits.detail_max):
            raise BoardError(f"detail is {len(detail)} characters; the limit is {self.limits.detail_max}")
        for name, value in (("text", text), ("detail", detail), ("worker_id", worker), ("request_id", rid)):
            if value is None or value.isascii():
                continue
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise BoardError(f"{name} contains an invalid character at position {exc.start} (lone surrogate)") from None
        return t, text, detail or None, worker, rid

    def prepare_batch(self, entries: list[BoardEntryIn | dict[str, Any] | tuple]) -> PreparedBatch:
        """Validate, deduplicate and number a batch; nothing becomes visible or durable yet.

        Call `commit_io` then `apply` (or `abort` if the IO fails). Only one prepared
        batch may be outstanding at a time.
        """
        pb = PreparedBatch(results=[], next_seq_before=self._next_seq)
        results, acks, new = pb.results, pb.acks, pb.new
        batch_rids: dict[tuple[str, str], Row] = {}
        seq = self._next_seq
        ts = max(int(self.clock() * 1e6), self.last_ts)  # sorted stamps, even if the wall clock steps back
        chunks: list[str] = []
        enc = _json_str
        for raw in entries:
            try:
                t, text, detail, worker, rid = self.validate(raw)
            except BoardError as err:
                results.append(err)
                acks.append(err)
                continue
            if rid is not None:
                key = (worker, rid)
                i = self._find_request(worker, rid)
                if i is not None:
                    results.append(self._row(i, detail=True))
                    acks.append(results[-1])
                    continue
                if key in batch_rids:
                    results.append(batch_rids[key])
                    acks.append(results[-1])
                    continue
            row = Row(seq, ts, t, text, worker, detail is not None, detail, rid)
            line = f'{{"seq":{seq},"ts":{ts},"type":"{t}","text":{enc(text)},"worker_id":{enc(worker)}'
            if detail is not None:
                line += f',"detail":{enc(detail)}'
            if rid is not None:
                line += f',"request_id":{enc(rid)}'
                batch_rids[(worker, rid)] = row
            chunks.append(line + "}\n")
            new.append(_Pending(row, _TYPE_CODE[t]))
            results.append(row)
            acks.append((seq, ts))
            seq += 1
        pb.data = "".join(chunks).encode("ascii")
        self._next_seq = seq  # reserved
        return pb

    def commit_io(self, pb: PreparedBatch) -> None:
        """Make a prepared batch durable: one write + fsync (safe to run in a thread)."""
        self._log.append_bytes(pb.data)

    def apply(self, pb: PreparedBatch) -> list[Row | BoardError]:
        """Publish a durable batch to readers; returns the per-entry results."""
        for p in pb.new:
            r = p.row
            self._append(r.seq, r.ts, p.code, r.text, r.detail, r.worker_id, r.request_id)
        return pb.results

    def abort(self, pb: PreparedBatch) -> None:
        """Forget a prepared batch whose IO failed (its reserved seqs are released)."""
        self._next_seq = pb.next_seq_before

    def write_batch(self, entries: list[BoardEntryIn]) -> list[BoardEntry | BoardError]:
        """Write a batch with one fsync; invalid entries come back as BoardError in place."""
        pb = self.prepare_batch(entries)
        try:
            self.commit_io(pb)
        except BaseException:
            self.abort(pb)
            raise
        return [r if isinstance(r, BoardError) else r.entry() for r in self.apply(pb)]

    def write(self, entry: BoardEntryIn) -> BoardEntry:
        """Write one entry; raises BoardError if it is refused."""
        (res,) = self.write_batch([entry])
        if isinstance(res, BoardError):
            raise res
        return res

    # ------------------------------------------------------------ reads

    @property
    def last_seq(self) -> int:
        return self._seq[-1] if self._seq else 0

    def __len__(self) -> int:
        return len(self._seq)

    def _locate(self, i: int) -> tuple[str, int, int]:
        """(string, start, end) of entry i's segment (text[+"\\n"+detail])."""
        b = i >> BLOCK_SHIFT
        if b < len(self._blocks):
            s = self._start[i]
            blk = self._blocks[b]
            e = self._start[i + 1] - 1 if (i + 1) & (BLOCK - 1) else len(blk) - 1
            return blk, s, e
        seg = self._tail[i - (b << BLOCK_SHIFT)]
        return seg, 0, len(seg)

    def _entry(self, i: int, detail: bool = False) -> BoardEntry:
        s, a, e = self._locate(i)
        tl = self._tlen[i]
        has_detail = e - a > tl
        return BoardEntry(
            seq=self._seq[i],
            ts=self._ts[i],
            type=_TYPES[self._type[i]],
            text=s[a : a + tl],
            worker_id=self._worker[i],
            has_detail=has_detail,
            detail=s[a + tl + 1 : e] if (detail and has_detail) else None,
            request_id=self._rid[i],
        )

    def _view_start(self, cap: int, cutoff: int) -> int:
        """Index of the oldest entry of the recent view: the newest `cap` entries that are not CLAIMs
        stamped before `cutoff`. Counts expired CLAIMs with C-speed `find`s instead of a Python loop."""
        ts, types = self._ts, self._type
        i, got = len(self._seq), 0
        while i > 0 and got < cap:
            lo = max(0, i - (cap - got))
            expired = 0
            j = types.find(_CLAIM_BYTE, lo, i)
            while j >= 0:
                expired += ts[j] < cutoff
                j = types.find(_CLAIM_BYTE, j + 1, i)
            got += (i - lo) - expired
            i = lo
        return i

    def _claim_cutoff(self) -> int:
        return int((self.clock() - self.limits.claim_ttl_s) * 1e6)

    def recent(self, limit: int | None = None) -> list[BoardEntry]:
        """The newest entries (at most `recent_limit`), oldest first, without expired CLAIMs or details."""
        cap = self.limits.recent_limit if limit is None else min(int(limit), self.limits.recent_limit)
        if cap <= 0:
            return []
        cutoff = self._claim_cutoff()
        ts, types = self._ts, self._type
        return [
            self._entry(j)
            for j in range(self._view_start(cap, cutoff), len(self._seq))
            if types[j] != _CLAIM_CODE or ts[j] >= cutoff
        ]

    def recent_delta(self, have_lo: int, have_hi: int) -> RecentDelta:
        """What a reader holding the recent view's entries with seq in [have_lo, have_hi] lacks.

        A host serving 64 workers keeps the view (2,000 entries) and asks only for the difference:
        the entries newer than `have_hi`, those older than `have_lo` that joined the view (when CLAIMs
        expire), and where the view now starts plus the CLAIM cutoff, so the reader drops what left it.
        `reset` tells the reader to replace what it holds (it held nothing, or something the board does
        not know). See `apply_recent_delta`.
        """
        cutoff = self._claim_cutoff()
        n = len(self._seq)
        i0 = self._view_start(self.limits.recent_limit, cutoff)
        first = self._seq[i0] if i0 < n else self.last_seq + 1
        reset = have_hi <= 0 or have_lo > have_hi or have_hi > self.last_seq or have_hi < first - 1
        if reset:
            spans = [(i0, n)]
        else:
            spans = [(i0, max(i0, bisect_left(self._seq, have_lo))), (max(i0, bisect_right(self._seq, have_hi)), n)]
        ts, types = self._ts, self._type
        rows = [self._row(j) for a, b in spans for j in range(a, b) if types[j] != _CLAIM_CODE or ts[j] >= cutoff]
        return RecentDelta(reset, first, cutoff, rows, self.last_seq, self.limits.recent_limit,
                           int(self.limits.claim_ttl_s * 1e6))

    def _row(self, i: int, detail: bool = False) -> Row:
        s, a, e = self._locate(i)
        tl = self._tlen[i]
        has = e - a > tl
        return Row(self._seq[i], self._ts[i], _TYPES[self._type[i]].value, s[a : a + tl], self._worker[i], has,
                   s[a + tl + 1 : e] if (detail and has) else None, self._rid[i])

    def since_rows(self, cursor: int, limit: int = 1000) -> list[Row]:
        """`since` as rows (what the actor sends to routers)."""
        if limit <= 0:
            return []
        lo = bisect_right(self._seq, cursor)
        return [self._row(i) for i in range(lo, min(len(self._seq), lo + limit))]

    def since(self, cursor: int, limit: int = 1000) -> list[BoardEntry]:
        """Entries with seq > cursor, oldest first, at most `limit`, without details."""
        if limit <= 0:
            return []
        lo = bisect_right(self._seq, cursor)
        return [self._entry(i) for i in range(lo, min(len(self._seq), lo + limit))]

    def cursor_at(self, ts: int) -> int:
        """The seq just before the first entry stamped at or after `ts` (board clock, us): `since(cursor_at(t))`
        reads what was written from t on. Stamps follow commit order, so the column is sorted."""
        i = bisect_left(self._ts, ts)
        return self._seq[i - 1] if i > 0 else 0

    @property
    def last_ts(self) -> int:
        return self._ts[-1] if self._ts else 0

    def unfold(self, seq: int) -> BoardEntry:
        """One entry with its detail."""
        i = bisect_right(self._seq, seq) - 1
        if i < 0 or self._seq[i] != seq:
            raise BoardError(f"no board entry {seq} (the board has {len(self)} entries, last seq {self.last_seq})")
        return self._entry(i, detail=True)

    # ------------------------------------------------------------ grep

    def _search_blocks(self) -> Iterable[tuple[str, str, int, int]]:
        """(original, folded, first index, end index) per block, newest first."""
        n = len(self._seq)
        nb = len(self._blocks)
        if self._tail:
            if self._tail_cache is None:
                self._tail_cache = ("\n".join(self._tail) + "\n", "\n".join(self._ftail) + "\n")
            yield self._tail_cache[0], self._tail_cache[1], nb << BLOCK_SHIFT, n
        for b in range(nb - 1, -1, -1):
            yield self._blocks[b], self._fblocks[b], b << BLOCK_SHIFT, (b + 1) << BLOCK_SHIFT

    def grep(self, pattern: str, regex: bool = True, limit: int = 50, type: str | None = None) -> list[BoardEntry]:
        """Search text and detail of the whole history, case-insensitively, newest first.

        `regex=False` searches a plain substring. Returns at most `limit` entries
        (capped at `grep_limit_max`), without details.
        """
        steps = self.grep_steps(pattern, regex, limit, type)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return done.value

    def grep_steps(
        self, pattern: str, regex: bool = True, limit: int = 50, type: str | None = None
    ) -> Generator[int, None, list[BoardEntry]]:
        """`grep` in steps: yields the number of entries searched so far after each block of 1,024
        (so a caller can interleave other work and stop a slow search); returns the hits.

        Safe against writes between steps: it searches the entries that existed when it started.
        Raises BoardError (at the first step) for an invalid pattern or type.
        """
        code: int | None = None
        if type is not None:
            t = str(type).strip().upper()
            if t not in _TYPE_CODE:
                raise BoardError(f"unknown entry type {type!r}; valid types: {_VALID_TYPES}")
            code = _TYPE_CODE[t]
        q = _compile_query(pattern, regex)
        limit = min(int(limit), self.limits.grep_limit_max)
        if limit <= 0:
            return []
        hits: list[int] = []
        start, types = self._start, self._type
        lits, pat = q.literals, q.verify
        searched = 0
        for S, F, lo, hi in list(self._search_blocks()):
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
                        return [self._entry(x) for x in hits]
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
                        return [self._entry(x) for x in hits]
            searched += hi - lo
            yield searched
        return [self._entry(x) for x in hits]
