"""What the workers and the run have spent, and who may not spend more.

Every call is checked before it goes: a worker at its cap, or any worker once the run is at its
cap, is refused with a message saying which cap and how much was spent (`refusal`). The call
that crosses a cap completes; the next is refused. A worker's calls all go through its node's
gateway, so its spending is counted there; the run's is the sum the `LimitCoordinator` makes of
every gateway's (`set_run_spent`), so a run may pass its cap by what the cluster spends in one sync
interval.
"""

from __future__ import annotations

from dataclasses import dataclass

from agensh_ray.config import BudgetConfig


@dataclass
class Spent:
    tokens: int = 0
    usd: float = 0.0
    unpriced_calls: int = 0
    """Calls whose model has no price: their tokens count, their dollars cannot."""


class Budgets:
    def __init__(self, cfg: BudgetConfig):
        self.cfg = cfg
        self.workers: dict[str, Spent] = {}
        self.local = Spent()
        """What this gateway's calls spent (reported to the coordinator)."""
        self.run = Spent()
        """The whole run's, as the coordinator last summed it (at least this gateway's own)."""
        self.run_refusal: str | None = None

    def charge(self, worker: str, tokens: int, usd: float | None) -> None:
        for s in (self.workers.setdefault(worker, Spent()), self.local, self.run):
            s.tokens += tokens
            if usd is None:
                s.unpriced_calls += 1
            else:
                s.usd += usd
        self._check_run()

    def set_run_spent(self, tokens: int, usd: float, refusal: str | None = None) -> None:
        """The coordinator's sum over every gateway (never below this gateway's own)."""
        self.run.tokens = max(tokens, self.local.tokens)
        self.run.usd = max(usd, self.local.usd)
        self._check_run()
        if refusal and not self.run_refusal:
            self.run_refusal = refusal

    def _check_run(self) -> None:
        if self.run_refusal:
            return
        self.run_refusal = run_refusal(self.cfg, self.run.tokens, self.run.usd)

    def refusal(self, worker: str) -> str | None:
        """Why `worker` may not call a model now, worded for the agent and the trace; None if it may."""
        if self.run_refusal:
            return self.run_refusal
        s = self.workers.get(worker)
        if s is None:
            return None
        c = self.cfg
        if c.worker_usd is not None and s.usd >= c.worker_usd:
            return (f"budget reached: worker {worker} has spent ${s.usd:.4f} of its ${c.worker_usd:g} cap; "
                    "the gateway refuses its model calls and the worker is being stopped")
        if c.worker_tokens is not None and s.tokens >= c.worker_tokens:
            return (f"budget reached: worker {worker} has used {s.tokens:,} tokens of its {c.worker_tokens:,} cap; "
                    "the gateway refuses its model calls and the worker is being stopped")
        return None


def run_refusal(cfg: BudgetConfig, tokens: int, usd: float) -> str | None:
    """The run's cap message once `tokens`/`usd` reach it (shared by the gateways and the coordinator)."""
    if cfg.run_usd is not None and usd >= cfg.run_usd:
        return f"run budget reached: the run has spent ${usd:.4f} of its ${cfg.run_usd:g} cap; the run is winding down"
    if cfg.run_tokens is not None and tokens >= cfg.run_tokens:
        return (f"run budget reached: the run has used {tokens:,} tokens of its {cfg.run_tokens:,} cap; "
                "the run is winding down")
    return None
