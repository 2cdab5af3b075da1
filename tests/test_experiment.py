"""An experiment end to end (marker `experiment`): a 2x2 plan (the single-agent baseline and 2 workers, 2
seeds) with short runs, interrupted with SIGINT once its first cell finished, then resumed: exactly the
remaining cells run, the first is left alone, and the tables have a row per cell and per worker count.

`python -m agensh_ray.experiment` runs as a subprocess, and each cell as its own `python -m agensh_ray.run` with
its own Ray instance (in a Ray temp folder of this test's); every process that names that folder or descends
from the experiment is killed at the end, whatever happened. Plus the plan's rules, without running anything."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest

from agensh_ray.experiment.plan import Plan, load_plan
from agensh_ray.paths import PROJECT_ROOT
from tests.support import wait_for

PLAN = """\
name: resume
tasks: [textkit]
workers: [1, 2]
seeds: [0, 1]
base:
  minutes: 30
  time_scale: 240
  launch_interval_s: 0
  score_every_s: 3600
"""
CELLS = ["textkit.base.w001.s0", "textkit.base.w001.s1", "textkit.base.w002.s0", "textkit.base.w002.s1"]
COLUMNS = {"cell", "workers", "seed", "baseline", "ended", "score", "resolved", "t50_s", "t100_s", "merges",
           "conflicts", "dms", "claims_colliding", "claims_settled", "cost_usd", "cost_per_point"}


# -- the plan, without running anything ------------------------------------------------------------------

def test_a_plan_makes_one_validated_runconfig_per_cell(tmp_path):
    plan = Plan(workers=[1, 4], seeds=[0, 1], base={"minutes": 60, "sim.think_s": 5},
                ablations={"relevant": {"routing.policy": "relevant"}, "no-nudge": {"routing": {"nudge": False}}},
                ablation_workers=[4])
    cells = {c.id: c for c in plan.cells(tmp_path)}
    assert len(cells) == 2 * 2 + 2 * 2
    one = cells["textkit.base.w001.s1"].config
    assert one.baseline and one.seed == 1 and one.sim.think_s == 5 and one.time_scale == 120  # the sim's default
    assert cells["textkit.relevant.w004.s0"].config.routing.policy == "relevant"
    assert not cells["textkit.no-nudge.w004.s1"].config.routing.nudge
    assert all(c.config.run_dir == tmp_path.absolute() / "cells" and c.config.run_id == c.id for c in cells.values())


@pytest.mark.parametrize("bad, why", [
    ({"base": {"workerz": 2}}, "workerz"),
    ({"base": {"seed": 2}}, "sets seed"),
    ({"ablations": {"base": {}}}, "ablation name"),
    ({"ablations": {"x": {"routing.policy": "some"}}}, "policy"),
    ({"seeds": [1, 1]}, "repeat"),
    ({"ablations": {"x": {"routing": 3, "routing.policy": "all"}}}, "routing is a value, not a group"),
])
def test_a_bad_plan_is_refused_before_anything_runs(bad, why):
    with pytest.raises(ValueError, match=why):
        Plan.model_validate(bad)


def test_the_plan_file_is_yaml(tmp_path):
    (tmp_path / "p.yaml").write_text(PLAN)
    assert [c.id for c in load_plan(tmp_path / "p.yaml").cells(tmp_path)] == CELLS


def test_a_generated_task_per_worker_count_and_settings_by_worker_count(tmp_path):
    plan = Plan(tasks=["generate:features=4N,depth=4,registries=0.25N"], workers=[1, 8, 64], seeds=[3],
                base={"minutes": 60, "time_scale": 60}, by_workers={64: {"time_scale": 2, "workers_per_actor": 8}},
                ablations={"one-router": {"routing.routers": 1, "time_scale": 1}}, ablation_workers=[64])
    cells = {c.id: c for c in plan.cells(tmp_path)}
    assert list(cells) == ["gen-F4N-L4-R0p25N.base.w001.s3", "gen-F4N-L4-R0p25N.base.w008.s3",
                           "gen-F4N-L4-R0p25N.base.w064.s3", "gen-F4N-L4-R0p25N.one-router.w064.s3"]
    w8, w64 = cells["gen-F4N-L4-R0p25N.base.w008.s3"], cells["gen-F4N-L4-R0p25N.base.w064.s3"]
    assert (w8.generate["features"], w8.generate["registries"], w8.generate["seed"]) == (32, 2, 3)
    assert (w64.generate["features"], w64.generate["registries"]) == (256, 16)
    assert (w8.config.time_scale, w8.config.workers_per_actor) == (60, 1)
    assert (w64.config.time_scale, w64.config.workers_per_actor) == (2, 8)
    ab = cells["gen-F4N-L4-R0p25N.one-router.w064.s3"].config  # the ablation's own settings win
    assert (ab.time_scale, ab.workers_per_actor, ab.routing.routers) == (1, 8, 1)
    assert ab.task == w64.config.task and Path(w64.config.task).parent == tmp_path.absolute() / "tasks"
    assert w8.config.task != w64.config.task


def test_an_experiment_writes_its_generated_tasks_once(tmp_path):
    from agensh_ray.experiment.plan import generate_tasks
    from agensh_ray.task import Task

    plan = Plan(tasks=["generate:features=2N,depth=2,seed=5"], workers=[2, 4], seeds=[0, 1])
    cells = plan.cells(tmp_path)
    said: list[str] = []
    generate_tasks(cells, say=said.append)
    assert len(said) == 2 and len(list((tmp_path / "tasks").iterdir())) == 2  # one per worker count, not per seed
    four = Path(cells[-1].config.task)
    assert Task.load(str(four)).instance["agensh"]["generated"]["features"] == 8
    before = (four / "oracle" / "graph.json").stat().st_mtime_ns
    generate_tasks(cells, say=said.append)  # kept: the same parameters
    assert len(said) == 2 and (four / "oracle" / "graph.json").stat().st_mtime_ns == before
    (four / "oracle" / "graph.json").unlink()  # half written: written again
    generate_tasks(cells, say=said.append)
    assert len(said) == 3 and (four / "oracle" / "graph.json").is_file()


@pytest.mark.parametrize("bad, why", [
    ({"tasks": ["generate:depth=4"]}, "features= is required"),
    ({"tasks": ["generate:features=4N,colour=2"]}, "unknown generator parameter 'colour'"),
    ({"tasks": ["generate:features=4N,helper_share=2N"]}, "only an integer parameter"),
    ({"tasks": ["generate:features=lots"]}, "features=lots is not an integer"),
    ({"tasks": ["generate:features=4N,depth=16"], "workers": [1]}, "depth must be between 1 and F=4"),
    ({"workers": [1, 8], "by_workers": {16: {"time_scale": 2}}}, "by_workers 16: not one of"),
    ({"workers": [8], "by_workers": {8: {"workers": 2}}}, "sets workers"),
    ({"workers": [8], "by_workers": {8: {"time_scale": -1}}}, "time_scale must be positive"),
])
def test_a_bad_generated_task_or_by_workers_is_refused(bad, why):
    with pytest.raises(ValueError, match=why):
        Plan.model_validate(bad)


def test_every_sim_knob_and_plan_field_is_documented_in_docs_experiments():
    from agensh_ray.config import SimConfig
    from agensh_ray.paths import DOCS_DIR

    doc = (DOCS_DIR / "experiments.md").read_text()
    missing = [f for f in [*SimConfig.model_fields, *Plan.model_fields] if f"`{f}`" not in doc and f"{f}:" not in doc]
    assert not missing, missing


# -- interrupted and resumed ------------------------------------------------------------------------------

def ledger(exp: Path) -> list[dict]:
    return [json.loads(line) for line in (exp / "ledger.jsonl").read_text().splitlines()]


class Processes:
    """Every process of the experiment: its descendants while it lives, anything naming the Ray temp folder."""

    def __init__(self, ray_tmp: Path):
        self.ray_tmp = str(ray_tmp)
        self.seen: dict[int, psutil.Process] = {}

    def note(self, pid: int) -> None:
        try:
            for c in psutil.Process(pid).children(recursive=True):
                self.seen.setdefault(c.pid, c)
        except psutil.Error:
            pass

    def kill_all(self) -> None:
        for p in psutil.process_iter():
            try:
                if self.ray_tmp in " ".join(p.cmdline()):
                    self.seen.setdefault(p.pid, p)
            except psutil.Error:
                pass
        for p in self.seen.values():
            try:
                p.kill()
            except psutil.Error:
                pass


@pytest.mark.experiment
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_an_interrupted_experiment_resumes_with_exactly_the_remaining_cells(tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN)
    exp = tmp_path / "exp"
    ray_tmp = Path(tempfile.mkdtemp(prefix="agx-", dir="/tmp"))  # short: Ray's socket paths
    env = {**os.environ, "RAY_TMPDIR": str(ray_tmp), "PYTHONUNBUFFERED": "1"}
    argv = [sys.executable, "-m", "agensh_ray.experiment", str(plan), "--out", str(exp)]
    procs = Processes(ray_tmp)
    log = tmp_path / "first.log"
    try:
        with open(log, "wb") as f:
            first = subprocess.Popen(argv, cwd=PROJECT_ROOT, env=env, stdout=f, stderr=subprocess.STDOUT,
                                     start_new_session=True)

        def second_cell_started() -> bool:
            procs.note(first.pid)
            started = (exp / "ledger.jsonl").exists() and [r["cell"] for r in ledger(exp) if r["event"] == "start"]
            return (started and started[-1] == CELLS[1]) or first.poll() is not None

        wait_for(second_cell_started, 400, "the first cell to finish and the second to start")
        assert first.poll() is None, log.read_text()
        done_at = (exp / "cells" / CELLS[0] / "summary.json").stat().st_mtime_ns
        first.send_signal(signal.SIGINT)  # as Ctrl-C: the experiment stops its running cell in order
        assert first.wait(timeout=180) == 130, log.read_text()
        out = log.read_text()
        assert "SIGINT" in out and "Traceback" not in out, out
        before = ledger(exp)
        assert [r["cell"] for r in before if r["event"] == "start"] == CELLS[:2]
        assert all(r["commit"] for r in before if r["event"] == "start")
        finished = [c for c in CELLS if (exp / "cells" / c / "summary.json").exists()
                    and json.loads((exp / "cells" / c / "summary.json").read_text())["ended"] != "interrupted"]
        assert finished == [CELLS[0]], out

        second = subprocess.run(argv, cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=600)
        assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-4000:]
        assert "1 finished already, 3 to run" in second.stdout, second.stdout
        ran = [r["cell"] for r in ledger(exp)[len(before):] if r["event"] == "start"]
        assert ran == CELLS[1:], ran  # exactly the remaining cells, once each
        assert (exp / "cells" / CELLS[0] / "summary.json").stat().st_mtime_ns == done_at  # left alone
        for c in CELLS:
            assert json.loads((exp / "configs" / f"{c}.json").read_text())["run_id"] == c
            assert json.loads((exp / "cells" / c / "summary.json").read_text())["run_id"] == c

        with open(exp / "cells.csv") as f:
            rows = list(csv.DictReader(f))
        assert [r["cell"] for r in rows] == CELLS and COLUMNS <= set(rows[0]), rows
        assert [r["baseline"] for r in rows] == ["True", "True", "False", "False"]
        with open(exp / "summary.csv") as f:
            groups = list(csv.DictReader(f))
        assert [(g["workers"], g["seeds"]) for g in groups] == [("1", "2"), ("2", "2")]
        for key in ("score_mean", "score_sd", "resolved_pct", "t100_s_mean", "merges_mean", "conflicts_mean",
                    "dms_mean", "claims_settled_mean", "cost_per_point_mean"):
            assert key in groups[0]
        table = (exp / "summary.md").read_text()
        assert "| 1 (baseline) | 2 |" in table and "4 of 4 cells finished" in table
        # The summary is rebuilt from the run folders alone.
        (exp / "summary.md").unlink()
        again = subprocess.run([*argv, "--summarize-only"], cwd=PROJECT_ROOT, env=env, capture_output=True,
                               text=True, timeout=300)
        assert again.returncode == 0 and (exp / "summary.md").read_text() == table, again.stderr[-3000:]
    finally:
        if "first" in locals() and first.poll() is None:
            first.kill()
        procs.kill_all()
        subprocess.run(["rm", "-rf", str(ray_tmp)], check=False)


PARALLEL_PLAN = """\
name: parallel
tasks: [textkit]
workers: [2]
seeds: [0, 1]
base:
  minutes: 60
  time_scale: 240
  launch_interval_s: 0
  score_every_s: 3600
  address: "{address}"
  queue: true
  ship_code: false
"""


@pytest.mark.experiment
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_cells_at_once_on_a_cluster_never_hold_more_slots_than_it_has(tmp_path):
    """Two 2-worker cells with --parallel 2 on a one-node cluster of 3 agent slots: each cell's driver reserves its
    slots as one placement group, so one runs and the other waits for it (saying so), then runs; both finish,
    and no turn of the second came before the first's last one."""
    from agensh_ray.analysis.views import connect
    from tests.multinode import QUIET_ENV, LocalCluster

    with LocalCluster() as cluster:
        cluster.start_head({"agent_slot": 3})
        cluster.wait_for_nodes()
        plan = tmp_path / "plan.yaml"
        plan.write_text(PARALLEL_PLAN.format(address=cluster.address))
        exp = tmp_path / "exp"
        procs = Processes(cluster.root)  # the cells' drivers, in process groups of their own
        with open(tmp_path / "exp.log", "wb") as f:
            proc = subprocess.Popen([sys.executable, "-m", "agensh_ray.experiment", str(plan), "--out", str(exp),
                                     "--parallel", "2"], cwd=PROJECT_ROOT, env={**os.environ, **QUIET_ENV},
                                    stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_for(lambda: procs.note(proc.pid) or proc.poll() is not None, 500, "the experiment to end")
        finally:
            if proc.poll() is None:
                proc.kill()
            procs.kill_all()
    cells = ["textkit.base.w002.s0", "textkit.base.w002.s1"]
    assert proc.returncode == 0, (tmp_path / "exp.log").read_text()[-6000:]
    logs = {c: (exp / "logs" / f"{c}.log").read_text() for c in cells}
    waited = [c for c in cells if "waiting for 2 agent slots (1 free of 3" in logs[c]]
    assert len(waited) == 1, logs
    second = waited[0]
    first = next(c for c in cells if c != second)
    assert "2 agent slots reserved for 2 WorkerActors after" in logs[second], logs[second]
    for c in cells:
        assert json.loads((exp / "cells" / c / "summary.json").read_text())["ended"] in ("done", "deadline")
    (last_of_first,), = connect(exp / "cells" / first).execute("SELECT max(epoch_us(ts)) FROM turns").fetchall()
    (first_of_second,), = connect(exp / "cells" / second).execute("SELECT min(epoch_us(ts)) FROM turns").fetchall()
    assert first_of_second > last_of_first, "the cells' workers ran at the same time on 3 slots"
