"""An experiment's plan: which runs make it, each a cell of the grid tasks x ablations x worker counts x seeds.

    name: scaling                  # the experiment folder's default name (experiments/<name>)
    tasks: [textkit]
    workers: [1, 2, 4, 8]          # 1 is the single-agent baseline (unless baseline: false)
    seeds: [0, 1]
    base:                          # RunConfig fields every cell shares (agensh_ray/config.py)
      minutes: 240
      time_scale: 120
      sim: {think_s: 20}
    ablations:                     # name -> overrides of RunConfig fields (nested, or dotted keys)
      relevant: {routing.policy: relevant}
      no-board: {board_tools: false}
    ablation_workers: [8]          # the worker counts the ablations run at (default: the largest)

The plan sets `task`, `workers`, `seed`, `baseline`, `run_dir`, `run_id` and `overwrite` of each cell itself; `base`
and the ablations may not. Every cell's RunConfig is built and validated when the plan is loaded, so a typo in a
field name fails before anything runs.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from agensh_ray.config import RunConfig

BASE = "base"
"""The ablation name of the cells that run `base` unchanged."""
PLAN_SETS = frozenset({"task", "workers", "seed", "baseline", "run_dir", "run_id", "overwrite"})
"""RunConfig fields the plan sets per cell (not allowed in `base` or an ablation)."""
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,40}")
SIM_TIME_SCALE = 120.0
"""A sim cell's time scale unless the plan sets one (as `python -m agensh_ray.run` does)."""


def nested(overrides: dict[str, Any]) -> dict[str, Any]:
    """{"routing.policy": "relevant"} -> {"routing": {"policy": "relevant"}} (nested keys kept as they are)."""
    out: dict[str, Any] = {}
    for key, value in overrides.items():
        *parents, last = key.split(".")
        node = out
        for i, p in enumerate(parents):
            child = node.get(p, {})
            if not isinstance(child, dict):
                raise ValueError(f"{key}: {'.'.join(parents[: i + 1])} is a value, not a group of settings")
            node[p] = node = dict(child)  # a copy: the plan's own mapping is never edited
        node[last] = merge(node[last], value) if isinstance(node.get(last), dict) and isinstance(value, dict) else value
    return out


def merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """`b` over `a`, recursively for nested settings."""
    out = dict(a)
    for k, v in b.items():
        out[k] = merge(out[k], v) if isinstance(out.get(k), dict) and isinstance(v, dict) else v
    return out


class Cell(BaseModel):
    """One run of the experiment."""

    id: str
    task: str
    ablation: str
    workers: int
    seed: int
    config: RunConfig


class Plan(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = "experiment"
    """The experiment; its folder is experiments/<name> unless --out says otherwise."""
    tasks: list[str] = Field(default_factory=lambda: ["textkit"], min_length=1)
    """Task names (bundled, a task folder, or programbench:<instance_id>)."""
    workers: list[int] = Field(default_factory=lambda: [1, 8], min_length=1)
    """Worker counts of the base cells."""
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1)
    """Seeds: every (task, ablation, worker count) runs once per seed."""
    baseline: bool = True
    """A 1-worker cell runs the single-agent baseline (`--baseline`: no board, chat or routers, keep going)."""
    base: dict[str, Any] = Field(default_factory=dict)
    """RunConfig fields every cell shares: harness, minutes, time_scale, sim, gateway, routing, ... (dotted keys
    allowed)."""
    ablations: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Named overrides of RunConfig fields, each run at `ablation_workers` (dotted keys allowed)."""
    ablation_workers: list[int] | None = None
    """The worker counts the ablations run at (default: the largest of `workers`)."""
    milestones: list[float] = Field(default_factory=lambda: [0.5, 1.0])
    """Score milestones (fractions of the hidden tests) whose schedule time the summary shows."""

    @model_validator(mode="after")
    def _check(self) -> Plan:
        if not NAME_RE.fullmatch(self.name):
            raise ValueError(f"name {self.name!r}: letters, digits, '_' and '-' (not first), at most 41")
        for label in self.ablations:
            if label == BASE or not NAME_RE.fullmatch(label):
                raise ValueError(f"ablation name {label!r}: letters, digits, '_' and '-' (not first), not {BASE!r}")
        for label, overrides in [(BASE, self.base), *self.ablations.items()]:
            clash = PLAN_SETS & set(nested(overrides))
            if clash:
                raise ValueError(f"{label}: the plan sets {', '.join(sorted(clash))} of every cell itself")
        if len(set(self.seeds)) != len(self.seeds) or len(set(self.workers)) != len(self.workers):
            raise ValueError("seeds and workers must not repeat")
        self.cells(Path("experiments") / self.name)  # every cell's RunConfig valid, or the error says which
        return self

    def cells(self, out: Path) -> list[Cell]:
        """Every cell, in the order they run: per task, the base cells by worker count and seed, then each
        ablation's."""
        out = Path(out)
        ab_workers = self.ablation_workers or [max(self.workers)]
        grid = [(BASE, {}, self.workers)] + [(n, o, ab_workers) for n, o in self.ablations.items()]
        cells = []
        for task in self.tasks:
            for ablation, overrides, counts in grid:
                for w in counts:
                    for seed in self.seeds:
                        cid = f"{task_slug(task)}.{ablation}.w{w:03d}.s{seed}"
                        fields = merge(nested(self.base), nested(overrides))
                        if "time_scale" not in fields and fields.get("harness", "sim") == "sim":
                            fields["time_scale"] = SIM_TIME_SCALE
                        fields.update(task=task, workers=w, seed=seed, baseline=self.baseline and w == 1,
                                      run_dir=str((out / "cells").absolute()), run_id=cid, overwrite=True)
                        try:
                            cfg = RunConfig.model_validate(fields)
                        except ValueError as exc:
                            raise ValueError(f"cell {cid}: {exc}") from None
                        cells.append(Cell(id=cid, task=task, ablation=ablation, workers=w, seed=seed, config=cfg))
        return cells


def task_slug(task: str) -> str:
    """A task name as part of a folder name (programbench:jq.b33 -> programbench-jq.b33)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", Path(task).name if "/" in task else task).strip(".-") or "task"


def load_plan(path: Path) -> Plan:
    """A plan from YAML (or JSON, which is YAML)."""
    data = yaml.safe_load(Path(path).read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a plan is a mapping (name, tasks, workers, seeds, base, ablations)")
    return Plan.model_validate(data)
