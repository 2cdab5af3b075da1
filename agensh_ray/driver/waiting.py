"""What the driver is waiting for, said while it waits (`Run` mixes this in): from Ray's start until the
workers launch, and from "stopping workers" to the summary, each step is a line when it starts ("starting
8 WorkerActors ..."), and while nothing else is said a line every `EVERY_S` seconds names the step again
with the time it has taken so far and, where there is one, its count ("3/8 up"). On a loaded machine these
steps take minutes (each actor is a new Python process); a silent terminal looks hung.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

EVERY_S = 7.0
"""Silence after which the step is named again (under the 10 s a user waits before wondering)."""


class Waiting:
    _step: str = ""
    _step_t0: float = 0.0
    _step_count: Callable[[], str] | None = None
    _said_at: float = 0.0
    _beat: threading.Thread | None = None
    _beat_stop: threading.Event | None = None

    def _doing(self, what: str, count: Callable[[], str] | None = None, announce: bool = True) -> None:
        """The step now waited for ("" : none); `count` says how far it got, `announce`: a line now."""
        self._step, self._step_t0, self._step_count = what, time.time(), count
        if what and announce:
            self.say(what)

    def _heartbeat(self, on: bool) -> None:
        """Start (on) or stop the thread that names the step during a silence."""
        if on and self._beat is None:
            self._beat_stop = threading.Event()
            self._beat = threading.Thread(target=self._beating, args=(self._beat_stop,), daemon=True,
                                          name="driver-heartbeat")
            self._beat.start()
        elif not on and self._beat is not None:
            self._beat_stop.set()
            self._beat.join(timeout=5)
            self._beat, self._step = None, ""

    def _beating(self, stop: threading.Event) -> None:
        while not stop.wait(0.5):
            # silent for EVERY_S, and the step (one not announced: e.g. the stop's) that long under way
            if not self._step or time.time() - max(self._said_at, self._step_t0) < EVERY_S:
                continue
            extra = ""
            if self._step_count is not None:
                try:
                    extra = f", {self._step_count()}"
                except Exception:  # noqa: BLE001 - a count that fails is left out, never the line
                    extra = ""
            step = self._step.split(" (")[0]  # its explanation was in the step's first line
            self.say(f"... still {step}: {time.time() - self._step_t0:.0f} s so far{extra}")
