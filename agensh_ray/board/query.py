"""What a grep pattern means to the store: the case folding of the searchable text, and the compiled
query (folded literals searched with C-speed `str.rfind`, or a regex with the longest literal every
match must contain as a prefilter, or a bare regex scan).

The regex analysis reads Python's own parse of the pattern (`re._parser`), so it agrees with what
`re` will match: a literal it extracts is one every match contains, folded the way `re.IGNORECASE`
folds. Patterns that repeat a repetition (like `(a+)+`) are refused: `re` can backtrack on them for
exponential time and cannot be interrupted, not even by the grep budget.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from agensh_ray.errors import BoardError

try:  # Python >= 3.11
    import re._constants as _sre_c  # type: ignore[import-not-found]
    import re._parser as _sre_parse  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - older Pythons
    import sre_constants as _sre_c  # type: ignore[no-redef]
    import sre_parse as _sre_parse  # type: ignore[no-redef]

_MIN_PREFILTER_LITERAL = 2


def fold(s: str) -> str:
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
class Query:
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


def compile_query(pattern: str, regex: bool) -> Query:
    """The cheapest search that finds exactly what `pattern` matches case-insensitively (`regex=False`:
    a plain substring); BoardError with a message for the agent if the pattern is empty, invalid or
    refused."""
    if not isinstance(pattern, str) or pattern == "":
        raise BoardError("grep pattern is empty; give a word or a regular expression")
    if not regex:
        if pattern.isascii():
            return Query(literals=(pattern.lower(),))
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
        return Query(literals=("".join(chr(av) for _, av in parsed).lower(),))
    runs, _ = _required_literals(parsed)
    best = max(runs, key=len, default="")
    if len(best) >= _MIN_PREFILTER_LITERAL:
        return Query(literals=(best,), verify=compiled)
    alternatives = _any_of_literals(parsed)
    if alternatives:
        return Query(literals=alternatives, verify=compiled)
    if _case_neutral(parsed):
        compiled = re.compile(pattern, re.MULTILINE)
    return Query(verify=compiled)
