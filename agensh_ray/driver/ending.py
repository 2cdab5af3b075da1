"""How a run ends, for the driver (`Run` mixes this in): Ray started with the run's reaper, the parts
stopped within a bound when interrupted, the final score within a bound, the partial summary of a run
stopped before it could be summed up, the actors killed on a forced stop. The rules (when a run is done,
the signals) are plain logic in agensh_ray/stopping.py; the reaper is agensh_ray/reaper.py.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time

import ray

from agensh_ray.agent.limits import parent_name
from agensh_ray.errors import ForcedStop
from agensh_ray.reaper import MARK_ENV, Reaper
from agensh_ray.task.evaluate import ScoreSummary

log = logging.getLogger("agensh.run")

STOP_WITHIN_S = 30.0
"""Interrupted: how long the workers, then the routers, get to stop before teardown kills them."""
SCORE_WITHIN_S = 60.0
"""Interrupted: how long the final score may take; past that the summary has the last checkpoint's."""


class Ending:
    """The driver's ways of ending a run; expects `Run`'s attributes (cfg, run_dir, interrupts, ...)."""

    def _start_ray(self) -> None:
        """Ray, and the reaper (agensh_ray/reaper.py) when this driver starts Ray itself: after any exit of
        the driver, SIGKILL included, no process of the run is left."""
        if not ray.is_initialized():  # else a test's (or a notebook's) Ray: its owner cleans up
            self.reaper = Reaper.start(self.run_dir / "logs" / "reaper.log")
            self.reaper.cgroups(parent_name(self.run_id))  # the agents' cgroups (agensh_ray/agent/limits.py)
            saved = os.environ.get(MARK_ENV)
            os.environ.update(self.reaper.marked_env())  # inherited by Ray's daemons and their workers
            try:
                self._init_ray()
            finally:
                if saved is None:
                    os.environ.pop(MARK_ENV, None)
                else:
                    os.environ[MARK_ENV] = saved
            from ray._private.worker import _global_node

            if _global_node is not None and not self.cfg.address:  # Ray's daemons are this run's own
                self.reaper.watch(_global_node.get_session_dir_path())
        else:
            self._init_ray()
        self.interrupts.install()  # ray.init sets its own SIGTERM handler

    def _call_all(self, refs: list, within: float | None, what: str) -> None:
        try:
            ray.get(refs, timeout=within)
        except ForcedStop:
            raise
        except Exception as exc:  # teardown kills what did not stop
            self.say(f"{what}: {type(exc).__name__}; going on")

    def _final(self, within: float | None) -> None:
        """The final checkpoint; with `within`, in a thread given that long (else the last checkpoint's
        score, or none, stands, and the run says so)."""
        if within is None:
            self._score("final")
            self._catch_up()
            return
        self.say(f"final score (at most {within:.0f} s)")
        t = threading.Thread(target=self._score_quietly, daemon=True, name="final-score")
        t.start()
        t.join(within)
        self._catch_up(interrupted=True)
        if getattr(self, "_final_score", None) is None:
            last = getattr(self, "checkpoints", None) and self.checkpoints.last
            self._final_score = last or ScoreSummary(score=0.0, passed=0, total=0, not_run=0,
                                                     error_code="not_scored_interrupted")
            self.say("final score skipped (interrupted): the summary has "
                     + ("the last checkpoint's" if last else "no score"))

    def _catch_up(self, interrupted: bool = False) -> None:
        """A periodic checkpoint the final one cancelled: scored now, on the main it had taken (task/checkpoint.py)."""
        ckpt = getattr(self, "checkpoints", None)
        if ckpt is not None and ckpt._cancelled_job is not None:
            try:
                url = "" if interrupted else self.forge_url()
            except Exception as exc:
                ckpt.failure("periodic", exc)
                return
            ckpt.catch_up(url, interrupted)

    def _score_quietly(self) -> None:
        """The final score in a thread of its own: a failure is a line, not a thread's traceback (teardown may
        take its forge away while it runs)."""
        try:
            self._score("final")
        except Exception as exc:
            log.warning("final score failed: %s: %s", type(exc).__name__, exc)

    def _write_partial_summary(self, ended: str) -> None:
        """summary.json of a run stopped before it could be summed up (no counts, no score)."""
        s = {"run_id": self.run_id, "workers": len(self.workers), "harness": self.cfg.harness,
             "task": self.task.name, "wall_s": round(time.time() - self.t0, 1), "ended": ended,
             "signal": self.interrupts.name, "partial": True, "score": None, "run_dir": str(self.run_dir)}
        try:
            (self.run_dir / "summary.json").write_text(json.dumps(s, indent=2))
        except OSError:
            log.exception("writing summary.json failed")
        print(f"run {self.run_id} {ended} after {s['wall_s']}s; partial summary in {self.run_dir}/summary.json",
              file=self.out, flush=True)

    def _kill_all(self) -> None:
        actors = [*getattr(self, "routers", []), *(h for h, _ in getattr(self, "hosts", {}).values())]
        actors += [a for a in (getattr(self, "chat", None), getattr(self, "forge", None)) if a is not None]
        if getattr(self, "board", None) is not None:
            actors.append(self.board.actor)
        if getattr(self, "gateways", None) is not None:
            actors += [*self.gateways.actors.values(), self.gateways.coordinator]
        for a in actors:
            try:
                ray.kill(a, no_restart=True)
            except Exception:
                pass

