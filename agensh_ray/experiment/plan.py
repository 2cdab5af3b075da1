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
    by_workers:                    # worker count -> overrides of RunConfig fields for its cells (after base,
      64: {time_scale: 4, workers_per_actor: 8}   # before an ablation's): a slower clock, packed hosts

A task may be a generated one, given by the generator's parameters (agensh_ray/task/generate.py):
`generate:features=4N,depth=4,registries=0.25N` ("kN": k times the cell's worker count, rounded up, at least 1;
the seed is the cell's unless `seed=` is given). Each distinct task is written once into EXP/tasks/ (deterministic
from its parameters; `prepare` writes it, or keeps the folder when it already holds these parameters).

The plan sets `task`, `workers`, `seed`, `baseline`, `run_dir`, `run_id` and `overwrite` of each cell itself; `base`
and the ablations may not. Every cell's RunConfig is built and validated when the plan is loaded, so a typo in a
field name fails before anything runs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
import shutil
import time
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from agensh_ray.config import RunConfig
from agensh_ray.task.generate import Params

BASE = "base"
"""The ablation name of the cells that run `base` unchanged."""
PLAN_SETS = frozenset({"task", "workers", "seed", "baseline", "run_dir", "run_id", "overwrite"})
"""RunConfig fields the plan sets per cell (not allowed in `base` or an ablation)."""
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,40}")
SIM_TIME_SCALE = 120.0
"""A sim cell's time scale unless the plan sets one (as `python -m agensh_ray.run` does)."""
GENERATE = "generate:"
"""A task given by the generator's parameters: `generate:features=4N,depth=4,...` (see GenSpec)."""
GEN_KEYS = {"features": "F", "depth": "L", "width": "W", "registries": "R", "helpers": "H", "helper_share": "P",
            "extra_deps": "E", "size_alpha": "A", "size_min": "M", "size_max": "X", "branches": "B", "seed": "S"}
"""The generator's parameters (agensh_ray/task/generate.py Params) and their letters in docs/tasks.md."""
INT_KEYS = frozenset({"features", "depth", "width", "registries", "helpers", "size_min", "size_max", "branches", "seed"})
PER_WORKER_RE = re.compile(r"(\d+(?:\.\d+)?)?N")


class GenSpec:
    """A generated task as a plan names it: `generate:features=4N,depth=4,registries=16`.

    Each value is a number, or for an integer parameter `kN` (k times the cell's worker count, rounded up, at least
    1; `N` alone is 1N). `features` is required; the other parameters default as in `python -m agensh_ray.tasks
    generate`, and `seed` to the cell's seed. `params(workers, seed)` gives the generator's Params of a cell."""

    def __init__(self, spec: str):
        self.spec = spec
        body = spec[len(GENERATE):]
        self.values: dict[str, str] = {}
        for part in filter(None, (x.strip() for x in body.split(","))):
            key, eq, value = part.partition("=")
            key, value = key.strip(), value.strip()
            if not eq or not value:
                raise ValueError(f"{spec}: {part!r} is not key=value")
            if key not in GEN_KEYS:
                raise ValueError(f"{spec}: unknown generator parameter {key!r} (one of {', '.join(GEN_KEYS)})")
            if key in self.values:
                raise ValueError(f"{spec}: {key} given twice")
            per = PER_WORKER_RE.fullmatch(value)
            if per and key not in INT_KEYS:
                raise ValueError(f"{spec}: {key}={value}: only an integer parameter may scale with the workers (kN)")
            if not per:
                try:
                    int(value) if key in INT_KEYS else float(value)
                except ValueError:
                    raise ValueError(f"{spec}: {key}={value} is not a{'n integer' if key in INT_KEYS else ' number'} "
                                     "or kN") from None
            self.values[key] = value
        if "features" not in self.values:
            raise ValueError(f"{spec}: features= is required (a number, or kN: k per worker)")

    def params(self, workers: int, seed: int) -> Params:
        def value(key: str, text: str) -> int | float:
            per = PER_WORKER_RE.fullmatch(text)
            if per:
                return max(1, math.ceil(float(per.group(1) or 1) * workers))
            return int(text) if key in INT_KEYS else float(text)

        kw = {k: value(k, v) for k, v in self.values.items()}
        kw.setdefault("seed", seed)
        p = Params(**kw)
        try:
            p.check()
        except ValueError as exc:
            raise ValueError(f"{self.spec} at {workers} workers: {exc}") from None
        return p

    def slug(self) -> str:
        """The task's part of a cell id: the parameters' letters (docs/tasks.md), e.g. gen-F4N-L4-R16."""
        return "gen-" + "-".join(GEN_KEYS[k] + v.replace(".", "p") for k, v in self.values.items())


def task_folder(out: Path, p: Params) -> Path:
    """Where a generated task is written in the experiment folder: one folder per distinct Params."""
    blob = json.dumps(dataclasses.asdict(p), sort_keys=True)
    return Path(out) / "tasks" / f"genkit-F{p.features}-s{p.seed}-{hashlib.sha1(blob.encode()).hexdigest()[:8]}"


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
    """The task as the plan names it (the config's `task` is the folder of a generated one)."""
    ablation: str
    workers: int
    seed: int
    config: RunConfig
    generate: dict[str, Any] | None = None
    """A generated task's generator parameters (Params as a dict; the folder is config.task), else None."""


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
    by_workers: dict[int, dict[str, Any]] = Field(default_factory=dict)
    """Worker count -> overrides of RunConfig fields for every cell of that count (after `base`, before an
    ablation's): e.g. a slower time scale and more workers per actor for the large counts (dotted keys allowed)."""
    milestones: list[float] = Field(default_factory=lambda: [0.5, 1.0])
    """Score milestones (fractions of the hidden tests) whose schedule time the summary shows."""

    @model_validator(mode="after")
    def _check(self) -> Plan:
        if not NAME_RE.fullmatch(self.name):
            raise ValueError(f"name {self.name!r}: letters, digits, '_' and '-' (not first), at most 41")
        for label in self.ablations:
            if label == BASE or not NAME_RE.fullmatch(label):
                raise ValueError(f"ablation name {label!r}: letters, digits, '_' and '-' (not first), not {BASE!r}")
        counts = set(self.workers) | set(self.ablation_workers or [])
        for n in self.by_workers:
            if n not in counts:
                raise ValueError(f"by_workers {n}: not one of the plan's worker counts ({sorted(counts)})")
        for task in self.tasks:
            if task.startswith(GENERATE):
                GenSpec(task)
        by = [(f"by_workers {n}", o) for n, o in self.by_workers.items()]
        for label, overrides in [(BASE, self.base), *self.ablations.items(), *by]:
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
            gen = GenSpec(task) if task.startswith(GENERATE) else None
            for ablation, overrides, counts in grid:
                for w in counts:
                    for seed in self.seeds:
                        cid = f"{gen.slug() if gen else task_slug(task)}.{ablation}.w{w:03d}.s{seed}"
                        fields = merge(merge(nested(self.base), nested(self.by_workers.get(w, {}))), nested(overrides))
                        if "time_scale" not in fields and fields.get("harness", "sim") == "sim":
                            fields["time_scale"] = SIM_TIME_SCALE
                        params = None
                        if gen:
                            try:
                                params = gen.params(w, seed)
                            except ValueError as exc:
                                raise ValueError(f"cell {cid}: {exc}") from None
                        path = str(task_folder(out, params).absolute()) if params else task
                        fields.update(task=path, workers=w, seed=seed, baseline=self.baseline and w == 1,
                                      run_dir=str((out / "cells").absolute()), run_id=cid, overwrite=True)
                        try:
                            cfg = RunConfig.model_validate(fields)
                        except ValueError as exc:
                            raise ValueError(f"cell {cid}: {exc}") from None
                        cells.append(Cell(id=cid, task=task, ablation=ablation, workers=w, seed=seed, config=cfg,
                                          generate=dataclasses.asdict(params) if params else None))
        return cells


def generate_tasks(cells: list[Cell], say=print) -> None:
    """Write each cell's generated task folder, once per distinct folder; a folder that already holds the same
    parameters (its task.yaml's `agensh.generated`) is kept: the generator is deterministic."""
    from agensh_ray.task.generate import generate

    done: set[str] = set()
    for c in cells:
        if c.generate is None or c.config.task in done:
            continue
        done.add(c.config.task)
        folder, p = Path(c.config.task), Params(**c.generate)
        if _holds(folder, p):
            continue
        if folder.exists():  # a folder of the experiment's own that a stopped generation left half written
            shutil.rmtree(folder)
        t0 = time.monotonic()
        g = generate(p, folder)
        say(f"generated {folder.name}: F={g['features']} L={g['critical_path']} width={g['width']} "
            f"registries={g['registries']} in {time.monotonic() - t0:.1f} s")


def _holds(folder: Path, p: Params) -> bool:
    """Whether `folder` is a whole generated task of these parameters."""
    try:
        meta = (yaml.safe_load((folder / "task.yaml").read_text()) or {}).get("agensh", {}).get("generated", {})
    except (OSError, yaml.YAMLError):
        return False
    want = {"features": p.features, "seed": p.seed, "depth": p.depth, "width": p.width_, "registries": p.registries,
            "helpers": p.helpers_, "helper_share": p.helper_share, "extra_deps": p.extra_deps,
            "size_alpha": p.size_alpha, "size_min": p.size_min, "size_max": p.size_max, "branches": p.branches_}
    return all(meta.get(k) == v for k, v in want.items()) and (folder / "oracle" / "graph.json").is_file()


def task_slug(task: str) -> str:
    """A task name as part of a folder name (programbench:jq.b33 -> programbench-jq.b33)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", Path(task).name if "/" in task else task).strip(".-") or "task"


def load_plan(path: Path) -> Plan:
    """A plan from YAML (or JSON, which is YAML)."""
    data = yaml.safe_load(Path(path).read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a plan is a mapping (name, tasks, workers, seeds, base, ablations)")
    return Plan.model_validate(data)
