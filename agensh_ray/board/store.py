"""`Board`: the board's entries, numbered, validated and durable. The typed, append-only log that every
worker reads and writes.

A plain single-threaded class with an injected clock (`BoardService` serializes calls to it in the
board actor). It keeps the full history in memory (`agensh_ray.board.columns`: compact columns and
search blocks) and appends every acknowledged entry to a JSON-lines log (`agensh_ray.applog.AppendLog`),
one write + fsync per batch. A batch is written in steps, `prepare_batch` -> `commit_io` -> `apply`
(or `abort`), so the service can run the fsync in a thread while the event loop serves readers; an
entry becomes visible only once it is durable, and seqs follow commit order.
"""

from __future__ import annotations

import gc
import json
import logging
import time
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agensh_ray.applog import AppendLog
from agensh_ray.board.columns import Columns
from agensh_ray.board.leases import ClaimBook, Lease, claim_life_wall_s
from agensh_ray.board.limits import CLAIM_CODE, TYPE_CODE, VALID_TYPES, BoardLimits
from agensh_ray.board.query import compile_query
from agensh_ray.board.search import search_steps
from agensh_ray.errors import BoardError
from agensh_ray.inputs import escape_controls, one_line_problem, whole_number
from agensh_ray.models import BoardEntry, BoardEntryIn
from agensh_ray.wire import Ack, EntryFields, RecentDelta, Row

log = logging.getLogger(__name__)

_json_str = json.encoder.encode_basestring_ascii  # type: ignore[attr-defined]
"""JSON string literal of a str, ASCII only (C speed): lone surrogates become \\u escapes."""


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
    """The same answers in the compact form writers get (see `agensh_ray.wire.entries_from_acks`)."""
    new: list[_Pending] = field(default_factory=list)
    data: bytes = b""
    next_seq_before: int = 0


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
        self._cols = Columns()
        self._next_seq = 1
        lim = self.limits
        life = claim_life_wall_s(lim.claim_ttl_s, 1.0, lim.claim_rule, lim.claim_floor_wall_s)
        if life != lim.claim_ttl_s:  # (the service passes the life already in wall seconds: no change)
            self.limits = lim = lim.model_copy(update={"claim_ttl_s": life})
        self.claims = ClaimBook(life, lim.claim_rule)
        """The open claims by key and holder (agensh_ray/board/leases.py), fed every entry as it becomes visible."""
        self._claim_codes = frozenset(TYPE_CODE[t] for t in ("CLAIM", "FAIL", "PATCH_SUMMARY"))
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
        append = self._cols.append
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
                    code = TYPE_CODE[d["type"]]
                    append(seq, int(d["ts"]), code, d["text"], d.get("detail"), d["worker_id"], d.get("request_id"))
                    self._next_seq = seq + 1
                    self._track_claims(seq, int(d["ts"]), code, d["type"], d["text"], d["worker_id"])
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
        code = TYPE_CODE.get(t) if t.__class__ is str else None
        if code is None:
            t = t.strip().upper() if isinstance(t, str) else t
            if t not in TYPE_CODE:
                raise BoardError(f"unknown entry type {e[0] if isinstance(e, tuple) else e.type!r}; valid types: {VALID_TYPES}")
        if not isinstance(worker, str) or not worker.strip():
            raise BoardError("worker_id is empty")
        tmax = self.limits.text_max.get(t, 100)
        if not isinstance(text, str) or not text.strip():
            raise BoardError(f"{t} text is empty; write one line of at most {tmax} characters (details go in detail)")
        if len(text) > tmax:
            raise BoardError(f"{t} text is {len(text)} characters; the limit is {tmax} (put the rest in detail)")
        if (bad := one_line_problem(text)) is not None:
            raise BoardError(f"{t} text must be one line without control characters; it has {bad} "
                             "(put more lines in detail)")
        if detail is not None:
            if not isinstance(detail, str) or len(detail) > self.limits.detail_max:
                raise BoardError(f"detail is {len(detail)} characters; the limit is {self.limits.detail_max}")
            detail = escape_controls(detail)
            if len(detail) > self.limits.detail_max:
                raise BoardError(f"detail is {len(detail)} characters once its control characters are escaped; "
                                 f"the limit is {self.limits.detail_max}")
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
                i = self._cols.find_request(worker, rid)
                if i is not None:
                    results.append(self._cols.row(i, detail=True))
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
            new.append(_Pending(row, TYPE_CODE[t]))
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
        append = self._cols.append
        track = self._track_claims
        for p in pb.new:
            r = p.row
            append(r.seq, r.ts, p.code, r.text, r.detail, r.worker_id, r.request_id)
            track(r.seq, r.ts, p.code, r.type, r.text, r.worker_id)
        if pb.new:
            self._next_seq = pb.new[-1].row.seq + 1
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
        return self._cols.last_seq

    @property
    def last_ts(self) -> int:
        return self._cols.last_ts

    def __len__(self) -> int:
        return len(self._cols)

    # ------------------------------------------------------------ claims

    def _track_claims(self, seq: int, ts: int, code: int, type: str, text: str, worker: str) -> None:
        """Feed one visible entry to the claim book (only the entries that can change it: the hot path)."""
        book = self.claims
        if code in self._claim_codes or worker in book.by_worker:
            book.entry(seq, ts, type, text, worker)

    def open_claims(self, key: str | None = None) -> list[Lease]:
        """The open claims on `key` (a claim's text up to its colon, or that text itself), oldest first, or
        every open claim (each key's oldest first) when `key` is None: answered from the claim book's index,
        whatever the size of the board or of its recent view."""
        now = int(self.clock() * 1e6)
        if key is None:
            return self.claims.open_all(now)
        if not isinstance(key, str) or not key.strip():
            raise BoardError("key is empty: give the feature a claim names before its colon (e.g. tac)")
        if len(key) > 200 or (bad := one_line_problem(key)) is not None:
            raise BoardError("key must be one line of at most 200 characters"
                             + (f"; it has {bad}" if len(key) <= 200 else ""))
        return self.claims.open_on(key, now)

    def touch(self, worker: str) -> None:
        """`worker` did something outside the board (a PR opened, commented, reviewed, merged): under the
        `lease` rule its open claims live on from now."""
        self.claims.touch(worker, max(int(self.clock() * 1e6), self.last_ts))

    def _claim_cutoff(self) -> int:
        return int((self.clock() - self.limits.claim_ttl_s) * 1e6)

    def recent(self, limit: int | None = None) -> list[BoardEntry]:
        """The newest entries (at most `limit`, 1 or more, capped at `recent_limit`), oldest first, without
        expired CLAIMs or details."""
        cap = self.limits.recent_limit
        if limit is not None:
            cap = min(whole_number(limit, "limit", 1, None, BoardError), cap)
        cutoff = self._claim_cutoff()
        cols = self._cols
        ts, types = cols.ts, cols.type
        return [
            cols.entry(j)
            for j in range(cols.view_start(cap, cutoff), len(cols))
            if types[j] != CLAIM_CODE or ts[j] >= cutoff
        ]

    def recent_delta(self, have_lo: int, have_hi: int) -> RecentDelta:
        """What a reader holding the recent view's entries with seq in [have_lo, have_hi] lacks.

        A host serving 64 workers keeps the view (2,000 entries) and asks only for the difference:
        the entries newer than `have_hi`, those older than `have_lo` that joined the view (when CLAIMs
        expire), and where the view now starts plus the CLAIM cutoff, so the reader drops what left it.
        `reset` tells the reader to replace what it holds (it held nothing, or something the board does
        not know). See `agensh_ray.board.view.apply_recent_delta`.
        """
        cutoff = self._claim_cutoff()
        cols = self._cols
        seqs = cols.seq
        n = len(seqs)
        last = self.last_seq
        i0 = cols.view_start(self.limits.recent_limit, cutoff)
        first = seqs[i0] if i0 < n else last + 1
        reset = have_hi <= 0 or have_lo > have_hi or have_hi > last or have_hi < first - 1
        if reset:
            spans = [(i0, n)]
        else:
            spans = [(i0, max(i0, bisect_left(seqs, have_lo))), (max(i0, bisect_right(seqs, have_hi)), n)]
        ts, types, row = cols.ts, cols.type, cols.row
        rows = [row(j) for a, b in spans for j in range(a, b) if types[j] != CLAIM_CODE or ts[j] >= cutoff]
        return RecentDelta(reset, first, cutoff, rows, last, self.limits.recent_limit,
                           int(self.limits.claim_ttl_s * 1e6))

    def since_rows(self, cursor: int, limit: int = 1000) -> list[Row]:
        """`since` as rows (what the service sends to routers)."""
        whole_number(limit, "limit", 1, None, BoardError)
        cols = self._cols
        lo = bisect_right(cols.seq, cursor)
        return [cols.row(i) for i in range(lo, min(len(cols), lo + limit))]

    def since(self, cursor: int, limit: int = 1000) -> list[BoardEntry]:
        """Entries with seq > cursor, oldest first, at most `limit` (1 or more), without details."""
        whole_number(limit, "limit", 1, None, BoardError)
        cols = self._cols
        lo = bisect_right(cols.seq, cursor)
        return [cols.entry(i) for i in range(lo, min(len(cols), lo + limit))]

    def cursor_at(self, ts: int) -> int:
        """The seq just before the first entry stamped at or after `ts` (board clock, us): `since(cursor_at(t))`
        reads what was written from t on. Stamps follow commit order, so the column is sorted."""
        cols = self._cols
        i = bisect_left(cols.ts, ts)
        return cols.seq[i - 1] if i > 0 else 0

    def unfold(self, seq: int) -> BoardEntry:
        """One entry with its detail."""
        whole_number(seq, "seq", 1, None, BoardError)
        cols = self._cols
        i = bisect_right(cols.seq, seq) - 1
        if i < 0 or cols.seq[i] != seq:
            raise BoardError(f"no board entry {seq} (the board has {len(self)} entries, last seq {self.last_seq})")
        return cols.entry(i, detail=True)

    # ------------------------------------------------------------ grep

    def grep(self, pattern: str, regex: bool = True, limit: int = 50, type: str | None = None) -> list[BoardEntry]:
        """Search text and detail of the whole history, case-insensitively, newest first.

        `regex=False` searches a plain substring; a regex is RE2 syntax (`agensh_ray.board.query`).
        Returns at most `limit` entries (1 to `grep_limit_max`), without details.
        """
        steps = self.grep_steps(pattern, regex, limit, type)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return self.entries(done.value)

    def grep_steps(
        self, pattern: str, regex: bool = True, limit: int = 50, type: str | None = None
    ) -> Generator[int, None, list[int]]:
        """`grep` in steps of bounded work (`agensh_ray.board.search`): yields the number of the newest
        entries searched so far after each step (so a caller can stop a slow search); returns the
        indexes of the hits, which `entries` makes into entries.

        Checks the request and lists what it will search now: BoardError for an invalid pattern, type
        or limit is raised by this call. The steps read only what existed at this call, so they may run
        in another thread while writes go on (`entries` must not: call it where the writes happen).
        """
        code: int | None = None
        if type is not None:
            t = str(type).strip().upper()
            if t not in TYPE_CODE:
                raise BoardError(f"unknown entry type {type!r}; valid types: {VALID_TYPES}")
            code = TYPE_CODE[t]
        whole_number(limit, "limit", 1, self.limits.grep_limit_max, BoardError)
        q = compile_query(pattern, regex)
        return search_steps(list(self._cols.search_blocks()), self._cols, q, limit, code, self.limits.grep_step_work)

    def entries(self, indexes: list[int]) -> list[BoardEntry]:
        """The entries at these positions (what `grep_steps` returns), without details."""
        entry = self._cols.entry
        return [entry(i) for i in indexes]
