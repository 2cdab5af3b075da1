"""What a model call costs: LiteLLM's model price map, and a user's override file that wins.

The map is the JSON LiteLLM maintains and ships in its package
(``litellm/model_prices_and_context_window_backup.json``, ~4,900 models, USD per token, with
cache-read, cache-write and long-context tiers); ``pip install -U litellm`` refreshes it. It is
read as a file. bench/gateway_prices.py measured on this project's 2-core machine (litellm 1.110.2,
a load average of 24): importing litellm took 10.5 s and 158 MiB per gateway process (with no network
fetch of the map), and its `cost_per_token` took ~107 us a call. The formula below reads the same
fields in ~3.9 us and gives the same dollars.

An override file is a JSON object in the same format (``{"my-model": {"input_cost_per_token":
1e-6, "output_cost_per_token": 2e-6}}``); its entries replace the map's for those models.

Tokens follow the OpenAI convention (what LiteLLM prices by too): `input_tokens` counts every
input token, cache reads and cache writes included; `cached_tokens` and `cache_write_tokens` are
the parts of it billed at the cache prices.
"""

from __future__ import annotations

import importlib.util
import json
import re
from dataclasses import dataclass
from pathlib import Path

from agensh_ray.errors import GatewayError

LITELLM_MAP = "model_prices_and_context_window_backup.json"
TIER_RE = re.compile(r"^input_cost_per_token_above_(\d+)k_tokens$")


@dataclass(frozen=True)
class Usage:
    """Tokens of one model call, as the provider counted them (normalised: see the module doc)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens


def litellm_map_path() -> Path:
    """The price map inside the installed litellm package (found without importing litellm)."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        raise GatewayError("the model price map comes from the litellm package: pip install litellm")
    path = Path(list(spec.submodule_search_locations)[0]) / LITELLM_MAP
    if not path.is_file():
        raise GatewayError(f"litellm is installed but has no {LITELLM_MAP} (at {path})")
    return path


def load_map(path: Path) -> dict[str, dict]:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise GatewayError(f"price file {path}: {exc}") from None
    if not isinstance(data, dict):
        raise GatewayError(f"price file {path}: expected a JSON object of model -> prices")
    for model, entry in data.items():
        if not isinstance(entry, dict):
            raise GatewayError(f"price file {path}: the entry of {model!r} is not an object")
    return data


class PriceTable:
    """USD per call by the model actually called. ``cost`` is None when no table knows the model."""

    def __init__(self, override: Path | None = None, base: Path | None = None):
        self.source = str(base or litellm_map_path())
        self._map = load_map(Path(self.source))
        self._map.pop("sample_spec", None)
        self.override = str(override) if override else None
        if override:
            for model, entry in load_map(Path(override)).items():
                self._map[model] = entry
        self._cache: dict[tuple[str, str], dict | None] = {}

    def entry(self, provider: str, model: str) -> dict | None:
        """The prices of `model` as `provider` serves it: `provider/model`, then `model`, then without a
        date suffix (`claude-x-20250929` -> `claude-x`) or a vendor prefix (`openai/gpt-4.1`)."""
        key = (provider, model)
        if key not in self._cache:
            found = None
            bare = model.split("/", 1)[1] if "/" in model else model
            for name in (f"{provider}/{model}", model, bare, re.sub(r"-\d{8}$", "", bare)):
                e = self._map.get(name)
                if e is not None and ("input_cost_per_token" in e or "output_cost_per_token" in e):
                    found = e
                    break
            self._cache[key] = found
        return self._cache[key]

    def cost(self, provider: str, model: str, usage: Usage) -> float | None:
        e = self.entry(provider, model)
        if e is None:
            return None
        tier = _tier(e, usage.input_tokens)
        p_in = e.get(f"input_cost_per_token{tier}", e.get("input_cost_per_token", 0.0)) or 0.0
        p_out = e.get(f"output_cost_per_token{tier}", e.get("output_cost_per_token", 0.0)) or 0.0
        p_read = e.get(f"cache_read_input_token_cost{tier}", e.get("cache_read_input_token_cost", p_in))
        p_write = e.get(f"cache_creation_input_token_cost{tier}", e.get("cache_creation_input_token_cost", p_in))
        plain = max(0, usage.input_tokens - usage.cached_tokens - usage.cache_write_tokens)
        return (plain * p_in + usage.cached_tokens * (p_read if p_read is not None else p_in)
                + usage.cache_write_tokens * (p_write if p_write is not None else p_in) + usage.output_tokens * p_out)


def _tier(entry: dict, input_tokens: int) -> str:
    """The long-context suffix (`_above_200k_tokens`) whose threshold the call's input passes, else ""."""
    best = 0
    for k in entry:
        m = TIER_RE.match(k)
        if m and input_tokens > int(m.group(1)) * 1000:
            best = max(best, int(m.group(1)))
    return f"_above_{best}k_tokens" if best else ""
