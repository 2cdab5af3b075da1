"""The model gateway: every agent's model calls go through its node's gateway, which holds the
provider's credential, the cluster-wide limits, the budgets and the count of tokens and cost
(one `llm_calls` trace row per call). The modules, and what each holds, are listed in
services/README.md; `make_gateway` builds one for a run.
"""

from __future__ import annotations

import os
from pathlib import Path

from agensh_ray.agent.harness import get_harness, read_secrets
from agensh_ray.config import RunConfig
from agensh_ray.errors import GatewayError
from agensh_ray.services.gateway.coordinator import GatewayReport, GatewayShares, LimitCoordinator
from agensh_ray.services.gateway.core import Gateway, Request, Responder
from agensh_ray.services.gateway.keys import VirtualKeys
from agensh_ray.services.gateway.prices import PriceTable, Usage
from agensh_ray.services.gateway.server import GatewayServer
from agensh_ray.services.gateway.upstream import Upstream, upstream_of
from agensh_ray.trace import TraceWriter

__all__ = [
    "Gateway", "GatewayReport", "GatewayServer", "GatewayShares", "LimitCoordinator", "PriceTable", "Request",
    "Responder", "Upstream", "Usage", "VirtualKeys", "make_gateway", "unpriced_budget", "upstream_of",
]


def make_gateway(cfg: RunConfig, run_dir: str | Path, run_id: str, secret: bytes, name: str,
                 src: dict[str, str] | None = None) -> Gateway:
    """A run's gateway for one node: the harness's provider as its upstream (its URL and credential read here,
    from `src` or this process's environment and secrets file), the price table, a trace writer."""
    route = get_harness(cfg.harness).model_route
    if route is None:
        raise GatewayError(f"harness {cfg.harness!r} has no model route: the gateway cannot stand in for it")
    upstream = upstream_of(route, src if src is not None else {**os.environ, **read_secrets()})
    prices = PriceTable(override=cfg.gateway.prices)
    trace = TraceWriter(run_dir, f"gateway-{name}", run_id)
    return Gateway(cfg.gateway, VirtualKeys(secret, run_id), {route.provider: upstream}, prices, route=route,
                   trace=trace, name=name)


def unpriced_budget(cfg: RunConfig, prices: PriceTable | None = None) -> str | None:
    """Why a dollar budget cannot work for this run (its model has no price: its calls would cost "unknown",
    never reaching a dollar cap), or None. Token budgets count every call and are not concerned."""
    b = cfg.gateway.budget
    caps = [f"{flag} {v:g}" for flag, v in (("--budget-worker-usd", b.worker_usd), ("--budget-run-usd", b.run_usd))
            if v is not None]
    route = get_harness(cfg.harness).model_route
    if not caps or route is None or not cfg.model:
        return None
    table = prices if prices is not None else PriceTable(override=cfg.gateway.prices)
    if table.entry(route.provider, cfg.model) is not None:
        return None
    where = "LiteLLM's price map" + (f" nor {cfg.gateway.prices}" if cfg.gateway.prices else "")
    return (f"{' and '.join(caps)}: the model {cfg.model!r} ({route.provider}) has no price in {where}, so its calls "
            "cost an unknown amount and a dollar budget could never stop them; give its price with --prices FILE "
            '({"<model>": {"input_cost_per_token": ..., "output_cost_per_token": ...}}) or cap tokens instead '
            "(--budget-worker-tokens, --budget-run-tokens)")
