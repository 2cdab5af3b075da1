"""The run's reaper: no process of a run outlives its driver, however the driver ends (SIGKILL included).

Why: the driver starts Ray itself (`ray.init(address="local")`). Ray binds its GCS and raylet to the
driver (the kernel's parent-death signal), but the raylet's children outlive them: the dashboard agent
and the runtime-env agent linger about two minutes after a driver SIGKILL, an actor's agent processes
(their own sessions) and sandboxes until their pipes break, a checkpoint's scoring sandbox until its
tests end. Ray offers nothing to reap a local instance's processes when its driver is killed (`ray stop`
kills every Ray process on the machine, other people's included).

How: the driver starts `python -m agensh_ray.reaper` in a session of its own (a Ctrl-C to the driver's
terminal does not reach it) before `ray.init`. While the driver lives, the reaper notes every descendant
of the driver (pid and start time) once a second, and the driver tells it its Ray session folder on
stdin. Once the driver is gone (its pid ended, or a zombie), the reaper takes this run's processes:

- the descendants it noted, still alive with the same start time (never a reused pid);
- any process whose command line names the run's Ray session folder (Ray's daemons carry it);
- any process whose environment carries the run's mark (`AGENSH_RUN_MARK`, a random token the driver
  sets while Ray starts, so Ray's daemons and the workers they start inherit it);

stops them all (SIGSTOP, so none forks or restarts another meanwhile), adds their children the same way
until nothing new appears, then kills them (SIGKILL) and writes what it did to `<run>/logs/reaper.log`.
Then it removes the run's cgroups the driver named (`agensh-<run id>`, agensh_ray/agent/limits.py): empty
ones only (the kernel refuses to remove a group that still holds a task), so a group of a process it did not
kill stays. Nothing else is ever touched: not other runs, not other Ray instances on the machine.
"""

from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from agensh_ray.agent.limits import PARENT_PREFIX, remove_empty

MARK_ENV = "AGENSH_RUN_MARK"
SNAPSHOT_S = 1.0
"""How often the reaper notes the driver's descendants (wall seconds)."""
WAIT_GONE_S = 10.0
"""How long the reaper waits for the killed processes to be gone before it exits."""


class Reaper:
    """The driver's side: starts the reaper process and tells it what to look for."""

    def __init__(self, proc: subprocess.Popen, mark: str):
        self.proc = proc
        self.mark = mark

    @classmethod
    def start(cls, log: Path) -> Reaper:
        mark = secrets.token_hex(12)
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "agensh_ray.reaper", "--pid", str(os.getpid()), "--mark", mark],
                stdin=subprocess.PIPE, stdout=out, stderr=out, start_new_session=True,
            )
        return cls(proc, mark)

    def watch(self, text: str) -> None:
        """Also reap any process whose command line contains `text` (the run's Ray session folder)."""
        try:
            self.proc.stdin.write(f"path {text}\n".encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError, OSError):  # the reaper is gone: nothing to tell it
            pass

    def cgroups(self, parent: str) -> None:
        """Also remove the run's empty cgroups under `parent` (agensh_ray/agent/limits.py) once it reaped."""
        try:
            self.proc.stdin.write(f"cgroup {parent}\n".encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            pass

    def marked_env(self) -> dict[str, str]:
        """The variable that marks this run's processes, for the environment Ray's daemons start with."""
        return {MARK_ENV: self.mark}


# -- the reaper process -----------------------------------------------------------------------------

def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _same(pid: int, started: float) -> psutil.Process | None:
    """The process `pid` if it is still the one that started at `started` (not a reused pid)."""
    try:
        p = psutil.Process(pid)
        return p if p.create_time() == started else None
    except psutil.Error:
        return None


class Watch:
    """What the reaper knows of one driver's run, and the reaping."""

    def __init__(self, driver_pid: int, mark: str | None, say=print):
        self.driver_pid = driver_pid
        self.mark = mark
        self.paths: list[str] = []
        self.cgroups: list[str] = []
        self.known: dict[int, float] = {}
        self.me = os.getpid()
        self.say = say
        self._snapshots = 0
        self._reported = 0

    def snapshot(self, driver: psutil.Process) -> None:
        """Note the driver's descendants; forget noted ones that are gone (a run starts many short ones)."""
        try:
            children = driver.children(recursive=True)
        except psutil.Error:
            return
        for c in children:
            try:
                if c.pid != self.me:
                    self.known.setdefault(c.pid, c.create_time())
            except psutil.Error:
                pass
        self._snapshots += 1
        if self._snapshots % 10 == 0:
            self.known = {pid: t for pid, t in self.known.items() if _same(pid, t)}
        if len(self.known) >= 2 * self._reported:  # a line per doubling: the log stays short
            self._reported = max(1, len(self.known))
            self.say(f"reaper: noting {len(self.known)} processes of driver {self.driver_pid}")

    def _ours(self, p: psutil.Process) -> bool:
        try:
            if self.paths:
                cmd = " ".join(p.cmdline())
                if any(path in cmd for path in self.paths):
                    return True
            if self.mark:
                return p.environ().get(MARK_ENV) == self.mark
        except psutil.Error:
            pass
        return False

    def targets(self) -> dict[int, psutil.Process]:
        found: dict[int, psutil.Process] = {}
        for pid, started in self.known.items():
            if (p := _same(pid, started)) is not None:
                found[pid] = p
        for p in psutil.process_iter():
            if p.pid not in found and p.pid != self.me and self._ours(p):
                found[p.pid] = p
        found.pop(self.me, None)
        return found

    def reap(self) -> list[str]:
        """Stop this run's processes and their children (until no new one appears), then kill them all."""
        found = self.targets()
        frontier = list(found.values())
        while frontier:
            p = frontier.pop()
            try:
                p.suspend()
                children = p.children()
            except psutil.Error:
                continue
            for c in children:
                if c.pid not in found and c.pid != self.me:
                    found[c.pid] = c
                    frontier.append(c)
        killed = []
        for p in found.values():
            try:
                name = f"{p.pid} {p.name()}"
                p.kill()
                killed.append(name)
            except psutil.Error:
                pass
        psutil.wait_procs(list(found.values()), timeout=WAIT_GONE_S)
        return killed

    def run(self, lines) -> None:
        try:
            driver = psutil.Process(self.driver_pid)
        except psutil.Error:
            driver = None
        eof = threading.Event()

        def read() -> None:
            for line in lines:
                kind, _, value = line.strip().partition(" ")
                if kind == "path" and value:
                    self.paths.append(value)
                elif kind == "cgroup" and value and "/" not in value and value.startswith(PARENT_PREFIX):
                    self.cgroups.append(value)
            eof.set()

        threading.Thread(target=read, daemon=True).start()
        while driver is not None and _alive(driver):
            self.snapshot(driver)
            if eof.is_set():  # the driver closed its end (it is exiting): look more often
                time.sleep(0.2)
            else:
                eof.wait(SNAPSHOT_S)
        killed = self.reap()
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        self.say(f"{stamp} reaper: driver {self.driver_pid} gone; killed {len(killed)} process(es) of its run"
                 + (": " + ", ".join(killed) if killed else ""))
        for parent in self.cgroups:
            removed = remove_empty(parent)
            if removed:
                self.say(f"{stamp} reaper: removed {len(removed)} empty cgroup(s) of the run under {parent}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m agensh_ray.reaper", description=__doc__.split("\n\n")[0])
    p.add_argument("--pid", type=int, required=True, help="the driver's pid")
    p.add_argument("--mark", default=None, help=f"the run's {MARK_ENV} value")
    a = p.parse_args(argv)
    try:
        os.nice(5)
    except OSError:
        pass
    Watch(a.pid, a.mark, say=lambda s: print(s, flush=True)).run(sys.stdin)
    return 0


if __name__ == "__main__":
    sys.exit(main())
