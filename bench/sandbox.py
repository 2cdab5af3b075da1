"""Benchmark: what the bubblewrap sandbox costs a worker's agent.

    python bench/sandbox.py [--runs 5] [--agents sim,copilot] [--terminals 20]

For each agent (the built-in `sim`; Copilot CLI against the bundled fake OpenAI endpoint, when
it is installed) and each mode (sandbox off, on), starts a worker's agent session `--runs`
times through a real WorkerHost (in-process services: a real embedded forge, board and chat;
its MCP tool server), exactly as a run does, and measures:

- start_s: spawn to session ready (ACP initialize + session/new; with the sandbox: bwrap, the
  relay inside it and the host's relays included);
- pss_mib: the proportional set size of the agent's whole process tree once it is ready (with
  the sandbox: the two bwrap processes and the relay included), and sandbox_pss_mib, the part of
  it that is the sandbox's own processes;
- terminal_ms: a terminal command (`true`) through ACP terminal/create, spawn to exit (with the
  sandbox it joins the agent's namespaces through enter.py), median of --terminals.

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

from agensh_ray.agent import sandbox
from agensh_ray.agent.harness import get_harness
from agensh_ray.config import SandboxConfig
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


async def one(agent: str, sandboxed: bool, root: Path, terminals: int) -> dict:
    run_dir = root / "run"
    services = LocalServices(run_dir, ["w001"])
    host = services.host(run_dir, ["w001"], harness=agent, sandbox=SandboxConfig(enabled=sandboxed))
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
        await session.close()
    finally:
        await host.stop()
        services.close()
    return {"start_s": start_s, "pss_mib": pss, "sandbox_pss_mib": own, "terminal_ms": term}


def main() -> None:
    p = argparse.ArgumentParser(prog="python bench/sandbox.py", description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5, help="starts per agent and mode (the figures are medians)")
    p.add_argument("--agents", default="sim,copilot", help="comma-separated harnesses (copilot: against a fake)")
    p.add_argument("--terminals", type=int, default=20, help="terminal commands timed per start")
    a = p.parse_args()
    why = sandbox.unavailable()
    if why:
        sys.exit(f"bench/sandbox.py: cannot sandbox here: {why}")
    facts = machine_facts(bwrap=os.popen("bwrap --version").read().strip())
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
                asyncio.run(one(agent, True, Path(d), 1))  # the first start on a machine fills the shared caches
            got: dict[bool, list[dict]] = {False: [], True: []}
            for i in range(a.runs):
                for sandboxed in ((False, True) if i % 2 == 0 else (True, False)):
                    with tempfile.TemporaryDirectory(prefix="agensh-bench-sandbox-") as d:
                        r = asyncio.run(one(agent, sandboxed, Path(d), a.terminals))
                    got[sandboxed].append(r)
                    print(f"{agent} sandbox={'on ' if sandboxed else 'off'} run {i + 1}: start {r['start_s']:.3f} s, "
                          f"PSS {r['pss_mib']:.1f} MiB (sandbox's own {r['sandbox_pss_mib']:.1f}), "
                          f"terminal {r['terminal_ms']:.1f} ms", flush=True)
            for sandboxed, rows in got.items():
                key = f"{agent}_{'on' if sandboxed else 'off'}"
                result[key] = {k: round(statistics.median(r[k] for r in rows), 3) for k in rows[0]}
            on, off = result[f"{agent}_on"], result[f"{agent}_off"]
            print(f"{agent}: start +{on['start_s'] - off['start_s']:.3f} s, PSS +{on['pss_mib'] - off['pss_mib']:.1f} "
                  f"MiB, terminal +{on['terminal_ms'] - off['terminal_ms']:.1f} ms with the sandbox (medians)",
                  flush=True)
    finally:
        fake.close()
    print_result(result)


if __name__ == "__main__":
    main()
