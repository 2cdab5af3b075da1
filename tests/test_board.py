"""The plain Board: validation, durability, reload, views and grep (no Ray)."""

from __future__ import annotations

import json
import logging

import pytest

from agensh_ray.board import BLOCK, Board, BoardLimits, apply_recent_delta
from agensh_ray.board.query import compile_query
from agensh_ray.errors import BoardError
from agensh_ray.models import BoardEntry, BoardEntryIn, EntryType
from agensh_ray.wire import entries_from_acks


class FakeClock:
    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def e(type: str = "FACT", text: str = "a fact", worker: str = "w1", **kw) -> BoardEntryIn:
    return BoardEntryIn(type=type, text=text, worker_id=worker, **kw)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def board(tmp_path, clock) -> Board:
    b = Board(tmp_path / "board.jsonl", clock=clock)
    yield b
    b.close()


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize("t", ["OBSERVED", "FACT", "FAIL", "CLAIM"])
def test_text_limit_100(board, t):
    assert board.write(e(t, "x" * 100)).text == "x" * 100
    with pytest.raises(BoardError) as ei:
        board.write(e(t, "x" * 143))
    msg = str(ei.value)
    assert t in msg and "143" in msg and "100" in msg and "detail" in msg


def test_patch_summary_limit_300(board):
    board.write(e("PATCH_SUMMARY", "y" * 300))
    with pytest.raises(BoardError, match=r"PATCH_SUMMARY text is 301 characters; the limit is 300"):
        board.write(e("PATCH_SUMMARY", "y" * 301))


def test_unknown_type_lists_valid_types(board):
    with pytest.raises(BoardError) as ei:
        board.write(e("CLAIMS"))
    msg = str(ei.value)
    assert "'CLAIMS'" in msg
    for t in EntryType:
        assert t.value in msg


def test_type_is_case_insensitive(board):
    assert board.write(e("fact")).type is EntryType.FACT


def test_detail_limit(board):
    board.write(e(detail="d" * 8000))
    with pytest.raises(BoardError, match=r"detail is 9001 characters; the limit is 8000"):
        board.write(e(detail="d" * 9001))


def test_text_is_one_line_and_detail_keeps_its_lines_with_control_characters_escaped(board):
    for text, what in (("a\nb", r"a line break \(\\n\) at position 1"), ("\x1b[2J", r"an escape character"),
                       ("a\u2029", "a paragraph separator"), ("\x85next", r"a control character \(\\x85\)")):
        with pytest.raises(BoardError, match=f"^FACT text must be one line without control characters; it has {what}"):
            board.write(e(text=text))
    got = board.write(e(text="a no-break\u00a0space is text", detail="a\r\nb\tc\rd\x1b[0m\x00"))
    assert board.unfold(got.seq).detail == "a\nb\tc\\rd\\x1b[0m\\x00"
    with pytest.raises(BoardError, match="^detail is 8003 characters once its control characters are escaped; the "
                                         "limit is 8000$"):
        board.write(e(detail="d" * 7999 + "\x00"))
    assert board.last_seq == got.seq  # nothing refused was written


def test_empty_text(board):
    for text in ("", "   "):
        with pytest.raises(BoardError, match="empty"):
            board.write(e(text=text))


def test_custom_limits(tmp_path):
    b = Board(tmp_path / "b.jsonl", BoardLimits(text_max={"FACT": 5}, detail_max=3))
    with pytest.raises(BoardError, match="the limit is 5"):
        b.write(e(text="123456"))
    with pytest.raises(BoardError, match="the limit is 3"):
        b.write(e(text="12", detail="1234"))


def test_dict_entries_accepted_and_bad_dict_reported(board):
    assert board.write({"type": "FACT", "text": "from a dict", "worker_id": "w"}).seq == 1
    (res,) = board.write_batch([{"type": "FACT", "worker_id": "w"}])
    assert isinstance(res, BoardError) and "text" in str(res)


def test_batch_with_one_bad_entry_writes_the_rest(board, tmp_path):
    res = board.write_batch([e(text="one"), e("NOPE", "bad"), e(text="two"), e(text="x" * 101)])
    assert [type(r) for r in res] == [BoardEntry, BoardError, BoardEntry, BoardError]
    assert [r.seq for r in res if isinstance(r, BoardEntry)] == [1, 2]
    assert "NOPE" in str(res[1]) and "101" in str(res[3])
    lines = (tmp_path / "board.jsonl").read_text().splitlines()
    assert [json.loads(x)["text"] for x in lines] == ["one", "two"]


# ---------------------------------------------------------------- durability / reload


def test_seq_monotonic_across_reload(tmp_path, clock):
    p = tmp_path / "board.jsonl"
    b = Board(p, clock=clock)
    assert [x.seq for x in b.write_batch([e(text=f"t{i}") for i in range(3)])] == [1, 2, 3]
    b.close()
    b = Board(p, clock=clock)
    assert b.last_seq == 3 and len(b) == 3
    assert b.write(e(text="after")).seq == 4
    assert [x.text for x in b.since(0)] == ["t0", "t1", "t2", "after"]
    b.close()


def test_torn_last_line_truncated(tmp_path, clock, caplog):
    p = tmp_path / "board.jsonl"
    b = Board(p, clock=clock)
    b.write_batch([e(text="keep one"), e(text="keep two", detail="the detail")])
    b.close()
    good = p.read_bytes()
    with open(p, "ab") as f:
        f.write(b'{"seq":3,"ts":1,"type":"FACT","text":"torn in the mi')
    with caplog.at_level(logging.WARNING, logger="agensh_ray.applog"):
        b = Board(p, clock=clock)
    assert any("torn" in r.getMessage() for r in caplog.records)
    assert p.read_bytes() == good
    assert [x.text for x in b.since(0)] == ["keep one", "keep two"]
    assert b.unfold(2).detail == "the detail"
    assert b.write(e(text="next")).seq == 3
    b.close()
    assert len(Board(p).since(0)) == 3


def test_request_id_idempotent_across_reload(tmp_path, clock):
    p = tmp_path / "board.jsonl"
    b = Board(p, clock=clock)
    first = b.write(e(text="once", request_id="r1", detail="dd"))
    again = b.write(e(text="once", request_id="r1", detail="dd"))
    assert again.seq == first.seq and again.detail == "dd"
    # same request id from another worker is a different request
    other = b.write(e(text="other worker", worker="w2", request_id="r1"))
    assert other.seq == first.seq + 1
    # duplicates inside one batch collapse too
    r = b.write_batch([e(text="dup", request_id="r2"), e(text="dup", request_id="r2")])
    assert r[0].seq == r[1].seq == 3
    b.close()
    b = Board(p, clock=clock)
    assert b.write(e(text="once", request_id="r1")).seq == 1
    assert b.write(e(text="other worker", worker="w2", request_id="r1")).seq == 2
    assert b.write(e(text="dup", request_id="r2")).seq == 3
    assert len(b) == 3
    b.close()


def test_one_fsync_per_batch(board, monkeypatch):
    import agensh_ray.applog as mod

    calls = []
    real = mod.os.fsync
    monkeypatch.setattr(mod.os, "fsync", lambda fd: (calls.append(fd), real(fd)))
    board.write_batch([e(text=f"t{i}") for i in range(50)])
    assert len(calls) == 1


def test_prepared_entries_invisible_until_applied(board):
    board.write(e(text="visible"))
    pb = board.prepare_batch([e(text="pending needle")])
    assert board.last_seq == 1 and board.since(0)[-1].seq == 1 and board.grep("needle") == []
    board.commit_io(pb)
    assert board.last_seq == 1 and board.grep("needle") == [] and len(board.recent()) == 1
    (res,) = board.apply(pb)
    assert res.seq == 2 and [x.seq for x in board.grep("needle")] == [2]


def test_failed_io_releases_seqs_and_keeps_log_clean(board, monkeypatch, tmp_path):
    import agensh_ray.applog as mod

    board.write(e(text="before"))

    def boom(fd):
        raise OSError("disk on fire")

    monkeypatch.setattr(mod.os, "fsync", boom)
    with pytest.raises(OSError):
        board.write(e(text="lost"))
    monkeypatch.undo()
    assert board.last_seq == 1 and len(board) == 1
    assert board.write(e(text="after")).seq == 2
    assert [json.loads(x)["text"] for x in (tmp_path / "board.jsonl").read_text().splitlines()] == ["before", "after"]


# ---------------------------------------------------------------- views


def test_recent_hides_old_claims_and_strips_detail(board, clock):
    board.write(e("CLAIM", "old claim"))
    board.write(e(text="old fact", detail="long detail"))
    clock.t += 3601
    board.write(e("CLAIM", "fresh claim"))
    texts = [x.text for x in board.recent()]
    assert texts == ["old fact", "fresh claim"]
    fact = board.recent()[0]
    assert fact.has_detail and fact.detail is None
    # grep still finds the expired claim
    assert [x.text for x in board.grep("claim", type="CLAIM")] == ["fresh claim", "old claim"]


def test_recent_caps_at_recent_limit(tmp_path, clock):
    b = Board(tmp_path / "b.jsonl", BoardLimits(recent_limit=10), clock=clock)
    b.write_batch([e(text=f"t{i}") for i in range(25)])
    r = b.recent()
    assert [x.seq for x in r] == list(range(16, 26))
    assert [x.seq for x in b.recent(3)] == [23, 24, 25]
    assert len(b.recent(100)) == 10


def test_since(board):
    board.write_batch([e(text=f"t{i}", detail="d") for i in range(10)])
    assert [x.seq for x in board.since(7)] == [8, 9, 10]
    assert [x.seq for x in board.since(0, limit=2)] == [1, 2]
    assert board.since(10) == []
    assert all(x.detail is None and x.has_detail for x in board.since(0))


def test_unfold(board):
    board.write(e(text="short", detail="the whole story\nwith lines"))
    board.write(e(text="no detail"))
    u = board.unfold(1)
    assert u.detail == "the whole story\nwith lines" and u.has_detail
    assert board.unfold(2).detail is None and not board.unfold(2).has_detail
    with pytest.raises(BoardError, match="no board entry 42"):
        board.unfold(42)


# ---------------------------------------------------------------- grep


@pytest.fixture
def grepboard(board):
    board.write_batch(
        [
            e(text="Build FAILED on linux", type="FAIL"),
            e(text="tests pass", detail="ran pytest: 12 passed, error count 0"),
            e(text="CLAIM parser.py", type="CLAIM"),
            e(text="parser handles ERROR tokens"),
            e(text="price is 3.50 dollars"),
        ]
    )
    return board


def test_grep_plain_case_insensitive_newest_first(grepboard):
    assert [x.seq for x in grepboard.grep("error", regex=False)] == [4, 2]  # 2 via its detail
    assert [x.seq for x in grepboard.grep("ERROR")] == [4, 2]
    assert [x.seq for x in grepboard.grep("3.50", regex=False)] == [5]
    assert grepboard.grep("3.5.", regex=False) == []
    assert grepboard.grep("nothing like this") == []


def test_grep_regex(grepboard):
    assert [x.seq for x in grepboard.grep(r"fail(ed|s)\b")] == [1]
    assert [x.seq for x in grepboard.grep(r"\d+ passed")] == [2]
    assert [x.seq for x in grepboard.grep(r"^parser")] == [4]
    assert [x.seq for x in grepboard.grep(r"3\.\d+")] == [5]
    assert [x.seq for x in grepboard.grep(r"pars(er|ing)")] == [4, 3]
    assert [x.seq for x in grepboard.grep(r"[A-Z]{5}")] == [5, 4, 3, 2, 1]  # every entry has a 5-letter word
    assert [x.seq for x in grepboard.grep(r"linux$")] == [1]


def test_grep_type_limit_and_cap(tmp_path):
    b = Board(tmp_path / "b.jsonl", BoardLimits(grep_limit_max=7))
    b.write_batch([e("FAIL" if i % 2 else "FACT", f"item {i}") for i in range(3000)])
    hits = b.grep("item", limit=5)
    assert [x.seq for x in hits] == [3000, 2999, 2998, 2997, 2996]
    assert len(b.grep("item", limit=7)) == 7
    assert [x.seq for x in b.grep(r"item \d+", limit=3, type="fail")] == [3000, 2998, 2996]
    assert [x.seq for x in b.grep(r"item 1\d$", limit=7)] == list(range(20, 13, -1))
    for bad in (0, -5, 8, 2.5, True, "3"):  # refused, naming the argument and its range
        with pytest.raises(BoardError, match=rf"^limit must be a whole number from 1 to 7, not {bad!r}$"):
            b.grep("item", limit=bad)
    with pytest.raises(BoardError, match="unknown entry type"):
        b.grep("item", type="FACTS")


def test_grep_invalid_or_empty_pattern(board):
    with pytest.raises(BoardError) as ei:
        board.grep("(")
    assert "invalid pattern '('" in str(ei.value)
    with pytest.raises(BoardError, match="empty"):
        board.grep("")


def test_grep_unfold_roundtrip(grepboard):
    (hit,) = grepboard.grep("12 passed")
    assert hit.detail is None and grepboard.unfold(hit.seq).detail.startswith("ran pytest")


def test_grep_matches_reference_scan(tmp_path):
    """Block layout, prefilter, windowed scan and per-entry scan agree with RE2 run on each entry alone."""
    import random

    import re2

    rnd = random.Random(7)
    words = ["alpha", "Beta", "GAMMA", "delta42", "x", "ÉCOLE", "straße", "K-dim", "İstanbul", "ſun", "\u212aelvin"]
    b = Board(tmp_path / "b.jsonl")
    small = Board(tmp_path / "small-steps.jsonl", BoardLimits(grep_step_work=2000))  # RE2 scans a few entries a call
    entries = []
    for i in range(2 * BLOCK + 37):
        text = " ".join(rnd.choice(words) for _ in range(rnd.randint(1, 6))).strip() or "w"
        text += " zebra9 x" if rnd.random() < 0.005 else ""  # a literal rare enough to check entries one by one
        detail = " ".join(rnd.choice([*words, "end\n"]) for _ in range(3)) if rnd.random() < 0.3 else None
        entries.append(e(rnd.choice(["FACT", "FAIL"]), text[:100], detail=detail))
    written = b.write_batch(entries)
    assert [x.seq for x in small.write_batch(entries)] == [x.seq for x in written]
    full = {w.seq: w.text + ("\n" + w.detail if w.detail else "") for w in written}
    types = {w.seq: w.type.value for w in written}
    patterns = ["alpha", "beta gamma", r"delta\d+", r"^gamma", r"ta$", r"é", "ÉCOLE", r"[a-z]+42", r"\d", r"a.b",
                "k-dim",
                "istanbul", r"x\s+x", r"end\nalpha", r"alpha|gamma", r"(beta|x\s)", r"straße|k-d", r"GAMMA|delta4|x$",
                r"\Aalpha", r"x\z", r"[[:upper:]]{5}", r"[[:digit:]]2 x", "sun", "kelvin", r"(a|a)+$", r"\bx\b", "",
                r"$", r"^", r"\n", r"ÉCOLE\s+\w", r"ß\b", "é x", r"zebra\d", r"zebra9\s+x$", r"\bzebra9 x"]
    opts = re2.Options()
    opts.case_sensitive = False
    for pat in patterns:
        for regex in (True, False):
            if not pat:
                continue
            cre = re2.compile("(?m)" + (pat if regex else re2.escape(pat)), opts)
            for t in (None, "FAIL"):
                want = [s for s in sorted(full, reverse=True)
                        if cre.search(full[s]) and (t is None or types[s] == t)][:500]
                got = [x.seq for x in b.grep(pat, regex=regex, limit=500, type=t)]
                assert got == want, (pat, regex, t)
                assert [x.seq for x in small.grep(pat, regex=regex, limit=500, type=t)] == want, (pat, regex, t)
    b.close()
    small.close()


def test_blocks_survive_reload(tmp_path):
    p = tmp_path / "b.jsonl"
    b = Board(p)
    b.write_batch([e(text=f"entry {i}", detail=f"d{i}" if i % 3 == 0 else None) for i in range(BLOCK + 5)])
    b.close()
    b = Board(p)
    assert b.unfold(BLOCK).text == f"entry {BLOCK - 1}"
    assert b.unfold(BLOCK + 2).detail is None and b.unfold(BLOCK + 3).detail == f"d{BLOCK + 2}"
    assert [x.seq for x in b.grep(r"entry 10\d\d$", limit=3)] == [BLOCK + 5, BLOCK + 4, BLOCK + 3]
    b.close()


def test_grep_runs_backtracking_patterns_in_linear_time_and_refuses_what_re2_cannot_run(board):
    board.write_batch([e(text="a" * 99 + "!"), e(text="a" * 26 + "!")])
    for pat in (r"(a+)+$", r"(x*y*)*z", r"(?:\w+\s?)+done", r"(a|b+)*!", r"(a|a)+$", r"(.*a){12}$"):
        board.grep(pat)  # RE2: linear in the text, whatever the pattern
    assert [x.seq for x in board.grep(r"(a|a)+!$")] == [2, 1]
    for pat, construct in ((r"(a)\1", "a backreference"), (r"(?P<x>a)(?P=x)", "a backreference"),
                           (r"x(?=y)", r"a lookahead \(\?=\.\.\.\)"), (r"x(?!y)", "a negative lookahead"),
                           (r"(?<=x)y", "a lookbehind"), (r"(?<!x)y", "a negative lookbehind"),
                           (r"(?>a+)+", "an atomic group"), (r"a++", "a possessive quantifier"),
                           (r"(a)?(?(1)b|c)", "a conditional group")):
        with pytest.raises(BoardError, match=rf"^pattern '.*' uses {construct}.*, which the board's regex engine "
                                             r"\(RE2, linear time\) does not support"):
            board.grep(pat)
    with pytest.raises(BoardError, match=r"^invalid pattern 'tac\\\\Z': invalid escape sequence: \\Z \(write \\z for"):
        board.grep(r"tac\Z")
    with pytest.raises(BoardError, match=r"too complex for the board \(an RE2 program of [\d,]+ instructions; "
                                         r"the limit is 2,500\)"):
        board.grep(r"(?:\pL\pN){3}")
    with pytest.raises(BoardError, match="grep pattern is 1,001 characters; the limit is 1,000"):
        board.grep("x" * 1001)


def test_alternation_uses_the_literal_index():
    assert compile_query(r"unicode|squeeze", True).literals == ("unicode", "squeeze")
    assert compile_query(r"(fail(ed|s)|error)", True).literals == ("fail", "error")
    assert compile_query(r"x|unicode", True).literals == ()  # a branch without a 2-letter literal: full scan


def test_grep_steps_yield_per_block_and_ignore_later_writes(tmp_path):
    b = Board(tmp_path / "b.jsonl")
    b.write_batch([e(text=f"needle {i}" if i % 10 == 0 else f"hay {i}") for i in range(3 * BLOCK)])
    steps = b.grep_steps("needle", limit=500)
    assert next(steps) == BLOCK
    b.write_batch([e(text="needle late")])  # written mid-search: not part of this search
    assert list(steps) == [2 * BLOCK, 3 * BLOCK]
    hits = b.grep("needle", limit=500)
    assert hits[0].text == "needle late" and len(hits) == 1 + len(range(0, 3 * BLOCK, 10))
    b.close()


def test_recent_delta_rebuilds_the_recent_view(tmp_path, clock):
    """A reader that keeps the view and applies deltas sees exactly what recent() shows, through
    writes, CLAIMs expiring (the view reaches further back) and readers that fell far behind."""
    import random

    rnd = random.Random(3)
    b = Board(tmp_path / "b.jsonl", BoardLimits(recent_limit=50, claim_ttl_s=100), clock=clock)
    readers: list[list] = [[], [], []]
    for step in range(300):
        n = rnd.choice([0, 1, 1, 2, 5, 30])
        b.write_batch([e(rnd.choice(["FACT", "CLAIM", "CLAIM", "FAIL"]), f"s{step} e{k}") for k in range(n)])
        clock.t += rnd.choice([0, 1, 5, 40])
        for k, held in enumerate(readers):
            if rnd.random() < (0.9, 0.3, 0.05)[k]:
                lo, hi = (held[0].seq, held[-1].seq) if held else (0, 0)
                readers[k] = apply_recent_delta(held, b.recent_delta(lo, hi))
                want = b.recent()
                assert [x.seq for x in readers[k]] == [x.seq for x in want], (step, k)
                assert readers[k] == want
    delta = b.recent_delta(readers[0][0].seq, readers[0][-1].seq)
    assert not delta.reset and len(delta.rows) < 50  # a reader that keeps up gets little
    b.close()


def test_compact_acks_rebuild_the_entries_the_board_stored(board):
    """Writers get (seq, ts) per new entry and rebuild the entry from their own request; a request id
    written before answers with the stored row, a refusal with its error, all in request order."""
    first = board.write(e("FACT", "stored earlier", request_id="r-1"))
    reqs = [("fact", "lower-case type", None, "w1", "r-2"), ("NOPE", "x", None, "w1", "r-3"),
            {"type": "CLAIM", "text": "from a dict", "worker_id": "w2", "detail": "more", "request_id": "r-4"},
            ("OBSERVED", "a retry", None, "w1", "r-1")]
    pb = board.prepare_batch(reqs)
    board.commit_io(pb)
    board.apply(pb)
    got = entries_from_acks(reqs, pb.acks)
    assert isinstance(got[1], BoardError) and "valid types" in str(got[1])
    assert got[3] == first  # the stored entry, not the retried text
    stored = {x.seq: x for x in board.since(0)}
    for mine in (got[0], got[2]):
        assert mine.model_dump() == stored[mine.seq].model_dump(exclude={"detail"}) | {"detail": mine.detail}
    assert got[0].type is EntryType.FACT and got[2].has_detail and got[2].detail == "more"
