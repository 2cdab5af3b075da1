"""What makes the limits and the run's budget cluster-wide: one coordinator for every node's gateway.

Each gateway reports, every `sync_interval_s`, its demand per limit (calls waiting or in flight)
and what its calls have spent; it gets back its share of each limit and the run's total spending.
Shares follow demand: a node whose workers wait for room gets more of the provider's rate, an
idle node keeps a small floor so its next call need not wait for a sync. The shares always sum
to one, so the cluster's gateways together stay within the provider's limit (up to one sync of
lag while shares move). Admission itself never waits on the coordinator: a gateway admits
against its local share, so the coordinator adds no latency to a call.

The run's spending is the sum of each gateway's latest report (reports are totals, so a repeated
or lost one does no harm); at the run's cap the coordinator's `signal` says so, the gateways
refuse every call, and the driver winds the run down.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from pydantic import BaseModel, Field

from agensh_ray.config import GatewayConfig
from agensh_ray.services.gateway.budget import run_refusal

IDLE_FLOOR = 0.25
"""An idle gateway's weight, in calls: what keeps its share above zero."""
STALE_SYNCS = 5
"""A gateway silent for this many sync intervals no longer holds a share."""


class GatewayReport(BaseModel):
    name: str
    demand: dict[str, int] = Field(default_factory=dict)
    """Calls waiting or in flight, per limit key."""
    tokens: int = 0
    """Tokens its calls have used in the run so far."""
    usd: float = 0.0
    """Dollars its calls have cost in the run so far."""


class GatewayShares(BaseModel):
    shares: dict[str, float] = Field(default_factory=dict)
    run_tokens: int = 0
    run_usd: float = 0.0
    run_refusal: str | None = None


class LimitCoordinator:
    def __init__(self, cfg: GatewayConfig, clock: Callable[[], float] = time.monotonic):
        self.cfg = cfg
        self.clock = clock
        self.reports: dict[str, tuple[float, GatewayReport]] = {}
        self.refusal: str | None = None

    def sync(self, report: GatewayReport) -> GatewayShares:
        now = self.clock()
        self.reports[report.name] = (now, report)
        live = [r for t, r in self.reports.values() if now - t <= STALE_SYNCS * self.cfg.sync_interval_s]
        if report not in live:
            live.append(report)
        keys = {k for r in live for k in r.demand}
        shares = {}
        for key in keys:
            total = sum(r.demand.get(key, 0) + IDLE_FLOOR for r in live)
            shares[key] = (report.demand.get(key, 0) + IDLE_FLOOR) / total
        tokens, usd = self.spent()
        if self.refusal is None:
            self.refusal = run_refusal(self.cfg.budget, tokens, usd)
        return GatewayShares(shares=shares, run_tokens=tokens, run_usd=usd, run_refusal=self.refusal)

    def spent(self) -> tuple[int, float]:
        reports = [r for _, r in self.reports.values()]
        return sum(r.tokens for r in reports), sum(r.usd for r in reports)

    def signal(self) -> str | None:
        """Set once the run is at its budget cap: the driver winds the run down."""
        return self.refusal

    def status(self) -> dict:
        tokens, usd = self.spent()
        return {"gateways": len(self.reports), "run_tokens": tokens, "run_usd": usd, "run_refusal": self.refusal}
