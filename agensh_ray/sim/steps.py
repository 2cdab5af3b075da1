"""The sim's clock and its verification plan, as plain functions of the run's seed: how long each step of a
worker takes, how many steps a feature takes to write, and which features an idle worker checks on main.

A step stands for one model call of an LLM agent and the tool calls it makes (read the board and the DMs,
write some lines, run the checks, open a PR). Its time, in schedule seconds, is lognormal: median
`SimConfig.think_s`, `SimConfig.think_sigma` the sigma of its logarithm, cut at `STEP_CAP` times the median
(a model call that long would have timed out and been retried). Each worker draws its steps from its own
stream, `random.Random("<seed>:<worker>:steps")`, apart from the stream of its choices: its n-th step takes the
same time in every run of that seed, whatever it chose before.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Iterable

STEP_CAP = 10.0
"""No step is longer than this many times the median."""


def write_steps(size: int | None, lines_per_step: int) -> int:
    """Steps to write a feature of `size` lines: ceil(size / lines_per_step), at least 1; a feature with no size
    (the bundled textkit's) takes 1."""
    if not size:
        return 1
    return max(1, -(-size // lines_per_step))


class StepClock:
    """One worker's steps: their times (schedule seconds) from its own seeded stream, and a count by kind."""

    def __init__(self, seed: int | str, worker: str, median_s: float, sigma: float):
        self.rng = random.Random(f"{seed}:{worker}:steps")
        self.median_s = median_s
        self.sigma = sigma
        self.count: Counter[str] = Counter()
        """Steps taken, by kind (wake, gather, claim, study, write, helper, verify, fix, merge, resolve, ...)."""

    def draw(self) -> float:
        """The schedule seconds of the next step."""
        if self.median_s <= 0:
            return 0.0
        x = self.median_s * math.exp(self.sigma * self.rng.gauss(0.0, 1.0)) if self.sigma > 0 else self.median_s
        return min(x, STEP_CAP * self.median_s)

    def take(self, kind: str) -> float:
        """Count a step of `kind`; its schedule seconds."""
        self.count[kind] += 1
        return self.draw()

    @property
    def steps(self) -> int:
        return sum(self.count.values())


def features_touched(changed_files: Iterable[str], modules: dict[str, str], helper_users: dict[str, list[str]],
                     shared_paths: Iterable[str]) -> set[str]:
    """The features a change of `changed_files` touches: those whose module changed (`modules`: feature -> its
    module's path) and, when a shared helper file changed, those that use a helper (`helper_users`: feature ->
    the helpers it uses). A registry line comes with its feature's module, so registries are not looked at."""
    files = set(changed_files)
    touched = {f for f, path in modules.items() if path in files}
    if files & set(shared_paths):
        touched |= {f for f, helpers in helper_users.items() if helpers}
    return touched


def verify_plan(touched: Iterable[str], sample: int, rng: random.Random) -> list[str]:
    """The features to check: every one touched, or a seeded sample of `sample` of them when more (0: all)."""
    names = sorted(touched)
    if sample and len(names) > sample:
        return sorted(rng.sample(names, sample))
    return names
