"""Pricing a model call: LiteLLM's own `cost_per_token` against the gateway's `PriceTable` over the
same price map (services/gateway/prices.py says why the gateway reads the map itself).

What runs: in a fresh Python process each (with the gateway's modules already imported, as in a
gateway process), `import litellm` and the `PriceTable` load: wall time, and the resident memory
they add; then, in this process, both price the same calls
(a few models, with cache reads and a long-context input) and must agree to 1e-9 USD.

    python bench/gateway_prices.py
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agensh_ray.services.gateway.prices import PriceTable, Usage  # noqa: E402
from bench.common import machine_facts, print_result, say  # noqa: E402

LOAD = """
import json, os, sys, time
{setup}
t = time.perf_counter()
{code}
dt = time.perf_counter() - t
rss = int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
print(json.dumps({{"s": dt, "rss_mib": rss / 2**20}}))
"""
BASELINE = "import json"
CALLS = [
    ("openai", "gpt-4.1", Usage(input_tokens=6500, output_tokens=40, cached_tokens=4096)),
    ("openai", "gpt-4.1-mini", Usage(input_tokens=12000, output_tokens=300)),
    ("anthropic", "claude-sonnet-4-5-20250929", Usage(input_tokens=250_000, output_tokens=900, cached_tokens=200_000)),
    ("anthropic", "claude-haiku-4-5-20251001", Usage(input_tokens=3000, output_tokens=120)),
]


def load(code: str, setup: str = "", runs: int = 3) -> dict:
    """Median wall time of `code` in a fresh interpreter (after `setup`), and its resident memory then."""
    out = []
    for _ in range(runs):
        r = subprocess.run([sys.executable, "-c", LOAD.format(setup=setup, code=code)], capture_output=True, text=True, check=True,
                           env={"LITELLM_LOCAL_MODEL_COST_MAP": "True", "PATH": "/usr/bin:/bin", "HOME": str(Path.home())}, cwd=ROOT)
        out.append(json.loads(r.stdout.strip().splitlines()[-1]))
    return {"s": statistics.median(o["s"] for o in out), "rss_mib": statistics.median(o["rss_mib"] for o in out)}


def per_call_us(fn, n: int) -> float:
    for _ in range(min(n, 200)):  # warm caches
        fn()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n * 1e6


def main() -> None:
    t0 = time.time()
    print(json.dumps({"machine": machine_facts(litellm=importlib.metadata.version("litellm"))}), flush=True)
    # Before this process imports litellm: each load in a fresh interpreter, the gateway's own modules
    # imported first (every gateway process has them; aiohttp among them).
    gateway = "import agensh_ray.services.gateway"
    base = load(BASELINE, gateway)
    lit = load("import litellm", gateway)
    ours = load("from agensh_ray.services.gateway.prices import PriceTable\nPriceTable()", gateway)
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # no network fetch of the map at import
    import litellm
    say(t0, f"load: litellm import {lit['s']:.2f}s, {lit['rss_mib'] - base['rss_mib']:.0f} MiB over the gateway's "
            f"modules; PriceTable {ours['s']:.2f}s, {ours['rss_mib'] - base['rss_mib']:.0f} MiB")

    table = PriceTable()
    lit_us, our_us, worst = [], [], 0.0
    for provider, model, u in CALLS:
        def theirs():
            return sum(litellm.cost_per_token(model=model, custom_llm_provider=provider, prompt_tokens=u.input_tokens,
                                              completion_tokens=u.output_tokens,
                                              cache_read_input_tokens=u.cached_tokens))

        def mine():
            return table.cost(provider, model, u)

        a, b = theirs(), mine()
        worst = max(worst, abs(a - b))
        lit_us.append(per_call_us(theirs, 2000))
        our_us.append(per_call_us(mine, 20000))
        say(t0, f"{provider}/{model}: litellm ${a:.6f} in {lit_us[-1]:.1f} us, PriceTable ${b:.6f} in {our_us[-1]:.2f} us")
    print_result({
        "litellm_import_s": round(lit["s"], 3),
        "litellm_import_rss_mib": round(lit["rss_mib"] - base["rss_mib"], 1),
        "price_table_load_s": round(ours["s"], 3),
        "price_table_rss_mib": round(ours["rss_mib"] - base["rss_mib"], 1),
        "litellm_cost_per_token_us": round(statistics.median(lit_us), 2),
        "price_table_cost_us": round(statistics.median(our_us), 3),
        "max_disagreement_usd": worst,
    })


if __name__ == "__main__":
    main()
