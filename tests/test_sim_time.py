"""The sim agent in time (issue 30): lognormal step times from each worker's own seeded stream, steps per feature
that grow with its size, a step for each wake-up, and checks of main in proportion to what changed.

No Ray: the step clock is plain; the turn runs the real `Turn` code on a real git clone of the textkit starter
(its origin a bare repository standing in for the forge), with the real visible checks and the execute-only
reference. The ACP client side is a recorder of the session updates the agent sends (what a host sees), which is
how the checks run are counted."""

from __future__ import annotations

import asyncio
import math
import os
import random
import statistics
import subprocess
from pathlib import Path

import pytest

from agensh_ray.config import SimConfig
from agensh_ray.sim.agent import SimAgent, SimSession
from agensh_ray.sim.settings import SimSettings
from agensh_ray.sim.steps import STEP_CAP, StepClock, features_touched, verify_plan, write_steps
from agensh_ray.sim.turn import Turn
from agensh_ray.task import Task


# -- the step clock -----------------------------------------------------------------------------------------
def test_sim_step_times_have_the_median_and_spread_asked_and_repeat_per_seed():
    clock = StepClock(7, "w001", median_s=40.0, sigma=0.6)
    draws = [clock.draw() for _ in range(20_000)]
    assert 38.0 < statistics.median(draws) < 42.0
    logs = [math.log(x) for x in draws]
    assert 0.57 < statistics.pstdev(logs) < 0.63  # lognormal: ln(step) ~ N(ln 40, 0.6)
    assert max(draws) <= STEP_CAP * 40.0 and min(draws) > 0
    q90 = sorted(draws)[int(0.9 * len(draws))]
    assert 40 * math.exp(0.6 * 1.2) < q90 < 40 * math.exp(0.6 * 1.36)  # heavy right tail: p90 ~ 2.16x the median
    # Deterministic per (seed, worker); each worker its own stream, apart from its choices.
    again = StepClock(7, "w001", 40.0, 0.6)
    assert [again.draw() for _ in range(50)] == draws[:50]
    assert [StepClock(7, "w002", 40.0, 0.6).draw() for _ in range(50)] != draws[:50]
    assert [StepClock(8, "w001", 40.0, 0.6).draw() for _ in range(50)] != draws[:50]
    # sigma 0: every step takes the median; median 0: no waiting at all.
    assert {StepClock(0, "w001", 20.0, 0.0).draw() for _ in range(10)} == {20.0}
    assert StepClock(0, "w001", 0.0, 0.5).take("wake") == 0.0


def test_sim_steps_to_write_a_feature_grow_with_its_size():
    sizes = [1, 9, 10, 11, 45, 100, 333, 1000]
    steps = [write_steps(s, 10) for s in sizes]
    assert steps == [1, 1, 1, 2, 5, 10, 34, 100]
    assert steps == sorted(steps)
    assert write_steps(None, 10) == 1  # textkit's features have no size: one step, as before
    assert write_steps(100, 25) == 4


def test_sim_verification_plan_is_the_touched_features_or_a_seeded_sample():
    modules = {"a": "k/a.py", "b": "k/b.py", "c": "k/c.py"}
    helpers = {"a": ["h1"], "b": [], "c": []}
    assert features_touched(["k/b.py", "k/registry/r00.py"], modules, helpers, ["k/shared.py"]) == {"b"}
    assert features_touched(["k/shared.py"], modules, helpers, ["k/shared.py"]) == {"a"}
    assert verify_plan({"c", "a"}, 4, random.Random(0)) == ["a", "c"]
    many = {f"f{i:03d}" for i in range(100)}
    picked = verify_plan(many, 5, random.Random(3))
    assert len(picked) == 5 and set(picked) <= many and picked == verify_plan(many, 5, random.Random(3))
    assert verify_plan(many, 0, random.Random(3)) == sorted(many)


# -- a turn on a real clone -----------------------------------------------------------------------------------
class Client:
    """The ACP client side: records what the agent reports (messages, tool calls with their titles)."""

    def __init__(self):
        self.updates: list = []

    async def session_update(self, session_id, update, **kwargs):
        self.updates.append(update)

    def titles(self) -> list[str]:
        return [u.title for u in self.updates if getattr(u, "session_update", "") == "tool_call"]

    def checks(self) -> list[list[str]]:
        """The feature names of each run of the visible checks."""
        return [t.split("checks/check.py")[1].split() for t in self.titles() if "checks/check.py" in t]

    def said(self) -> str:
        return "".join(getattr(getattr(u, "content", None), "text", "") for u in self.updates)


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


class Repo:
    """A textkit origin (bare) with a clone to push features to main from, as merges do."""

    def __init__(self, root: Path, task: Task):
        self.task = task
        starter = root / "starter"
        task.materialize_starter(starter)
        self.origin = root / "origin.git"
        git(root, "init", "-q", "--bare", "-b", "main", str(self.origin))
        git(starter, "init", "-q", "-b", "main")
        git(starter, "add", "-A")
        git(starter, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "starter")
        git(starter, "push", "-q", str(self.origin), "main")
        self.pusher = self.clone(root / "pusher")

    def clone(self, dest: Path) -> Path:
        git(dest.parent, "clone", "-q", str(self.origin), str(dest))
        return dest

    def merge(self, *names: str) -> None:
        """Put these features on main (module and registry line), one commit."""
        registry = self.pusher / self.task.registry_path
        for name in names:
            f = next(x for x in self.task.features() if x.name == name)
            (self.pusher / f.module).write_text(self.task.oracle_module(name))
            lines = registry.read_text().splitlines(keepends=True)
            close = max(i for i, line in enumerate(lines) if line.strip() == "}")
            lines.insert(close, f.registry_line.rstrip("\n") + "\n")
            registry.write_text("".join(lines))
        git(self.pusher, "add", "-A")
        git(self.pusher, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", f"Add {' '.join(names)}")
        git(self.pusher, "push", "-q", "origin", "HEAD:main")

    def main_sha(self) -> str:
        return git(self.pusher, "rev-parse", "HEAD").strip()[:12]


@pytest.fixture(scope="module")
def textkit() -> Task:
    return Task.load("textkit")


def sim_turn(tmp_path: Path, repo: Repo, task: Task, **cfg) -> tuple[Turn, Client]:
    """A sim worker (no board, no chat: it reports to its own output) with its clone of `repo`."""
    work = repo.clone(tmp_path / "w001")
    task.build_reference(work / "reference" / task.program)  # as the host puts it in each clone (execute-only)
    config = SimConfig(think_s=0, **cfg)
    agent = SimAgent(SimSettings(config, seed=5), task)
    agent.conn = Client()
    s = SimSession(session_id="s1", cwd=work, mcp_url="http://127.0.0.1:1/mcp", worker="w001",
                   rng=random.Random("5:w001"), clock=StepClock(5, "w001", 0, config.think_sigma),
                   env={**os.environ, "GIT_AUTHOR_NAME": "w001", "GIT_COMMITTER_NAME": "w001",
                        "GIT_AUTHOR_EMAIL": "w001@x", "GIT_COMMITTER_EMAIL": "w001@x"})
    return Turn(agent, s), agent.conn


def test_an_idle_worker_checks_main_only_for_what_changed_since_the_newest_check(tmp_path, textkit):
    """First check: every registered feature; main unchanged: no check; one merge: that feature only; main
    reported checked by a peer: no check; more touched than `verify_sample`: a seeded sample of that many."""
    repo = Repo(tmp_path, textkit)
    repo.merge("upper", "lower", "title")
    turn, client = sim_turn(tmp_path, repo, textkit, verify_sample=0)
    run = asyncio.run

    run(turn.check_main())
    assert client.checks() == [["lower", "title", "upper"]]
    first = repo.main_sha()
    assert f"main {first} passes the visible checks of 3 of 3 feature(s) touched since the start" in client.said()
    assert turn.s.clock.count["verify"] == 1

    run(turn.check_main())  # main has not changed: nothing run, no step
    assert len(client.checks()) == 1 and turn.s.clock.count["verify"] == 1

    repo.merge("reverse")
    run(turn.check_main())
    assert client.checks()[-1] == ["reverse"]
    assert f"touched since main {first}" in client.said()

    repo.merge("wc")  # a peer checked this main and said so (a board FACT or a channel post it read)
    turn.agent._note_events(turn.s, f'#40 FACT w007: "main {repo.main_sha()} passes the visible checks of 1 of 1"')
    run(turn.check_main())
    assert len(client.checks()) == 2 and turn.s.clock.count["verify"] == 2

    repo.merge("sort", "uniq", "tac")
    turn.cfg = SimSettings(SimConfig(think_s=0, verify_sample=2), seed=5)
    run(turn.check_main())
    sampled = client.checks()[-1]
    assert len(sampled) == 2 and set(sampled) <= {"sort", "uniq", "tac"}, sampled


def test_an_idle_wake_costs_a_step_and_no_check_once_main_was_checked(tmp_path, textkit):
    """A worker woken with nothing left to claim (every feature on main) takes one step for the wake (reading its
    prompt, the board, the DMs), checks main once, and on its next wake takes one step and runs nothing."""
    repo = Repo(tmp_path, textkit)
    repo.merge(*[f.name for f in textkit.features()])
    turn, client = sim_turn(tmp_path, repo, textkit)
    asyncio.run(turn.run())
    assert turn.s.clock.count == {"wake": 1, "verify": 1}
    assert len(client.checks()) == 1 and len(client.checks()[0]) == SimConfig().verify_sample
    asyncio.run(Turn(turn.agent, turn.s).run())  # the next wake (a nudge): a step, main unchanged
    assert turn.s.clock.count == {"wake": 2, "verify": 1}
    assert len(client.checks()) == 1
