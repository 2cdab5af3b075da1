"""The sim agent's behaviour knobs, in one place: what a `sim` experiment
models and what it does not.

The sim stands in for an LLM-driven coding CLI. It models the organisation's
mechanics faithfully: real ACP, real MCP tool calls to the board, chat and
forge, real git (branches, pushes, PRs, merge conflicts in the shared registry
file, resolved by merging main), the task's visible checks, claims settled by
DM (the earlier claim wins), FAIL/FACT/OBSERVED/PATCH_SUMMARY entries. It does
NOT model reasoning: which feature to take and whether an attempt is buggy are
seeded random draws, the code comes from the task's oracle (only this harness
reads it), and "thinking" is a sleep. So a sim run measures the coordination
machinery (collisions, conflicts, delivery, merge throughput), not the quality
of an agent's work.

The knobs are the run config's `SimConfig` (agensh_ray.config: every field
documented there); the worker host hands it to the sim process whole
(AGENSH_SIM_CONFIG, JSON) with the run's seed and time scale.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from agensh_ray.config import SimConfig


@dataclass(frozen=True)
class SimSettings:
    """What one sim process runs with: the run's `SimConfig`, its seed, and thinking time in wall seconds."""

    config: SimConfig
    seed: int = 0
    time_scale: float = 1.0

    @property
    def think_s(self) -> float:
        """Wall seconds per step."""
        return self.config.think_s / self.time_scale

    @classmethod
    def from_env(cls) -> SimSettings:
        e = os.environ
        config = SimConfig.model_validate_json(e["AGENSH_SIM_CONFIG"]) if "AGENSH_SIM_CONFIG" in e else SimConfig()
        return cls(config, int(e.get("AGENSH_SIM_SEED", "0")), float(e.get("AGENSH_SIM_TIME_SCALE", "1")))
