"""The clock, for `Run` (mixed in): at each progress tick the hosts' lag counters (agensh_ray/lag.py) become the
figures of the last 30 s (a `clock` trace row; " | machine-bound (...)" on the progress line when the machine cannot
keep up), and at the end the whole run's (summary.json's `clock`, a `clock` row of scope `run`, and a loud line in
the closing summary). Expects `Run`'s attributes (cfg, driver_trace).
"""

from __future__ import annotations

import time

from agensh_ray.lag import WINDOW_S, ClockFigures, LagWindow, progress_part
from agensh_ray.trace import ClockRow


class Clock:
    def _clock_tick(self, st: dict) -> str:
        """Take this tick's counters; trace the window's figures; what the progress line adds ("" when it keeps up)."""
        if getattr(self, "_lag", None) is None:
            self._lag = LagWindow(self.cfg.time_scale)
            # the hosts' counters start when this driver made them (a resumed driver's schedule started earlier)
            self._lag_t0 = getattr(self, "hosts_wall", None) or time.time()
        now = time.time()
        f = self._lag.tick(now, st)
        span = now - self._lag.ticks[0][0] if len(self._lag.ticks) > 1 else now - self._lag_t0
        self._clock_row("window", span, f)
        return progress_part(f)

    def _clock_summary(self) -> dict:
        """summary.json's `clock`: the whole run's figures (every key there, null where unknown)."""
        lag = getattr(self, "_lag", None)
        f = lag.whole_run() if lag is not None else LagWindow(self.cfg.time_scale).whole_run()
        if lag is not None:
            self._clock_row("run", time.time() - self._lag_t0, f)
        return f.model_dump()

    def _clock_row(self, scope: str, span: float, f: ClockFigures) -> None:
        trace = getattr(self, "driver_trace", None)
        if trace is not None:
            trace.write(ClockRow(scope=scope, window_s=round(span, 1), **f.model_dump()))


def clock_lines(s: dict) -> list[str]:
    """The closing summary's warning: only when the run was machine-bound."""
    c = s.get("clock") or {}
    if not c.get("machine_bound"):
        return []
    return [f"  clock          MACHINE-BOUND: {c['why'].removeprefix('machine-bound: ')}; schedule-time results "
            f"measure this machine as much as the organization (docs/operations.md, \"Machine-bound runs\")"]


__all__ = ["WINDOW_S", "Clock", "clock_lines"]
