r"""What a grep pattern means to the store: the case folding of the searchable text, and the compiled
query (folded literals searched with C-speed `str.rfind`, or a regex with the longest literal every
match must contain as a prefilter, or a bare regex scan).

Every regex the board runs is RE2 (`google-re2`): it matches in time linear in the text, whatever the
pattern, so no pattern can stall the board the way a backtracking engine can (`(a|a)+$` over 27 a's
and a "!" took Python's `re` seconds). RE2 has no backreferences, lookarounds, atomic groups,
possessive quantifiers or conditionals; a pattern using one is refused with a message naming it.
Matching is case-insensitive and multi-line (`^`/`$` at line ends); each entry is searched on its own
(`\A`/`\z` are the entry's start and end).

The literal prefilter reads Python's own parse of the pattern (`re._parser`), which agrees with RE2's
reading of everything both accept, except POSIX classes (`[[:alpha:]]`, which Python reads as a
character set followed by a `]`): a pattern containing `[:` gets no prefilter (a correct, slower scan).
A literal it extracts is one every match contains, folded the way RE2 folds case (`fold`).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import re2

from agensh_ray.errors import BoardError

try:  # Python >= 3.11
    import re._constants as _sre_c  # type: ignore[import-not-found]
    import re._parser as _sre_parse  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - older Pythons
    import sre_constants as _sre_c  # type: ignore[no-redef]
    import sre_parse as _sre_parse  # type: ignore[no-redef]

_MIN_PREFILTER_LITERAL = 2
PATTERN_MAX = 1000
"""Longest grep pattern, in characters."""
PROGRAM_MAX = 2500
"""Largest RE2 program a grep may run (instructions; `\\pL` alone is about 1,200). The time RE2 takes
per byte grows with it when a pattern defeats its DFA, so it bounds the cost of one search step."""

_OPTIONS = re2.Options()
_OPTIONS.case_sensitive = False
_OPTIONS.never_capture = True  # only whether and where a match is: no submatch engine
_OPTIONS.log_errors = False  # RE2 would log every refused pattern to stderr


def fold(s: str) -> str:
    """Length-preserving case fold for literal search, the way RE2 folds case for ASCII letters.

    ASCII letters are lower-cased, and so are the two non-ASCII characters RE2 treats as equal to an
    ASCII letter: U+017F (long s) and U+212A (Kelvin sign) become s and k. U+0130 (I with a dot), the
    only character whose `lower()` is longer, becomes U+0131 first (neither equals i for RE2). Other
    characters may be lower-cased too, which never maps them to ASCII, so an ASCII literal's matches
    are exactly RE2's.
    """
    if s.isascii():
        return s.lower()
    return s.replace("\u0130", "\u0131").replace("\u017f", "s").lower()


_REPEATS = tuple(
    getattr(_sre_c, n) for n in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT") if hasattr(_sre_c, n)
)
_ATOMIC = getattr(_sre_c, "ATOMIC_GROUP", None)
_POSSESSIVE = getattr(_sre_c, "POSSESSIVE_REPEAT", None)


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


@dataclass
class Query:
    """A compiled grep: folded literals (plain) or an RE2 regex with an optional prefilter."""

    literals: tuple[str, ...] = ()
    """Folded literals searched with rfind: an entry is a candidate if it contains any of them (the
    whole query when `verify` is None)."""
    verify: Any = None
    """RE2 regex run on an entry's UTF-8 text to confirm a candidate (or to scan, without literals)."""
    cost: int = 1
    """Size of the RE2 program: what one byte of text may cost the regex, relative to another."""
    per_entry: bool = False
    """Scan entry by entry, not a window of entries at once (the pattern anchors at the text's start or
    end, `\\A`/`\\z`, which only an entry on its own has)."""


def _unsupported(p: Iterable[tuple[Any, Any]]) -> str | None:
    """The first construct of parsed pattern `p` that RE2 does not run, named for the agent."""
    c = _sre_c
    for op, av in p:
        if op is c.GROUPREF:
            return "a backreference (like \\1 or (?P=name))"
        if op is c.GROUPREF_EXISTS:
            return "a conditional group (?(1)...|...)"
        if op is c.ASSERT or op is c.ASSERT_NOT:
            ahead = av[0] >= 0
            neg = "a negative " if op is c.ASSERT_NOT else "a "
            return neg + ("lookahead " + ("(?!...)" if op is c.ASSERT_NOT else "(?=...)") if ahead else
                          "lookbehind " + ("(?<!...)" if op is c.ASSERT_NOT else "(?<=...)"))
        if _ATOMIC is not None and op is _ATOMIC:
            return "an atomic group (?>...)"
        if _POSSESSIVE is not None and op is _POSSESSIVE:
            return "a possessive quantifier (like a*+ or a++)"
        for sub in _children(op, av):
            found = _unsupported(sub)
            if found:
                return found
    return None


def _children(op: Any, av: Any) -> list[Any]:
    """The parsed sub-patterns of one node (of a group, a repeat or an alternation)."""
    if op is _sre_c.SUBPATTERN:
        return [av[-1]]
    if op in _REPEATS:
        return [av[2]]
    if op is _sre_c.BRANCH:
        return list(av[1])
    return []


def _python_parse(pattern: str) -> Any:
    """Python's parse of `pattern`, or None where it may read the pattern differently from RE2 (or
    cannot read it): then no prefilter is derived from it."""
    if "[:" in pattern:  # a POSIX class for RE2, a set then "]" for Python
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "Possible nested set" and friends: a reading we do not trust
        try:
            return _sre_parse.parse(pattern, re.IGNORECASE | re.MULTILINE)
        except (re.error, Warning, RecursionError, OverflowError, ValueError):
            return None


def _anchors_text(p: Iterable[tuple[Any, Any]]) -> bool:
    """True if parsed pattern `p` uses \\A or \\Z (the start or end of the whole text)."""
    c = _sre_c
    for op, av in p:
        if op is c.AT and av in (c.AT_BEGINNING_STRING, c.AT_END_STRING):
            return True
        if any(_anchors_text(s) for s in _children(op, av)):
            return True
    return False


def _compile_re2(source: str, pattern: str) -> Any:
    """`source` compiled by RE2 (multi-line, case-insensitive), or BoardError naming what is wrong."""
    try:
        rx = re2.compile("(?m)" + source, _OPTIONS)
    except re2.error as exc:
        why = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        why = why.replace("(?m)" + source, source)  # RE2 quotes the pattern it was given: ours has a prefix
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                construct = _unsupported(_sre_parse.parse(source))
            except (re.error, RecursionError, OverflowError, ValueError):
                construct = None
        if construct:
            raise BoardError(
                f"pattern {pattern!r} uses {construct}, which the board's regex engine (RE2, linear time) does "
                "not support; search for a plain word, or write the regex without it"
            ) from None
        hint = " (write \\z for the end of the text)" if "\\Z" in why else ""
        raise BoardError(f"invalid pattern {pattern!r}: {why}{hint} (the board reads RE2 syntax)") from None
    except UnicodeEncodeError as exc:
        raise BoardError(f"pattern contains an invalid character at position {exc.start} (lone surrogate)") from None
    if rx.programsize > PROGRAM_MAX:
        raise BoardError(
            f"pattern {pattern!r} is too complex for the board (an RE2 program of {rx.programsize:,} "
            f"instructions; the limit is {PROGRAM_MAX:,}): use fewer or smaller repetitions, or a plain word"
        )
    return rx


def compile_query(pattern: str, regex: bool) -> Query:
    """The cheapest search that finds exactly what `pattern` matches case-insensitively (`regex=False`:
    a plain substring); BoardError with a message for the agent if the pattern is empty, too long,
    invalid, uses what RE2 does not run, or is too complex."""
    if not isinstance(pattern, str) or pattern == "":
        raise BoardError("grep pattern is empty; give a word or a regular expression")
    if len(pattern) > PATTERN_MAX:
        raise BoardError(f"grep pattern is {len(pattern):,} characters; the limit is {PATTERN_MAX:,}")
    if not regex:
        if pattern.isascii():
            return Query(literals=(pattern.lower(),))
        compiled = _compile_re2(re2.escape(pattern), pattern)
        parsed = _python_parse(re.escape(pattern))
    else:
        compiled = _compile_re2(pattern, pattern)
        parsed = _python_parse(pattern)
    q = Query(verify=compiled, cost=max(1, compiled.programsize))
    if parsed is None:
        q.per_entry = "\\A" in pattern or "\\z" in pattern
        return q
    q.per_entry = _anchors_text(parsed)
    if len(parsed) and all(op is _sre_c.LITERAL and av < 128 for op, av in parsed):
        # a bare ASCII word: the folded literal search is exact, no regex needed
        return Query(literals=("".join(chr(av) for _, av in parsed).lower(),))
    runs, _ = _required_literals(parsed)
    best = max(runs, key=len, default="")
    if len(best) >= _MIN_PREFILTER_LITERAL:
        q.literals = (best,)
    else:
        q.literals = _any_of_literals(parsed)
    return q
