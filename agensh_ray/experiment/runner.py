"""Runs an experiment's cells, each as its own `python -m agensh_ray.run --config EXP/configs/<cell>.json` (its own
Ray instance, reaper and run folder EXP/cells/<cell>/), one after another or `parallel` at once.

Resumable: a cell is finished when its run folder holds a summary.json that did not end "interrupted" (nor is
partial); those are skipped, any other is run again from scratch (its folder emptied). What each invocation ran
is in EXP/ledger.jsonl: a `start` and an `end` record per cell with the git commit (and whether the tree had
uncommitted changes), the pid and the exit code. Ctrl-C (SIGINT) or SIGTERM: the running cells get SIGINT (they
stop in order and write an "interrupted" summary), no new cell starts, the summary covers what finished; a
second signal kills the running cells (each run's reaper removes its processes).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from agensh_ray.experiment.plan import Cell, Plan, generate_tasks
from agensh_ray.paths import PROJECT_ROOT


class ExperimentError(Exception):
    """The experiment folder cannot take this plan (it holds another one)."""


def code_version() -> dict:
    """The git commit of the checkout that runs the cells, and whether it had uncommitted changes."""
    def git(*argv: str) -> str:
        try:
            return subprocess.run(["git", "-C", str(PROJECT_ROOT), *argv], capture_output=True, text=True,
                                  timeout=30).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return ""
    return {"commit": git("rev-parse", "HEAD") or None, "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}


def cell_summary(out: Path, cell_id: str) -> dict | None:
    """The cell's summary.json, or None (not run, or unreadable)."""
    try:
        return json.loads((out / "cells" / cell_id / "summary.json").read_text())
    except (OSError, ValueError):
        return None


def finished(out: Path, cell_id: str) -> bool:
    s = cell_summary(out, cell_id)
    return s is not None and s.get("ended") != "interrupted" and not s.get("partial")


class Experiment:
    def __init__(self, plan: Plan, plan_text: str, out: Path, say: Callable[[str], None] | None = None):
        self.plan = plan
        self.plan_text = plan_text
        self.out = Path(out).absolute()
        self.cells = plan.cells(self.out)
        self.say = say or (lambda text: print(text, flush=True))
        self.signum: int | None = None
        self.running: dict[str, tuple[subprocess.Popen, Cell, float]] = {}

    def prepare(self, force: bool = False) -> None:
        """The folder, the plan (refused when the folder holds a different one, unless `force`) and each
        cell's exact RunConfig."""
        self.out.mkdir(parents=True, exist_ok=True)
        kept = self.out / "plan.yaml"
        if kept.exists() and kept.read_text() != self.plan_text and not force:
            raise ExperimentError(f"{self.out} holds another plan (plan.yaml differs): give another --out, or "
                                  "--force to run this plan there")
        kept.write_text(self.plan_text)
        (self.out / "experiment.json").write_text(json.dumps({
            "plan": self.plan.model_dump(mode="json"), "cells": [c.id for c in self.cells], **code_version(),
        }, indent=2))
        (self.out / "configs").mkdir(exist_ok=True)
        (self.out / "logs").mkdir(exist_ok=True)
        generate_tasks([c for c in self.cells if not finished(self.out, c.id)], say=self.say)
        for c in self.cells:  # a finished cell keeps the config it ran with
            path = self.out / "configs" / f"{c.id}.json"
            if not (finished(self.out, c.id) and path.exists()):
                path.write_text(c.config.model_dump_json(indent=2))

    def ledger(self, record: dict) -> None:
        record = {"ts": datetime.now(timezone.utc).isoformat(timespec="seconds"), **record}
        with open(self.out / "ledger.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")

    # -- signals -------------------------------------------------------------------------------
    def _handle(self, signum: int, frame) -> None:
        if self.signum is None:
            self.signum = signum
            self.say(f"{signal.Signals(signum).name}: stopping the running cells in order, starting no new one "
                     "(again to kill them)")
            self._signal_cells(signal.SIGINT)
        else:
            self.say("killing the running cells")
            self._signal_cells(signal.SIGKILL)

    def _signal_cells(self, sig: int) -> None:
        for proc, _, _ in self.running.values():
            try:
                os.killpg(proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    # -- running -------------------------------------------------------------------------------
    def _start(self, cell: Cell, k: int, n: int) -> None:
        log = self.out / "logs" / f"{cell.id}.log"
        argv = [sys.executable, "-m", "agensh_ray.run", "--config", str(self.out / "configs" / f"{cell.id}.json")]
        with open(log, "wb") as f:
            proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, start_new_session=True,
                                    env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.running[cell.id] = (proc, cell, time.time())
        if self.signum is not None:  # a signal came while it was starting: it stops with the others (once)
            try:
                os.killpg(proc.pid, signal.SIGINT)
            except (ProcessLookupError, PermissionError):
                pass
        self.ledger({"cell": cell.id, "event": "start", "pid": proc.pid, **code_version()})
        self.say(f"[{k}/{n}] {cell.id}: started ({cell.workers} worker{'s' if cell.workers > 1 else ''}"
                 f"{', baseline' if cell.config.baseline else ''}, seed {cell.seed}; log {log})")

    def _reap(self) -> int:
        """Note the cells that ended; the number that failed."""
        failed = 0
        for cid, (proc, cell, t0) in list(self.running.items()):
            rc = proc.poll()
            if rc is None:
                continue
            del self.running[cid]
            s = cell_summary(self.out, cid) or {}
            self.ledger({"cell": cid, "event": "end", "pid": proc.pid, "exit_code": rc, "ended": s.get("ended")})
            if finished(self.out, cid):  # its summary is whole (a signal may have hit its teardown after it)
                self.say(f"    {cid}: {s.get('ended')} after {time.time() - t0:.0f} s, score {s.get('score', 0):.1%}, "
                         f"{s.get('prs_merged', 0)} PRs merged, {s.get('merge_conflicts', 0)} conflicts")
            else:
                failed += rc not in (130, 143)
                self.say(f"    {cid}: exit code {rc}" + (f", ended {s['ended']}" if s.get("ended") else "")
                         + f" (log {self.out / 'logs' / (cid + '.log')})")
        return failed

    def run(self, parallel: int = 1, max_cells: int | None = None) -> int:
        """Run the unfinished cells; 0 when all ran, 1 when one failed, 130/143 when interrupted."""
        pending = [c for c in self.cells if not finished(self.out, c.id)]
        done = len(self.cells) - len(pending)
        self.say(f"experiment {self.plan.name}: {len(self.cells)} cells, {done} finished already, {len(pending)} to "
                 f"run{f' ({max_cells} this time)' if max_cells is not None and max_cells < len(pending) else ''}, "
                 f"{parallel} at a time -> {self.out}")
        previous = {s: signal.signal(s, self._handle) for s in (signal.SIGINT, signal.SIGTERM)}
        failed = started = 0
        try:
            while pending or self.running:
                while (self.signum is None and pending and len(self.running) < parallel
                       and (max_cells is None or started < max_cells)):
                    started += 1
                    self._start(pending.pop(0), done + started, len(self.cells))
                if not self.running:
                    break
                time.sleep(0.5)
                failed += self._reap()
        finally:
            for s, h in previous.items():
                signal.signal(s, h)
            if self.running:  # an exception: leave nothing behind
                self._signal_cells(signal.SIGKILL)
        if self.signum is not None:
            return 128 + self.signum
        return 1 if failed else 0
