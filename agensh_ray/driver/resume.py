"""Resuming a run whose driver died, for `Run` (mixed in): `python -m agensh_ray.run --resume RUN_ID`.

What outlives a driver: the run folder (config.json, the board's, chat's and forge's durable logs, the
workers' clones, the traces) and, on a cluster (`--address`), the detached board actor. The driver's other
actors (chat, forge, routers, hosts, gateways) belong to its Ray job and die with it; a local run's Ray
instance dies with it too. So a resumed driver:

1. reads `driver.json` (written once the hosts were up: when the schedule started, the driver's pid and
   machine) and refuses a run that finished (summary.json), one whose driver never got that far, or one
   whose driver still runs;
2. removes what is left of the old driver's actors (Ray frees their names a few seconds after their owner
   died), except the board, which it reattaches to (or Ray starts again from its log);
3. starts the chat and forge from their logs (the forge's token key died with the driver: it issues new
   tokens, and each kept clone's remote is set to its new URL), then new hosts and routers; the hosts'
   cursors start at the sources' heads, so nothing is delivered twice (a resumed worker gets a hand-off
   summary of the run so far instead, as after a host restart);
4. keeps the schedule: launches, wind-down and deadline count from the original start (the time the driver
   was down is run time); workers launched before are launched again at once, with their clones.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import socket
import time
from pathlib import Path

import ray
from ray.util.placement_group import remove_placement_group
from pydantic import BaseModel, ValidationError

from agensh_ray.actors.supervise import call
from agensh_ray.errors import RunFolderError

STATE_FILE = "driver.json"
STALE_ACTORS_S = 60.0
"""How long a resumed driver waits for Ray to remove the old driver's actors before it gives up."""
SLOTS_FREED_S = 10.0
"""How long a resumed driver waits for the old driver's agent slots to show as free before it checks capacity."""


class DriverState(BaseModel):
    """What a resumed driver needs of the one before it (`driver.json` in the run folder)."""

    run_id: str
    pid: int
    hostname: str
    t0: float
    """When the first driver started (the progress lines' and summary's clock)."""
    start_wall: float
    """When the schedule started (launch offsets, wind-down and deadline count from it)."""
    resumes: int = 0


def read_state(folder: Path) -> DriverState:
    """The driver state of the run folder `folder`, checked resumable; RunFolderError says why not."""
    if not (folder / "config.json").is_file():
        raise RunFolderError(f"nothing to resume in {folder}: no run there (no config.json)")
    if (folder / "summary.json").is_file() and not interrupted(folder):
        raise RunFolderError(f"run {folder.name} has finished (its summary.json): nothing to resume; its results "
                             f"are in {folder}")
    path = folder / STATE_FILE
    if not path.is_file():
        raise RunFolderError(f"run {folder.name} stopped before its workers were up (no {STATE_FILE}): nothing "
                             "worth resuming; start it again with --overwrite")
    try:
        state = DriverState.model_validate_json(path.read_text())
    except ValidationError as exc:
        why = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'the file'}: {e['msg']}" for e in exc.errors())
        raise RunFolderError(f"{path} is not a driver state ({why}): start the run again with --overwrite") from None
    if driver_alive(state):
        raise RunFolderError(f"run {folder.name}'s driver (pid {state.pid}) is still running on this machine: "
                             f"stop it first (kill -TERM {state.pid}), or let it finish")
    return state


def interrupted(folder: Path) -> bool:
    """Did the run stop on a signal (its summary says "ended": "interrupted")? Such a run may be resumed."""
    try:
        return json.loads((folder / "summary.json").read_text()).get("ended") == "interrupted"
    except (OSError, ValueError, AttributeError):
        return False


def run_actors(run_id: str) -> re.Pattern:
    """The names of a run's actors but its board (actors/services.py, router.py, gateway.py, the driver's hosts)."""
    r = re.escape(run_id)
    return re.compile(rf"(?:chat|forge|gateway-coordinator)-{r}|host-{r}-h\d+|router-{r}-\d+|gateway-{r}-[0-9a-f]{{1,16}}")


CMDLINE_LOOKS, CMDLINE_WAIT_S = 20, 0.05
"""A command line read empty is read again this often, this far apart: a process just started shows an empty one
until its exec has set the new one (seen here: a pid straight from Popen read b'' 4 times in 5)."""


def driver_alive(state: DriverState) -> bool:
    """Is the driver of `state` still running (on this machine; one elsewhere cannot be checked from here)?"""
    if state.hostname != socket.gethostname() or state.pid == os.getpid():
        return False
    for _ in range(CMDLINE_LOOKS):
        try:
            cmdline = Path(f"/proc/{state.pid}/cmdline").read_bytes()
        except OSError:
            return False
        if cmdline:
            return b"agensh_ray.run" in cmdline
        time.sleep(CMDLINE_WAIT_S)  # empty: the process is mid-exec (its new command line not set yet), or a zombie
    return False


class Resume:
    def _load_state(self) -> None:
        """Take the run folder (one driver at a time: a lock held while this process lives) and, resuming, the
        previous driver's state, claimed at once (driver.json names this process: a second `--resume` here is
        refused); an interrupted run's summary is kept aside as summary.interrupted-<n>.json."""
        self._lock = open(self.run_dir / ".driver.lock", "a")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunFolderError(f"another driver is running run {self.run_id} on this machine") from None
        self.prior = read_state(self.run_dir) if self.cfg.resume else None
        if self.prior is None:
            return
        self.t0 = self.prior.t0
        if (self.run_dir / "summary.json").exists():
            (self.run_dir / "summary.json").replace(self.run_dir / f"summary.interrupted-{self.prior.resumes}.json")
        self.start_wall = self.prior.start_wall
        self._save_state(resumes=self.prior.resumes)

    @property
    def deadline_passed(self) -> bool:
        """Resuming: did the schedule's deadline pass while no driver ran?"""
        return self.prior is not None and time.time() >= self.prior.start_wall + self.cfg.deadline_wall_s

    def _save_state(self, resumes: int | None = None) -> None:
        """driver.json: this driver's pid and machine, the schedule's start; written once the hosts are up (the
        run can be resumed from then on) and, resuming, at once."""
        if resumes is None:
            resumes = self.prior.resumes + 1 if self.prior else 0
        state = DriverState(run_id=self.run_id, pid=os.getpid(), hostname=socket.gethostname(), t0=self.t0,
                            start_wall=self.start_wall, resumes=resumes)
        tmp = self.run_dir / f".{STATE_FILE}.tmp"
        tmp.write_text(state.model_dump_json(indent=2))
        tmp.replace(self.run_dir / STATE_FILE)

    def _clear_stale_actors(self) -> None:
        """Kill what is left of the previous driver's actors (all but the board), and wait until Ray has freed
        their names."""
        mine = run_actors(self.run_id)

        def left() -> list[str]:
            return [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                    if a.get("namespace") == "agensh" and mine.fullmatch(a["name"])]

        try:  # its slots too (a placement group goes with its job; a name left behind would clash)
            remove_placement_group(ray.util.get_placement_group(f"slots-{self.run_id}"))
        except ValueError:
            pass
        names = left()
        for name in names:
            try:
                ray.kill(ray.get_actor(name, namespace="agensh"), no_restart=True)
            except ValueError:  # gone meanwhile
                pass
        deadline = time.time() + STALE_ACTORS_S
        while (still := left()) and time.time() < deadline:
            time.sleep(0.5)
        if still:
            raise RuntimeError(f"the previous driver's actors {', '.join(still)} are still registered after "
                               f"{STALE_ACTORS_S:.0f} s")
        if names:
            self.say(f"removed {len(names)} actor(s) the previous driver left behind")
        # the old group's slots (removed here, or by Ray with the old driver's job) reach the free count a moment
        # later: the capacity check must not beat them (other runs may hold slots too: after SLOTS_FREED_S the
        # check says what is free, or --queue waits)
        freed_by = time.time() + SLOTS_FREED_S
        while "agent_slot" in ray.cluster_resources() and time.time() < freed_by \
                and ray.available_resources().get("agent_slot", 0) < self.cfg.workers:
            time.sleep(0.2)

    def _board_alive(self) -> bool:
        try:
            ray.get_actor(f"board-{self.run_id}", namespace="agensh")
            return True
        except ValueError:
            return False

    def _heads(self) -> dict[str, int]:
        """The last sequence number of each source the routers read: where a resumed run's delivery starts."""
        board = call("board", lambda: self.board.actor.last_seq.remote())
        chat = call("chat", lambda: self.chat.last_seq.remote())
        forge = 0
        while page := call("forge", lambda: self.forge.events_since.remote(forge, 100_000)):
            forge = page[-1].seq
        return {"board": board, "chat": chat, "forge": forge}

    def _resume_checkpoints(self) -> None:
        """Checkpoints go on numbering after the ones already in checkpoints/ (none is overwritten)."""
        seqs = [int(p.name.split("-", 1)[0]) for p in self.checkpoints.dir.glob("*.eval.json")
                if p.name.split("-", 1)[0].isdigit()]
        self.checkpoints.seq = max(seqs, default=0)
