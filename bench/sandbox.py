"""Benchmark: what the bubblewrap sandbox and its resource limits cost a worker's agent.

    python bench/sandbox.py [--runs 5] [--agents sim,copilot] [--terminals 20] [--modes off,on,limits]

For each agent (the built-in `sim`; Copilot CLI against the bundled fake OpenAI endpoint, when
it is installed) and each mode (off: no sandbox; on: the sandbox without resource limits; limits:
the sandbox with the default `LimitsConfig`, agensh_ray/agent/limits.py: its cgroup, a sized /tmp,
rlimits), starts a worker's agent session `--runs`
times through a real WorkerHost (in-process services: a real embedded forge, board and chat;
its MCP tool server), exactly as a run does, and measures:

- start_s: spawn to session ready (ACP initialize + session/new; with the sandbox: bwrap, the
  relay inside it and the host's relays included);
- pss_mib: the proportional set size of the agent's whole process tree once it is ready (with
  the sandbox: the two bwrap processes and the relay included), and sandbox_pss_mib, the part of
  it that is the sandbox's own processes;
- terminal_ms: a terminal command (`true`) through ACP terminal/create, spawn to exit (with the
  sandbox it joins the agent's namespaces through enter.py; with the limits, its cgroups too),
  median of --terminals;
- disk_walk_ms: one measurement of the disk watcher (workdir and HOME; limits mode only).

One unmeasured start first fills the machine's shared caches (the first start on a machine does that once).
Modes alternate run by run so the machine's drift hits both alike. Prints the machine, each run,
and as its last line one JSON object with the medians per agent and mode.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agensh_ray.agent import limits, sandbox
from agensh_ray.agent.harness import get_harness
from agensh_ray.config import LimitsConfig, SandboxConfig
from agensh_ray.errors import HarnessError
from agensh_ray.fakes.openai_server import FakeOpenAI
from agensh_ray.fakes.script import Script
from bench.common import machine_facts, print_result, process_tree
from tests.support import LocalServices

MIB = 2**20


def tree_pss(root: int) -> tuple[float, float]:
    """(PSS of the whole tree, PSS of the sandbox's own processes: bwrap and the relay), MiB."""
    total = own = 0
    for p in process_tree([root]):
        try:
            pss = p.memory_full_info().pss
            cmd = p.cmdline()
        except psutil.Error:
            continue
        total += pss
        if cmd and (Path(cmd[0]).name == "bwrap" or any(c.endswith("agent/relay.py") for c in cmd[:4])):
            own += pss
    return total / MIB, own / MIB


async def terminal_ms(session, n: int) -> float:
    c, sid = session.client, session.session_id
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        t = await c.create_terminal("true", sid)
        await c.wait_for_terminal_exit(sid, t.terminal_id)
        times.append((time.perf_counter() - t0) * 1000)
        await c.release_terminal(sid, t.terminal_id)
    return statistics.median(times)


MODES = {
    "off": SandboxConfig(enabled=False),
    "on": SandboxConfig(limits=None),
    "limits": SandboxConfig(limits=LimitsConfig()),
}


async def one(agent: str, mode: str, root: Path, terminals: int) -> dict:
    run_dir = root / "run"
    services = LocalServices(run_dir, ["w001"])
    host = services.host(run_dir, ["w001"], harness=agent, sandbox=MODES[mode])
    await host.start()
    w = host.workers["w001"]
    try:
        await asyncio.to_thread(host.workdirs.prepare, w.id, w.workdir, w.home, services.clone_urls[w.id])
        t0 = time.perf_counter()
        session = await host.open_session(w)
        start_s = time.perf_counter() - t0
        await asyncio.sleep(1.0)  # let it settle (a CLI finishes loading after session/new)
        pss, own = tree_pss(session.pid)
        term = await terminal_ms(session, terminals)
        walk = None
        if mode == "limits":
            t0 = time.perf_counter()
            limits.disk_usage([w.workdir, w.home], LimitsConfig().disk_max_entries)
            walk = (time.perf_counter() - t0) * 1000
        await session.close()
    finally:
        await host.stop()
        services.close()
    out = {"start_s": start_s, "pss_mib": pss, "sandbox_pss_mib": own, "terminal_ms": term}
    return out if walk is None else {**out, "disk_walk_ms": walk}


def main() -> None:
    p = argparse.ArgumentParser(prog="python bench/sandbox.py", description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5, help="starts per agent and mode (the figures are medians)")
    p.add_argument("--agents", default="sim,copilot", help="comma-separated harnesses (copilot: against a fake)")
    p.add_argument("--terminals", type=int, default=20, help="terminal commands timed per start")
    p.add_argument("--modes", default="off,on,limits",
                   help="comma-separated: off (no sandbox), on (sandbox, no resource limits), limits (both)")
    a = p.parse_args()
    modes = [m for m in a.modes.split(",") if m]
    if not modes or set(modes) - set(MODES):
        sys.exit(f"bench/sandbox.py: --modes takes {', '.join(MODES)}")
    why = sandbox.unavailable()
    if why:
        sys.exit(f"bench/sandbox.py: cannot sandbox here: {why}")
    facts = machine_facts(bwrap=os.popen("bwrap --version").read().strip(), limits=limits.detect()[1])
    print(f"machine: {facts}", flush=True)
    agents = []
    for name in a.agents.split(","):
        try:
            get_harness(name).argv()
            agents.append(name)
        except HarnessError as exc:
            print(f"skipping {name}: {exc}", flush=True)
    fake = FakeOpenAI(Script())
    fake.start()
    os.environ.update(COPILOT_PROVIDER_BASE_URL=fake.url, COPILOT_PROVIDER_API_KEY="sk-bench-0123456789",
                      COPILOT_MODEL="gpt-4.1", COPILOT_OFFLINE="true")
    result: dict = {"machine": facts, "runs": a.runs}
    try:
        for agent in agents:
            with tempfile.TemporaryDirectory(prefix="agensh-bench-sandbox-") as d:
                asyncio.run(one(agent, "on", Path(d), 1))  # the first start on a machine fills the shared caches
            got: dict[str, list[dict]] = {m: [] for m in modes}
            for i in range(a.runs):
                for mode in modes[i % len(modes):] + modes[:i % len(modes)]:  # rotated: drift hits all alike
                    with tempfile.TemporaryDirectory(prefix="agensh-bench-sandbox-") as d:
                        r = asyncio.run(one(agent, mode, Path(d), a.terminals))
                    got[mode].append(r)
                    print(f"{agent} {mode:<6} run {i + 1}: start {r['start_s']:.3f} s, "
                          f"PSS {r['pss_mib']:.1f} MiB (sandbox's own {r['sandbox_pss_mib']:.1f}), "
                          f"terminal {r['terminal_ms']:.1f} ms"
                          + (f", disk walk {r['disk_walk_ms']:.1f} ms" if "disk_walk_ms" in r else ""), flush=True)
            for mode, rows in got.items():
                result[f"{agent}_{mode}"] = {k: round(statistics.median(r[k] for r in rows), 3) for k in rows[0]}
            for base, mode in (("off", "on"), ("on", "limits")):
                if base in got and mode in got:
                    x, y = result[f"{agent}_{base}"], result[f"{agent}_{mode}"]
                    print(f"{agent}: {mode} against {base}: start {y['start_s'] - x['start_s']:+.3f} s, "
                          f"PSS {y['pss_mib'] - x['pss_mib']:+.1f} MiB, terminal "
                          f"{y['terminal_ms'] - x['terminal_ms']:+.1f} ms (medians)", flush=True)
    finally:
        fake.close()
    print_result(result)


if __name__ == "__main__":
    main()
