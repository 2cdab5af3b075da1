"""The board's limits (sizes, visibility, grep bounds) and the compact code of each entry type.

The limits are a pydantic model: they cross to the board actor in its constructor and land in a
run's config. The type codes are what the columnar store keeps per entry (one byte each).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from agensh_ray.board.leases import CLAIM_FLOOR_WALL_S
from agensh_ray.models import EntryType

TYPES: tuple[EntryType, ...] = tuple(EntryType)
"""Entry types by code (the store keeps one byte per entry)."""
TYPE_CODE: dict[str, int] = {t.value: i for i, t in enumerate(TYPES)}
VALID_TYPES = ", ".join(t.value for t in TYPES)
"""The types as a refusal names them."""
CLAIM_CODE = TYPE_CODE[EntryType.CLAIM.value]
CLAIM_BYTE = bytes([CLAIM_CODE])


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
    """A claim's life without renewal, in schedule seconds (`BoardService` turns it into wall seconds with
    `agensh_ray.board.leases.claim_life_wall_s`; a bare `Board` takes it as wall seconds). CLAIMs older than
    that are hidden from `recent()`; grep still finds them; `claims()` lists the open ones by key."""
    claim_rule: Literal["lease", "legacy"] = "legacy"
    """How a claim lives: `lease` (a floor in wall seconds, renewed by its holder's activity) or `legacy`
    (claim_ttl_s / time_scale from its entry, nothing renews it); see agensh_ray/board/leases.py. A run sets
    it from `RunConfig.claims`."""
    claim_floor_wall_s: float = Field(CLAIM_FLOOR_WALL_S, gt=0)
    """Under `lease`: the shortest life of a claim, in wall seconds, whatever the time scale."""
    grep_limit_max: int = 500
    """Upper bound for `grep(limit=...)`."""
    grep_budget_s: float = 3.0
    """Wall seconds after which a grep's caller is answered, at the latest, with an error that says how
    long it ran and how far it got (a pattern without a literal word scans the whole history with the
    regex); its thread stops after the RE2 call it is in."""
    grep_step_work: int = Field(default=2_000_000, ge=1)
    """Work of one grep step, in characters searched by the regex times the size of its RE2 program:
    a search is checked against its budget between steps (the default is about 60 ms of RE2 at its
    slowest, a pattern that defeats its DFA; far less for an ordinary pattern)."""
