"""What a CLAIM is and how long it lives: the one definition the board, the routers, the agents' prompt
and the analysis share (issue 30, "claims that hold at 1,024").

Two rules, a run's `claims` setting (an ablation):

* `legacy` (the rule before issue 30): a claim lives `claim_ttl_s` schedule seconds from its entry,
  that is `claim_ttl_s / time_scale` wall seconds (at x60 a 1-hour claim lived 60 wall seconds, less
  than one slow build on a loaded machine); nothing renews it.
* `lease`: a claim lives `claim_ttl_s` schedule seconds but never less than `claim_floor_wall_s` wall
  seconds (`claim_life_wall_s`), counted from its holder's latest activity: every board entry the holder
  writes and every PR it opens, comments, reviews or merges renews all its open claims. A claim ends when
  it expires (for good: a later write does not bring it back), when its holder releases it (a FAIL
  `release KEY: ...`), summarises it (a PATCH_SUMMARY `KEY: ...`), or claims something else (one claim
  at a time, as the prompt asks).

A claim's key is what it is about: its text up to the first colon (all of it without one), a leading `claim`
dropped, lower-cased, spaces collapsed (`claim tac: textkit/commands/tac.py` -> `tac`). The same parse gives
the key of a release and of a summary. The oldest open claim on a key
wins; `ClaimBook` answers "open claims on KEY, oldest first" from an index, whatever the board's size.

The board clock is wall time (UTC microseconds); the life is converted once, here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CLAIM_RULES = ("lease", "legacy")
"""The claim rules a run can use (`RunConfig.claims`)."""

CLAIM_FLOOR_WALL_S = 600.0
"""The shortest life of a claim under `lease`, in wall seconds. A claim must outlive the longest gap between
two renewals of a busy holder, and the slowest of those gaps is machine time, not schedule time: on this
2-core machine a merge retry's git steps took ~3.5 s wall, an idle worker's full check of main 48 s wall
(median), and at 1,024 workers one tool call 10-14 s at the agent; a build of a large generated feature is
tens of such steps with no board write in between. Ten wall minutes cover ~40 of the slowest steps."""

KEY_MAX = 60
"""A key is at most this many characters (longer ones are cut: the key of a long claim without a colon)."""

_LEAD = re.compile(r"^(?:claim(?:ed|ing)?|release[sd]?)\b *", re.A)
_SPACES = re.compile(r" +")


def claim_key(text: str) -> str:
    """The key of a CLAIM, a release (FAIL `release KEY: ...`) or a summary (PATCH_SUMMARY `KEY: ...`).
    analysis/views.sql has the same rule as the macro `claim_key` (board texts are one line: spaces only)."""
    head, colon, _ = text.partition(":")
    body = head if colon and head.strip(" ") else text
    return _SPACES.sub(" ", _LEAD.sub("", body.strip(" ").lower())).strip(" ")[:KEY_MAX]


def is_release(text: str) -> bool:
    """A FAIL entry that gives a claim up (`release KEY: why`)."""
    return text.lstrip()[:7].lower() == "release"


def claim_life_wall_s(claim_ttl_s: float, time_scale: float, rule: str = "lease",
                      floor_wall_s: float = CLAIM_FLOOR_WALL_S) -> float:
    """How long a claim lives without renewal, in wall seconds (see the module docstring)."""
    if rule not in CLAIM_RULES:
        raise ValueError(f"unknown claim rule {rule!r}; valid: {', '.join(CLAIM_RULES)}")
    life = float(claim_ttl_s) / float(time_scale)
    return life if rule == "legacy" else max(life, float(floor_wall_s))


@dataclass(slots=True)
class Lease:
    """One open claim."""

    seq: int
    ts: int
    """The CLAIM entry's stamp (board clock, us)."""
    worker: str
    key: str
    text: str
    renewed: int
    """Its holder's latest activity since the claim (board clock, us; `ts` until it did something)."""

    def expires(self, life_us: int) -> int:
        return self.renewed + life_us


class ClaimBook:
    """The open claims, by key and by holder, under one rule (see the module docstring).

    Fed every board entry in order (`entry`) and the holders' forge activity (`touch`); a plain class,
    used by the `Board` (lookups) and by the routers' `Fanout` (overlap pushes). Expired claims are
    dropped when their key or holder is next looked at, so the book holds about one claim per worker.
    """

    def __init__(self, life_s: float, rule: str = "lease") -> None:
        if rule not in CLAIM_RULES:
            raise ValueError(f"unknown claim rule {rule!r}; valid: {', '.join(CLAIM_RULES)}")
        self.rule = rule
        self.life_us = int(life_s * 1e6)
        self.by_key: dict[str, list[Lease]] = {}
        """key -> its open claims, oldest first."""
        self.by_worker: dict[str, list[Lease]] = {}

    @property
    def renews(self) -> bool:
        return self.rule == "lease"

    def set_life(self, life_s: float, rule: str | None = None) -> None:
        if rule is not None:
            if rule not in CLAIM_RULES:
                raise ValueError(f"unknown claim rule {rule!r}; valid: {', '.join(CLAIM_RULES)}")
            self.rule = rule
        self.life_us = int(life_s * 1e6)

    def _close(self, lease: Lease) -> None:
        for index, name in ((self.by_key, lease.key), (self.by_worker, lease.worker)):
            held = index.get(name)
            if held is not None:
                try:
                    held.remove(lease)
                except ValueError:
                    pass
                if not held:
                    del index[name]

    def _expire(self, leases: list[Lease] | None, now_us: int) -> None:
        if leases:
            for lease in [x for x in leases if x.expires(self.life_us) < now_us]:
                self._close(lease)

    def touch(self, worker: str, ts: int) -> None:
        """The holder did something at `ts` (board clock, us): its open claims live on from there (`lease`)."""
        held = self.by_worker.get(worker)
        if not held:
            return
        self._expire(held, ts)  # an expired claim stays expired
        if self.renews:
            for lease in self.by_worker.get(worker, ()):
                if ts > lease.renewed:
                    lease.renewed = ts

    def entry(self, seq: int, ts: int, type: str, text: str, worker: str) -> Lease | None:
        """Track one board entry; returns the claim it opened (a CLAIM), else None."""
        self.touch(worker, ts)
        if type == "CLAIM":
            for old in list(self.by_worker.get(worker, ())):  # one claim at a time: the new one replaces them
                if old.seq < seq:
                    self._close(old)
            key = claim_key(text)
            self._expire(self.by_key.get(key), ts)
            for known in self.by_key.get(key, ()):
                if known.seq == seq:  # (seen already: a router seeded from the board, then replaying)
                    return known
            lease = Lease(seq, ts, worker, key, text, ts)
            self.by_key.setdefault(key, []).append(lease)
            self.by_worker.setdefault(worker, []).append(lease)
            return lease
        if (type == "FAIL" and is_release(text)) or type == "PATCH_SUMMARY":
            key = claim_key(text)
            for lease in list(self.by_worker.get(worker, ())):
                if lease.key == key:
                    self._close(lease)
        return None

    def open_on(self, key: str, now_us: int) -> list[Lease]:
        """The open claims on `key` (as `claim_key` spells it), oldest first."""
        key = claim_key(key)
        self._expire(self.by_key.get(key), now_us)
        return list(self.by_key.get(key, ()))

    def open_all(self, now_us: int) -> list[Lease]:
        """Every open claim, by key, each key's oldest first."""
        for key in list(self.by_key):
            self._expire(self.by_key.get(key), now_us)
        return [lease for key in sorted(self.by_key, key=lambda k: self.by_key[k][0].seq) for lease in self.by_key[key]]

    def __len__(self) -> int:
        return sum(map(len, self.by_key.values()))
