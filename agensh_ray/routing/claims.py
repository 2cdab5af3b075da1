"""What each worker has claimed, indexed by word: what the `relevant` delivery policy asks of a
board entry ("whose active claim does it touch?") answered from an index, not by scanning every
claim, so it stays cheap at 1,024 workers.

Two texts overlap when they share a distinctive word (`words`: lower-case runs of letters, digits
and underscores, minus `STOP_WORDS`).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

from agensh_ray.models import BoardEntry, EntryType

WORD_RE = re.compile(r"[a-z0-9][a-z0-9_]+")
"""Words of a CLAIM / entry for the `relevant` policy: lower-case runs of two or more letters,
digits or underscores ('textkit/commands/tac.py' -> textkit, commands, tac, py)."""

STOP_WORDS = frozenset(
    """
    a an and are as at be been but by can do does done for from has have he her his how i if in into is it
    its me my no not now of on or our she so than that the their them then there these they this to up us
    was we were what when where which who will with you your all any also only just more most new old one
    two some very via vs
    claim claims claimed claiming mine take taking work working on doing will add adding added fix fixing
    fixed implement implementing implemented build building write writing wrote test tests testing
    file files code module modules function functions command commands subcommand subcommands py src lib
    main branch pr prs patch merge merged
    """.split()
)
"""Words too common to make two things 'overlap' (English function words, the task's verbs)."""


def words(text: str) -> frozenset[str]:
    """The distinctive words of a text (see WORD_RE, minus STOP_WORDS)."""
    return frozenset(WORD_RE.findall(text.lower())) - STOP_WORDS


@dataclass
class Claim:
    words: frozenset[str]
    ts: int
    """Board clock, microseconds (the CLAIM entry's ts)."""


class Claims:
    """The workers' active claims and, per word, the workers whose claim holds it.

    A worker's claim is its latest CLAIM, until it publishes a PATCH_SUMMARY (the caller ages claims
    out by passing the oldest claim time still active to `claimants`). Words held by more than half
    of the claimants (when there are at least 4) are treated as common to the task, not as an overlap.
    """

    def __init__(self) -> None:
        self.by_worker: dict[str, Claim] = {}
        self._index: dict[str, set[str]] = defaultdict(set)

    def __len__(self) -> int:
        return len(self.by_worker)

    def track(self, e: BoardEntry) -> None:
        """Update the claims from one board entry (also used to rebuild them after a restart)."""
        if e.type is EntryType.CLAIM:
            self.drop(e.worker_id)
            c = Claim(words(e.text), e.ts)
            self.by_worker[e.worker_id] = c
            for wd in c.words:
                self._index[wd].add(e.worker_id)
        elif e.type is EntryType.PATCH_SUMMARY:
            self.drop(e.worker_id)

    def drop(self, worker: str) -> None:
        old = self.by_worker.pop(worker, None)
        if old is not None:
            for wd in old.words:
                holders = self._index.get(wd)
                if holders is not None:
                    holders.discard(worker)
                    if not holders:
                        del self._index[wd]

    def claimants(self, text: str, oldest_ts: int) -> set[str]:
        """Workers whose claim, made at `oldest_ts` or later (board clock, us), shares a distinctive
        word with `text`."""
        claims = self.by_worker
        common = max(2, len(claims) // 2) if len(claims) >= 4 else None
        out: set[str] = set()
        for wd in words(text):
            holders = self._index.get(wd)
            if not holders or (common is not None and len(holders) > common):
                continue
            out.update(w for w in holders if claims[w].ts >= oldest_ts)
        return out
