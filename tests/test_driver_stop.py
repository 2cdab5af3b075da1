"""How a run stops (marker `faults`): "done" only after real work, the operator's SIGINT/SIGTERM as an
orderly stop with a summary, and no process of the run left after any driver exit, SIGKILL included.

The rules are plain classes tested without Ray (`DoneRule`, `Interrupts`, the reaper on a process tree of
its own); the runs are real: one in-process on the shared Ray instance (a slow first turn that the old rule
took for "done"), and `python -m agensh_ray.run` as a subprocess in its own process group and Ray temp
folder, interrupted or killed mid-run."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import psutil
import pytest

from agensh_ray.config import RunConfig
from agensh_ray.driver import Run
from agensh_ray.errors import ForcedStop
from agensh_ray.paths import PROJECT_ROOT
from agensh_ray.reaper import MARK_ENV
from agensh_ray.stopping import DoneRule, Interrupts, median_turn_s, turn_buckets
from agensh_ray.task import Task
from tests.support import wait_for

pytestmark = [pytest.mark.faults]


# -- the done rule, without Ray -----------------------------------------------------------------------

def status(finished: int, last_turns: list[float] = ()) -> dict:
    return {"finished_turn": finished, **turn_buckets(list(last_turns))}


def test_workers_inside_their_first_turn_are_never_done():
    """The old rule counted a worker that had *started* a turn: a slow first turn looked like a done run."""
    rule = DoneRule(workers=2, idle_nudge_wall_s=5.0)
    assert not any(rule.check(t, status(finished=0), (0, 0, 0), 0, worked=True) for t in range(0, 3600, 5))


def test_a_run_with_nothing_done_is_never_done():
    rule = DoneRule(workers=2, idle_nudge_wall_s=5.0)
    assert not any(rule.check(t, status(2, [1, 1]), (0, 0, 0), 0, worked=False) for t in range(0, 3600, 5))


def test_done_after_the_quiet_period_with_every_turn_finished_and_work_shown():
    rule = DoneRule(workers=2, idle_nudge_wall_s=5.0)  # quiet: 1.5 nudge cycles = 7.5 s
    st = status(2, [0.5, 0.8])
    assert not rule.check(0, st, (3, 2, 0), 0, worked=True)
    assert not rule.check(5, st, (3, 2, 0), 0, worked=True)
    assert not rule.check(7, st, (4, 2, 0), 0, worked=True)  # a new board entry: the quiet starts again
    assert not rule.check(12, st, (4, 2, 0), 0, worked=True)
    assert not rule.check(14, st, (4, 2, 1), 1, worked=True)  # an open PR is work in progress
    assert not rule.check(20, st, (4, 3, 0), 0, worked=True)
    assert rule.check(28, st, (4, 3, 0), 0, worked=True) and rule.quiet_s == 7.5


def test_the_quiet_period_scales_with_the_workers_turn_lengths():
    """Turns of ~100 s (a real agent, or a slow machine): 1.5 nudge cycles of quiet prove nothing."""
    rule = DoneRule(workers=3, idle_nudge_wall_s=5.0)
    st = status(3, [90, 100, 120])
    assert median_turn_s(st) == 128
    assert not rule.check(0, st, (5, 5, 0), 0, worked=True)
    assert not rule.check(200, st, (5, 5, 0), 0, worked=True) and rule.quiet_s == 256
    assert rule.check(256, st, (5, 5, 0), 0, worked=True)


# -- signals, without Ray -----------------------------------------------------------------------------

def test_first_signal_asks_for_a_stop_the_second_forces_it():
    said: list[str] = []
    # pytest-asyncio's runner may hold SIGINT when this runs: restore() puts back whatever was there
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    interrupts = Interrupts(said.append)
    assert interrupts.install()
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        wait_for(lambda: interrupts.requested, 5, "the SIGTERM flag")
        assert interrupts.name == "SIGTERM" and interrupts.exit_code == 143 and "send it again" in said[0]
        with pytest.raises(ForcedStop):
            os.kill(os.getpid(), signal.SIGINT)
            wait_for(lambda: False, 5, "the forced stop")
    finally:
        interrupts.restore()
    assert {s: signal.getsignal(s) for s in before} == before


# -- the reaper, on a process tree of its own ---------------------------------------------------------

FAKE_DRIVER = r"""
import os, subprocess, sys, time
from pathlib import Path
from agensh_ray.reaper import Reaper
out = Path(sys.argv[1])
reaper = Reaper.start(out / "reaper.log")
tree = "import subprocess, time; subprocess.Popen(['sleep', '600']); time.sleep(600)"
child = subprocess.Popen([sys.executable, "-c", tree], start_new_session=True)  # a session of its own
# Orphans the snapshots cannot see as descendants: reparented to init at once (double fork).
subprocess.run(["sh", "-c", f"'{sys.executable}' -c 'import time; time.sleep(600)' {out}/ray-session-x &"])
subprocess.run(["sh", "-c", f"{MARK}={reaper.mark} '{sys.executable}' -c 'import time; time.sleep(600)' &"])
reaper.watch(f"{out}/ray-session-x")
# The run's cgroups (agensh_ray/agent/limits.py): one holding a process of the run, one empty.
from agensh_ray.agent import limits
h = limits.detect()[0]
if h is not None:
    import shlex
    parent = limits.parent_name(f"reaptest-{os.getpid()}")
    for name in ("w001-1", "w002-1"):
        limits.Group(h, parent, name).create(None, 16, None)
    g = limits.Group(h, parent, "w001-1")
    subprocess.run(["sh", "-c", f"{MARK}={reaper.mark} {shlex.join(g.wrap(['sleep', '600']))} &"])
    reaper.cgroups(parent)
    (out / "cgroup").write_text(" ".join(str(d) for d in g.folders))
(out / "ready").write_text(f"{reaper.proc.pid} {reaper.mark}")
time.sleep(600)
""".replace("{MARK}", MARK_ENV)


def _procs_mentioning(text: str, mark: str | None = None) -> list[psutil.Process]:
    """Processes whose command line contains `text`, or whose environment carries the run's `mark`."""
    found = []
    for p in psutil.process_iter():
        try:
            if text in " ".join(p.cmdline()) or (mark and p.environ().get(MARK_ENV) == mark):
                found.append(p)
        except psutil.Error:
            pass
    return found


def reaper_noted(log: Path) -> int:
    lines = [ln for ln in log.read_text().splitlines() if "reaper: noting" in ln] if log.exists() else []
    return int(lines[-1].split("noting ")[1].split()[0]) if lines else 0


def test_the_reaper_kills_the_whole_run_after_a_driver_sigkill_and_nothing_else(tmp_path):
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # not the run's
    driver = subprocess.Popen([sys.executable, "-c", FAKE_DRIVER, str(tmp_path)], cwd=PROJECT_ROOT,
                              start_new_session=True)
    run: list[psutil.Process] = []
    try:
        ready = wait_for(lambda: (tmp_path / "ready").exists() and (tmp_path / "ready").read_text(), 60,
                         "the fake driver's processes")
        reaper_pid, mark = int(ready.split()[0]), ready.split()[1]
        wait_for(lambda: len(psutil.Process(driver.pid).children(recursive=True)) >= 3, 30, "its children")
        run = [p for p in psutil.Process(driver.pid).children(recursive=True) if p.pid != reaper_pid]
        orphans = _procs_mentioning(str(tmp_path / "ray-session-x"), mark)
        in_group = (tmp_path / "cgroup").exists()  # one more, in the run's cgroup
        assert len(orphans) == 2 + in_group and all(p.ppid() != driver.pid for p in orphans)
        run += orphans
        wait_for(lambda: reaper_noted(tmp_path / "reaper.log") >= 2, 30, "the reaper's snapshot")
        driver.kill()
        driver.wait()
        wait_for(lambda: not any(p.is_running() for p in run), 30, "every process of the fake run to be gone")
        wait_for(lambda: not psutil.pid_exists(reaper_pid), 30, "the reaper to exit")
        assert bystander.poll() is None, "the reaper killed a process that was not the run's"
        assert "killed" in (tmp_path / "reaper.log").read_text()
        if (tmp_path / "cgroup").exists():  # the run's cgroups, emptied by the kill, are gone with their parent
            groups = [Path(d) for d in (tmp_path / "cgroup").read_text().split()]
            assert not any(d.exists() or d.parent.exists() for d in groups), groups
            assert "empty cgroup(s)" in (tmp_path / "reaper.log").read_text()
    finally:
        bystander.kill()
        driver.kill()
        for p in run + _procs_mentioning(str(tmp_path / "ray-session-x")):
            try:
                p.kill()
            except psutil.Error:
                pass


# -- a whole run whose first turn is slow -------------------------------------------------------------

@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_slow_first_turn_is_not_done(ray_session, tmp_path):
    """A sim step of 24,000 schedule s takes 100 to 300 wall s at x120: no worker finishes a turn or writes
    anything before the deadline (120 schedule minutes: 60 wall s). The old rule said "the organization
    is done" once both workers had *started* their first turn and 7.5 s passed, with board 0 and 0 PRs;
    now the run goes to its deadline."""
    cfg = RunConfig(workers=2, time_scale=120, minutes=120, run_dir=tmp_path, run_id="slow", seed=3,
                    sim={"think_s": 24_000})
    out = io.StringIO()
    summary = Run(cfg, Task.load("textkit"), out=out).execute()
    text = out.getvalue()
    assert "the organization is done" not in text, text
    assert summary.get("ended") == "deadline", text
    assert summary["board_entries"] == {} and summary["prs_opened"] == 0, text
    assert json.loads((tmp_path / "slow" / "summary.json").read_text())["ended"] == "deadline"


# -- the CLI interrupted or killed mid-run --------------------------------------------------------------

class CliRun:
    """`python -m agensh_ray.run` in its own process group and Ray temp folder; notes every process of the
    run while it lives (the driver's descendants, anything naming its temp folder); kills them all at the
    end whatever happened."""

    def __init__(self, tmp_path: Path, *args: str):
        self.ray_tmp = Path(tempfile.mkdtemp(prefix="agr-", dir="/tmp"))  # short: Ray's socket paths
        self.run_dir = tmp_path / "runs"
        self.log = tmp_path / "driver.log"
        env = {**os.environ, "RAY_TMPDIR": str(self.ray_tmp), "PYTHONUNBUFFERED": "1"}
        with open(self.log, "wb") as f:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "agensh_ray.run", "--workers", "2", "--minutes", "60", "--time-scale", "120",
                 "--no-stop-when-done", "--run-dir", str(self.run_dir), "--run-id", "r", *args],
                cwd=PROJECT_ROOT, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        self.seen: dict[int, psutil.Process] = {}
        self._stop = threading.Event()
        self._watcher = threading.Thread(target=self._watch, daemon=True)
        self._watcher.start()

    def _note(self) -> None:
        try:
            for c in psutil.Process(self.proc.pid).children(recursive=True):
                self.seen.setdefault(c.pid, c)
        except psutil.Error:
            pass
        for p in _procs_mentioning(str(self.ray_tmp)):
            self.seen.setdefault(p.pid, p)

    def _watch(self) -> None:
        while not self._stop.is_set():
            self._note()
            self._stop.wait(0.5)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_running(self) -> None:
        wait_for(lambda: "workers 2/2 up" in self.output() or self.proc.poll() is not None, 300,
                 "both workers up")
        assert self.proc.poll() is None, self.output()

    def alive(self) -> list[str]:
        self._note() if self.proc.poll() is None else None
        late = {p.pid: p for p in _procs_mentioning(str(self.ray_tmp))}
        out = []
        for p in {**self.seen, **late}.values():
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(f"{p.pid} {p.name()} {' '.join(p.cmdline())[:120]}")
            except psutil.Error:
                pass
        return out

    def close(self) -> None:
        self._stop.set()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for p in [*self.seen.values(), *_procs_mentioning(str(self.ray_tmp))]:
            try:
                p.kill()
            except psutil.Error:
                pass
        subprocess.run(["rm", "-rf", str(self.ray_tmp)], check=False)


@pytest.fixture
def cli_run(tmp_path):
    runs: list[CliRun] = []

    def start(*args: str) -> CliRun:
        runs.append(CliRun(tmp_path, *args))
        return runs[-1]

    yield start
    for r in runs:
        r.close()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_sigint_stops_the_run_in_order_and_leaves_no_process(cli_run):
    run = cli_run()
    run.wait_running()
    os.killpg(run.proc.pid, signal.SIGINT)  # as Ctrl-C in its terminal: the whole foreground group
    assert run.proc.wait(timeout=300) == 130, run.output()
    out = run.output()
    assert "Traceback" not in out and "KeyboardInterrupt" not in out, out
    summary = json.loads((run.run_dir / "r" / "summary.json").read_text())
    assert summary["ended"] == "interrupted" and summary["signal"] == "SIGINT", summary
    assert "score" in summary and "prs_merged" in summary  # the whole summary: the stop was orderly
    wait_for(lambda: not run.alive(), 30, "no process of the run left")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_sigkill_of_the_driver_leaves_no_process(cli_run):
    run = cli_run()
    run.wait_running()
    assert len(run.alive()) >= 8, run.alive()  # Ray's daemons, the actors, the agents
    wait_for(lambda: reaper_noted(run.run_dir / "r" / "logs" / "reaper.log") >= 8, 30, "the reaper's snapshot")
    run.proc.send_signal(signal.SIGKILL)
    run.proc.wait(timeout=30)
    try:
        wait_for(lambda: not run.alive(), 30, "no process of the run left")
    except AssertionError:
        raise AssertionError(f"left after 30 s: {run.alive()}") from None


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_second_sigterm_forces_the_stop_and_leaves_no_process(cli_run):
    run = cli_run()
    run.wait_running()
    run.proc.send_signal(signal.SIGTERM)
    wait_for(lambda: "send it again to force the stop" in run.output() or run.proc.poll() is not None, 60,
             "the driver to take the first SIGTERM")
    run.proc.send_signal(signal.SIGTERM)
    assert run.proc.wait(timeout=120) == 143, run.output()
    out = run.output()
    assert "forced stop" in out and "Traceback" not in out, out
    summary = json.loads((run.run_dir / "r" / "summary.json").read_text())
    assert summary["ended"] == "interrupted" and summary["signal"] == "SIGTERM", summary
    assert summary["partial"] is True or "prs_merged" in summary  # the orderly stop may have been quicker
    wait_for(lambda: not run.alive(), 30, "no process of the run left")


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_summary_counts_errors_written_as_the_run_stops_as_the_trace_holds_them(ray_session, tmp_path):
    """Each worker's agent (the scripted ACP agent) fails its first turn only when the run stops it (ACP cancel):
    every turn error is written after the driver's last progress poll. summary.json counts them from the trace."""
    from agensh_ray.analysis.views import connect
    from agensh_ray.config import SandboxConfig

    scripts = tmp_path / "scripts"  # sandboxed agents see their script through a read-only mount
    scripts.mkdir()
    script = scripts / "script.json"
    fail = {"do": "fail", "text": "model gone as the run stopped", "seconds": 600}
    script.write_text(json.dumps({"turns": [[fail]]}))
    harness = f"cmd:{sys.executable} -m agensh_ray.fakes.acp_agent --script {script} --log ~/agent.jsonl"
    cfg = RunConfig(workers=2, time_scale=120, minutes=10, run_dir=tmp_path, run_id="errs", seed=3, harness=harness,
                    sandbox=SandboxConfig(read_only=[scripts]))
    out = io.StringIO()
    summary = Run(cfg, Task.load("textkit"), out=out).execute()
    text = out.getvalue()
    life = connect(tmp_path / "errs").execute(
        "SELECT event, detail FROM lifecycle WHERE worker_id IS NOT NULL").fetchall()
    errors = [d for e, d in life if e == "turn_error"]
    assert len(errors) == 2 and all("model gone as the run stopped" in d for d in errors), (life, text)
    progress = [line for line in text.splitlines() if "turn errors" in line and "| board" in line]
    assert progress and ", 0 turn errors" in progress[-1], text  # its last poll came before them
    assert (summary["turn_errors"], summary["model_errors"], summary["crashes"]) == \
        (2, 2, sum(e == "crashed" for e, _ in life)), text
    assert summary["error_counts_from"] == "trace"
    assert json.loads((tmp_path / "errs" / "summary.json").read_text()) == summary


def test_error_counts_come_from_the_trace_only_when_every_host_s_part_of_it_is_here(tmp_path):
    """A multi-node run without shared storage keeps each host's trace files on its node: counting only the hosts
    whose files are on the driver's machine would be a partial count shown as the whole. Then the summary keeps
    the last progress poll's counts (trace_counts says None)."""
    from agensh_ray.driver.summary import trace_counts
    from agensh_ray.trace import LifecycleRow, TraceWriter

    w = TraceWriter(tmp_path, "host-h000", "r", flush_interval_s=0)
    w.write(LifecycleRow(worker_id="w001", event="started", host="h000"))
    w.write(LifecycleRow(worker_id="w001", event="turn_error", detail="boom", host="h000"))
    w.close()
    assert trace_counts(tmp_path, ["h000"]) == {"turn_errors": 1, "model_errors": 0, "crashes": 0}
    assert trace_counts(tmp_path, ["h000", "h001"]) is None  # h001's rows are on another node
    assert trace_counts(tmp_path / "elsewhere") is None
