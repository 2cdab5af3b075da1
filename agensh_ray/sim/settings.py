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

It models an LLM agent's time (agensh_ray/sim/steps.py; README "Time"): work
comes in steps (one model call and the tool calls it makes), each of a
lognormal time (median `think_s`, sigma `think_sigma`, schedule seconds) from
the worker's own seeded stream; every wake-up is a step (reading the prompt,
the board and the DMs); a feature of s lines takes ceil(s / lines_per_step)
steps to write; verification is proportional to the change: a builder checks
its own feature, an idle worker checks main only when main changed since the
newest check it made or saw reported, and then only the features touched
since (a sample of `verify_sample` when more). It does not model tokens,
rate limits or a step's time growing with the context.

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
    """What one sim process runs with: the run's `SimConfig`, its seed, and its time scale (schedule s per wall s)."""

    config: SimConfig
    seed: int = 0
    time_scale: float = 1.0

    def wall_s(self, schedule_s: float) -> float:
        """Wall seconds of `schedule_s` schedule seconds."""
        return schedule_s / self.time_scale

    @classmethod
    def from_env(cls) -> SimSettings:
        e = os.environ
        config = SimConfig.model_validate_json(e["AGENSH_SIM_CONFIG"]) if "AGENSH_SIM_CONFIG" in e else SimConfig()
        return cls(config, int(e.get("AGENSH_SIM_SEED", "0")), float(e.get("AGENSH_SIM_TIME_SCALE", "1")))
