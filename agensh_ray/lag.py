"""The clock that measures the organization, not the machine (issue 30): how far a run's agents lag behind their
own schedule, and the rule `machine_bound` that says when the machine could not keep up.

Two measures, each taken where it happens and added up by the driver from the hosts' counters:

- **Tool latency at the agent against the server.** Every call of one of our MCP tools is timed twice: by the
  tool server, from the request to the answer (`source = 'mcp'` in the `tool_calls` table), and at the agent, as
  the host sees the agent report the call's start and end over ACP (`source = 'agent'`, the calls whose title
  ends with one of our tools' names). On a machine that keeps up the two differ by the transport (a few ms);
  when the agents' processes wait for CPU, the agent side grows and the server side does not. Each host keeps
  both as histograms in log buckets of 2^(1/16) (a median read from them is within 2.2% of the true one).
- **Time waiting for CPU.** Each host reads `/proc/<pid>/task/<tid>/schedstat` (the kernel's per-thread time on
  a CPU and time runnable but waiting in a run queue, nanoseconds) of its own process and every descendant
  alive when it samples (its agents, their tools): `cpu_wait_share` = wait / (run + wait), the share of the time
  the run's processes were ready to run that they spent waiting for a CPU. It is this run's processes' view,
  whatever loads the machine (other jobs included), and works in a container (no cgroup or PSI file needed).
  Processes that start and end between two samples (a short git or compiler run) are not seen, nor a new process
  until the next walk of /proc for the tree (every `RESCAN_S`, 20 s, and after the host starts an agent).

The rule (`judge`): machine-bound when the agents' median tool call took more than `RATIO_LIMIT` (2) times the
server's and the excess is at least `EXCESS_SCHEDULE_S` (1) schedule second per call, or when the run's
processes waited for a CPU more than `CPU_WAIT_LIMIT` (50%) of the time they were ready to run (their CPU work
took more than twice as long as on free CPUs). Not machine-bound when both measures are known and under their
limits; unknown (None) otherwise.
"""

from __future__ import annotations

import math
import os
import time
from collections import deque

from pydantic import BaseModel

RATIO_LIMIT = 2.0
"""Agent-side median tool latency over the server-side one above which the agents lag (issue 30's goal: <= 2)."""
EXCESS_SCHEDULE_S = 1.0
"""...provided the lag per call is at least this many schedule seconds ((agent - server) x time scale): a few ms of
transport on a tool that answers in 1 ms is a large ratio but no lag."""
CPU_WAIT_LIMIT = 0.5
"""Share of their ready time the run's processes waited for a CPU above which the machine is the limit."""
MIN_CALLS = 10
"""Tool calls each side needs before its median counts (fewer: unknown)."""
MIN_READY_S = 1.0
"""CPU seconds (run + wait) the run's processes need before the wait share counts (less: unknown)."""
RESCAN_S = 20.0
"""How often a host walks /proc for its process tree (~20 us a process); between walks it reads the threads of the
processes it found."""
WINDOW_S = 30.0
"""The progress line's figures cover the last this many wall seconds."""

BUCKETS_PER_OCTAVE = 16
AGENT, SERVER = "lag_agent_b", "lag_server_b"
"""Status keys of the histograms' buckets: `lag_agent_b<n>` counts calls of 2^(n/16) to 2^((n+1)/16) ms."""
CPU_RUN, CPU_WAIT, CPU_SEEN = "cpu_run_ns", "cpu_wait_ns", "cpu_sampled"


def bucket(ms: float) -> int:
    return math.floor(math.log2(max(ms, 1e-3)) * BUCKETS_PER_OCTAVE)


def median_ms(counts: dict[int, int]) -> float | None:
    """The median of a histogram of buckets (the middle bucket's geometric centre); None when it holds too few
    calls (`MIN_CALLS`)."""
    total = sum(counts.values())
    if total < MIN_CALLS:
        return None
    half, seen = total / 2, 0
    for b in sorted(counts):
        seen += counts[b]
        if seen >= half:
            return 2 ** ((b + 0.5) / BUCKETS_PER_OCTAVE)
    return None  # unreachable


def tool_name(title: str, names: frozenset[str]) -> str | None:
    """Which of our MCP tools an agent-reported call is (its title ends with the tool's name: `agensh/board_read`,
    `mcp__agensh__board_read`), or None (the agent's own tools: edits, shell)."""
    for n in names:
        if title.endswith(n) and (len(title) == len(n) or not title[-len(n) - 1].isalnum()):
            return n
    return None


class ToolLag:
    """A host's histograms of its workers' MCP tool calls, as the agents and as the tool server timed them."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def record(self, side: str, ms: float | None) -> None:
        if ms is None or ms < 0:
            return
        key = f"{side}{bucket(ms)}"
        self.counts[key] = self.counts.get(key, 0) + 1


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rfind(b")") + 2:].split()[1])
        kids.setdefault(ppid, []).append(int(name))
    return kids


class CpuWait:
    """Time on a CPU and time waiting for one, summed over the threads of a process and its descendants, from the
    kernel's schedstat; cumulative since it was made, over what was seen (each thread's growth since the last
    sample; a thread first seen counts from its start)."""

    def __init__(self, root: int | None = None, rescan_s: float = RESCAN_S):
        self.root, self.rescan_s = root or os.getpid(), rescan_s
        self.last: dict[int, tuple[int, int]] = {}
        self.run_ns = self.wait_ns = 0
        self.available = os.path.exists(f"/proc/{self.root}/schedstat")
        self.scanned, self.tree = -math.inf, [self.root]
        self.sample()  # what the process tree did before (a test process's earlier life) is not the run's
        self.run_ns = self.wait_ns = 0

    def rescan(self) -> None:
        """Walk /proc for the tree at the next sample (a host calls it when it starts an agent)."""
        self.scanned = -math.inf

    def sample(self) -> None:
        if not self.available:
            return
        if time.monotonic() - self.scanned >= self.rescan_s:  # which processes are the tree: a walk of all of /proc
            try:
                kids = _children()
            except OSError:
                return
            self.scanned, todo, self.tree = time.monotonic(), [self.root], []
            while todo:
                pid = todo.pop()
                self.tree.append(pid)
                todo.extend(kids.get(pid, ()))
        now = {}
        for pid in self.tree:
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            for tid in tids:
                try:
                    with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                        run, wait = map(int, f.read().split()[:2])
                except (OSError, ValueError):
                    continue
                now[int(tid)] = (run, wait)
        for tid, (run, wait) in now.items():
            r0, w0 = self.last.get(tid, (0, 0))
            if run < r0 or wait < w0:  # a new thread with a reused id
                r0 = w0 = 0
            self.run_ns += run - r0
            self.wait_ns += wait - w0
        self.last = now

    def counters(self) -> dict[str, int]:
        self.sample()
        return {CPU_RUN: self.run_ns, CPU_WAIT: self.wait_ns, CPU_SEEN: int(self.available)}


def is_lag_key(key: str) -> bool:
    return key.startswith(AGENT) or key.startswith(SERVER) or key in (CPU_RUN, CPU_WAIT)


class HostLives:
    """Each host's lag counters summed over its lives, for the driver's sum over hosts. A host Ray restarts (a crash,
    a hung-actor kill) counts from 0 again: without the carry, the sum would fall, a window's differences would be
    clamped unevenly (CPU run time to 0, its wait not: a false 100% wait) and the whole run would lose what the
    host's earlier lives measured."""

    def __init__(self) -> None:
        self.last: dict[str, tuple[int | None, dict]] = {}
        self.carry: dict[str, dict[str, int]] = {}

    def add(self, host: str, answer: dict, pid: int | None) -> dict:
        """The host's answer with its earlier lives' lag counters added (a new life: another pid, or a counter that
        went down)."""
        prev = self.last.get(host)
        if prev is not None and (pid != prev[0] or any(answer.get(k, 0) < v for k, v in prev[1].items()
                                                       if is_lag_key(k))):
            carry = self.carry.setdefault(host, {})
            for k, v in prev[1].items():
                if is_lag_key(k):
                    carry[k] = carry.get(k, 0) + v
        self.last[host] = (pid, answer)
        carry = self.carry.get(host)
        return {**answer, **{k: answer.get(k, 0) + v for k, v in carry.items()}} if carry else answer


class ClockFigures(BaseModel):
    """The clock's figures over a stretch of the run (summary.json's `clock`; null where unknown)."""

    time_scale: float
    agent_tool_median_ms: float | None = None
    server_tool_median_ms: float | None = None
    tool_latency_ratio: float | None = None
    cpu_wait_share: float | None = None
    machine_bound: bool | None = None
    why: str


def judge(time_scale: float, agent_ms: float | None, server_ms: float | None, cpu_wait_share: float | None
          ) -> ClockFigures:
    """The rule `machine_bound` (module docstring) over measured figures, with why in words."""
    ratio = agent_ms / server_ms if agent_ms is not None and server_ms and server_ms > 0 else None
    reasons, fine, unknown = [], [], []
    if ratio is None:
        unknown.append(f"tool latency (fewer than {MIN_CALLS} tool calls timed on a side)")
    else:
        excess_s = (agent_ms - server_ms) / 1000 * time_scale
        text = (f"the agents' median tool call took {agent_ms:.1f} ms against {server_ms:.1f} ms at the tool server "
                f"(x{ratio:.1f}, {excess_s:.1f} schedule s late)")
        (reasons if ratio > RATIO_LIMIT and excess_s >= EXCESS_SCHEDULE_S else fine).append(text)
    if cpu_wait_share is None:
        unknown.append("CPU wait (no schedstat, or too little CPU time seen)")
    else:
        text = f"the run's processes waited for a CPU {cpu_wait_share:.0%} of the time they were ready to run"
        (reasons if cpu_wait_share > CPU_WAIT_LIMIT else fine).append(text)
    if reasons:
        bound, why = True, "machine-bound: " + "; ".join(reasons)
    elif not unknown:
        bound, why = False, "keeps up: " + "; ".join(fine)
    else:
        bound, why = None, "unknown: " + "; ".join(unknown) + ("; " + "; ".join(fine) if fine else "")
    def r(v: float | None, n: int) -> float | None:
        return None if v is None else round(v, n)

    return ClockFigures(time_scale=time_scale, agent_tool_median_ms=r(agent_ms, 1),
                        server_tool_median_ms=r(server_ms, 1), tool_latency_ratio=r(ratio, 2),
                        cpu_wait_share=r(cpu_wait_share, 3), machine_bound=bound, why=why)


def figures(time_scale: float, st: dict, base: dict | None = None) -> ClockFigures:
    """The clock's figures from the hosts' summed counters `st` (since `base`, an earlier sum, if given)."""
    base = base or {}
    diff = {k: max(0, v - base.get(k, 0)) for k, v in st.items() if isinstance(v, int) and is_lag_key(k)}
    agent = {int(k[len(AGENT):]): v for k, v in diff.items() if k.startswith(AGENT) and v}
    server = {int(k[len(SERVER):]): v for k, v in diff.items() if k.startswith(SERVER) and v}
    run, wait = diff.get(CPU_RUN, 0), diff.get(CPU_WAIT, 0)
    share = wait / (run + wait) if st.get(CPU_SEEN) and run + wait >= MIN_READY_S * 1e9 else None
    return judge(time_scale, median_ms(agent), median_ms(server), share)


class LagWindow:
    """The driver's view: the hosts' counters at each progress tick, the figures of the last `WINDOW_S` seconds and
    of the whole run."""

    def __init__(self, time_scale: float, window_s: float = WINDOW_S):
        self.time_scale, self.window_s = time_scale, window_s
        self.ticks: deque[tuple[float, dict]] = deque()
        self.last: dict = {}

    def tick(self, now: float, st: dict) -> ClockFigures:
        self.last = st
        self.ticks.append((now, st))
        while len(self.ticks) > 2 and now - self.ticks[1][0] >= self.window_s:
            self.ticks.popleft()
        return figures(self.time_scale, st, self.ticks[0][1] if len(self.ticks) > 1 else None)

    def whole_run(self) -> ClockFigures:
        return figures(self.time_scale, self.last)


def progress_part(f: ClockFigures) -> str:
    """What the progress line adds: nothing unless the machine is the limit."""
    if not f.machine_bound:
        return ""
    parts = []
    if f.tool_latency_ratio is not None:
        parts.append(f"tool calls x{f.tool_latency_ratio:.1f} at the agent")
    if f.cpu_wait_share is not None:
        parts.append(f"CPU wait {f.cpu_wait_share:.0%}")
    return f" | machine-bound ({', '.join(parts)})"
