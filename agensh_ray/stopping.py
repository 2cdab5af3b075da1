"""When and how a run stops, as plain logic the driver consults: the stop-when-done rule, and the
operator's SIGINT/SIGTERM.

**Done means done** (`DoneRule`). A demo run ends early once the organisation is done: every worker has
finished a turn (or stopped for good), the task was worked on (a board entry, a PR, or a score above 0),
no PR is open, and a quiet period passed with no board entry and no forge event. The quiet period is the
longest of 4 wall seconds, 1.5 idle-nudge cycles (so nudged workers had their turn to find more), and
twice the typical length of a worker's last finished turn (so a worker in a long turn that shows nothing
on the board or forge is not taken for done). Workers still inside their first turn never count.

**Signals** (`Interrupts`). The first SIGINT or SIGTERM asks for an orderly stop: a flag the driver's loop
reads within 0.2 s (workers stopped first, then routers and services; the final score within a bound;
summary.json with `"ended": "interrupted"`). A second one forces the stop: `ForcedStop` is raised in the
driver's main thread, wherever it is waiting.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Mapping

from agensh_ray.errors import ForcedStop

TURN_BUCKETS = [2**k for k in range(18)]
"""Upper bounds (wall seconds) of the buckets a host counts its workers' last finished turns in: 1 s to
36 h by powers of two. Bucket counts add up across hosts, so the driver's summed status keeps them."""


def turn_bucket_key(bound: int) -> str:
    return f"last_turn_le_{bound}s"


def turn_buckets(last_turn_s: list[float]) -> dict[str, int]:
    """Status keys counting workers by the wall length of their last finished turn (smallest bucket that
    holds it; longer than the last bound: the last bucket)."""
    out = {turn_bucket_key(b): 0 for b in TURN_BUCKETS}
    for s in last_turn_s:
        b = next((b for b in TURN_BUCKETS if s <= b), TURN_BUCKETS[-1])
        out[turn_bucket_key(b)] += 1
    return out


def median_turn_s(status: Mapping[str, int]) -> float | None:
    """The upper bound of the bucket holding the median last finished turn; None before any turn ended."""
    counts = [(b, status.get(turn_bucket_key(b), 0)) for b in TURN_BUCKETS]
    total = sum(n for _, n in counts)
    if not total:
        return None
    seen = 0
    for b, n in counts:
        seen += n
        if seen * 2 >= total:
            return float(b)
    return float(TURN_BUCKETS[-1])


class DoneRule:
    """Is the organisation done? `check` is called with each status the driver reads (every ~5 s)."""

    def __init__(self, workers: int, idle_nudge_wall_s: float, turn_factor: float = 2.0, floor_s: float = 4.0):
        self.workers = workers
        self.base_s = max(floor_s, 1.5 * idle_nudge_wall_s)
        self.turn_factor = turn_factor
        self.quiet_since: float | None = None
        self._last_activity: tuple | None = None
        self.quiet_s = self.base_s

    def quiet_needed(self, status: Mapping[str, int]) -> float:
        """Wall seconds without activity that make a run done."""
        median = median_turn_s(status)
        return max(self.base_s, self.turn_factor * median) if median is not None else self.base_s

    def check(self, now: float, status: Mapping[str, int], activity: tuple, open_prs: int, worked: bool) -> bool:
        """True once done. `activity` is anything that changes when work shows (board and forge counts);
        `worked`: the task was worked on at all."""
        self.quiet_s = self.quiet_needed(status)
        settled = status.get("finished_turn", 0) >= self.workers
        if not settled or not worked or open_prs or activity != self._last_activity or self.quiet_since is None:
            self.quiet_since = now
            self._last_activity = activity
            return False
        return now - self.quiet_since >= self.quiet_s


class Interrupts:
    """The driver's SIGINT/SIGTERM handlers: the first sets `signum` (an orderly stop), the second raises
    `ForcedStop`. Installed only from the main thread (Python delivers signals there); elsewhere (a run
    inside a test's thread) nothing is installed and `signum` stays None."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, say: Callable[[str], None] | None = None):
        self.say = say
        self.signum: int | None = None
        self._previous: dict[int, object] = {}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    @property
    def name(self) -> str | None:
        return signal.Signals(self.signum).name if self.signum is not None else None

    @property
    def exit_code(self) -> int:
        """The shell's convention for death by a signal: 128 + its number (130 SIGINT, 143 SIGTERM)."""
        return 128 + (self.signum or 0)

    def install(self) -> bool:
        """Install (again: `ray.init` sets its own SIGTERM handler). False outside the main thread."""
        if threading.current_thread() is not threading.main_thread():
            return False
        for s in self.SIGNALS:
            previous = signal.signal(s, self._handle)
            self._previous.setdefault(s, previous)
        return True

    def restore(self) -> None:
        for s, previous in self._previous.items():
            signal.signal(s, previous if previous is not None else signal.SIG_DFL)
        self._previous.clear()

    def _handle(self, signum: int, frame) -> None:
        if self.signum is None:
            self.signum = signum
            if self.say is not None:
                self.say(f"{signal.Signals(signum).name}: stopping in order (workers, then services, the final "
                         "score within a bound, the summary); send it again to force the stop")
            return
        raise ForcedStop(signum)

