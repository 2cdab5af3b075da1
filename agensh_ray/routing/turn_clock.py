"""When one worker's host-made prompts are due: the idle nudge, the share-findings prompt and the
wind-down notices (`TurnClock`, kept by the worker host per worker; `Due` is what it owes).

Plain and clock-free, so every rule about those prompts is tested without a host or a clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from agensh_ray.wire import HIGH, LOW


class Due(NamedTuple):
    """A prompt the host owes a worker: kind nudge | share_findings | wind_down."""

    kind: str
    priority: str = LOW
    last: bool = False
    """wind_down: the last notice ("merge only what is ready, then stop"), not an earlier one."""
    minutes_left: float = 0.0


@dataclass
class TurnClock:
    """When one worker's host-made prompts are due. Plain and clock-free: every time is in schedule
    seconds since the run started (the host multiplies wall time by `time_scale`).

    - idle nudge: `idle_nudge_s` after the end of its last turn with no new turn (once per idle spell; never
      with `nudge` off);
    - share-findings: at the end of a turn that wrote nothing to the board (not after a turn that the
      host's own prompts started, so prompts never loop);
    - wind-down: each notice `wind_down_s` before the deadline, once; a worker that starts after a
      notice's time gets only the latest notice due.
    """

    idle_nudge_s: float
    deadline_s: float
    wind_down_s: tuple[float, ...] = (2700.0, 300.0)
    share_findings: bool = True
    nudge: bool = True
    last_turn_end: float = 0.0
    in_turn: bool = False
    _nudged: bool = False
    _notices: list[float] = field(default_factory=list)
    _sent: int = 0

    HOST_KINDS = frozenset({"nudge", "share_findings", "wind_down", "handoff", "keep_going"})
    """Triggers made by the host itself."""

    def __post_init__(self) -> None:
        self._notices = sorted((b for b in self.wind_down_s if 0 < b < self.deadline_s), reverse=True)

    @classmethod
    def from_config(cls, routing: Any, deadline_s: float, now_s: float = 0.0, board: bool = True) -> "TurnClock":
        """From a `RoutingConfig` (a worker launched at `now_s` counts as having just ended a turn); `board`:
        the agents have the board tools (without them there are no findings to share on it)."""
        return cls(
            idle_nudge_s=routing.idle_nudge_s, deadline_s=deadline_s, wind_down_s=tuple(routing.wind_down_s),
            share_findings=routing.share_findings and board, nudge=getattr(routing, "nudge", True),
            last_turn_end=now_s,
        )

    def turn_started(self, now_s: float) -> None:
        self.in_turn = True

    def turn_ended(self, now_s: float, board_writes: int, trigger: str, stop_reason: str) -> Due | None:
        """Record a turn's end; returns the share-findings prompt if it is due now."""
        self.in_turn = False
        self.last_turn_end = now_s
        self._nudged = False
        if self.share_findings and board_writes == 0 and trigger not in self.HOST_KINDS and stop_reason == "end_turn":
            return Due("share_findings")
        return None

    def due(self, now_s: float) -> list[Due]:
        """The prompts due at `now_s` (each returned once)."""
        out: list[Due] = []
        k = self._sent
        while k < len(self._notices) and now_s >= self.deadline_s - self._notices[k]:
            k += 1
        if k > self._sent:
            self._sent = k
            before = self._notices[k - 1]
            out.append(Due("wind_down", HIGH, k == len(self._notices), before / 60))
        if self.nudge and not self.in_turn and not self._nudged and now_s - self.last_turn_end >= self.idle_nudge_s:
            self._nudged = True
            out.append(Due("nudge"))
        return out

    def next_due_in(self, now_s: float) -> float:
        """Schedule seconds until `due` may return something (0 if it would now; inf if never)."""
        nxt = float("inf")
        if self._sent < len(self._notices):
            nxt = self.deadline_s - self._notices[self._sent]
        if self.nudge and not self.in_turn and not self._nudged:
            nxt = min(nxt, self.last_turn_end + self.idle_nudge_s)
        return max(0.0, nxt - now_s)
