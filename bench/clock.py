"""The clock's figures (agensh_ray/lag.py) on this machine: a tiny run as it is, then the same run throttled
with a CPU hog.

A real WorkerHost (2 sim workers on textkit by default, the real sim agent process and MCP tool server, the
in-process board, chat and forge of tests/support.py; no Ray) runs `--seconds` wall seconds as the machine is,
then `--seconds` more pinned to one CPU with `--hogs` busy loops on it. For each phase: the median MCP tool call as
the agent waited for it and as the tool server served it, their ratio, the share of their ready time the run's
processes waited for a CPU, and the rule's verdict. The machine's CPU pressure (/proc/pressure/cpu, `some`
avg10, the whole machine's) is printed beside each phase: on a shared machine the "calm" phase is only as calm as
the other jobs let it be.

    python bench/clock.py                         # 2 workers, x120, 30 s calm then 30 s with 3 hogs
    python bench/clock.py --workers 4 --seconds 60 --hogs 6
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agensh_ray.lag import figures  # noqa: E402
from bench.common import machine_facts, print_result  # noqa: E402
from tests.support import LocalServices  # noqa: E402


def pressure() -> float | None:
    try:
        some = Path("/proc/pressure/cpu").read_text().splitlines()[0]
    except OSError:
        return None
    return float(dict(kv.split("=") for kv in some.split()[1:])["avg10"])


def start_hogs(cpu: int, n: int, life_s: float) -> list[int]:
    """Busy loops pinned to `cpu`, not descendants of this process (started through a shell that exits)."""
    loop = (f"{sys.executable} -c 'import os, time; os.sched_setaffinity(0, {{{cpu}}}); end = time.time() + {life_s}\n"
            "while time.time() < end: pass'")  # ends by itself should whoever started it die first
    out = subprocess.run(["sh", "-c", "; ".join([f"{loop} >/dev/null 2>&1 & echo $!"] * n)],
                         capture_output=True, text=True, check=True, timeout=30).stdout
    return [int(p) for p in out.split()]


async def phase(host, seconds: float, name: str) -> dict:
    p0, s0 = pressure(), host.status()
    await asyncio.sleep(seconds)
    s1, p1 = host.status(), pressure()
    f = figures(host.cfg.time_scale, s1, s0)
    calls = {side: sum(v - s0.get(k, 0) for k, v in s1.items() if k.startswith(side))
             for side in ("lag_agent_b", "lag_server_b")}
    print(f"{name}: {f.why} (tool calls timed {calls['lag_agent_b']} at the agent, {calls['lag_server_b']} at the "
          f"server; machine CPU pressure avg10 {p0} -> {p1})", flush=True)
    return {**f.model_dump(exclude={"why", "time_scale"}), "pressure_avg10": p1}


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--time-scale", type=float, default=120.0)
    ap.add_argument("--seconds", type=float, default=30.0, help="wall seconds of each phase")
    ap.add_argument("--hogs", type=int, default=3, help="busy loops on the one CPU of the throttled phase")
    args = ap.parse_args()
    print(machine_facts(), flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="bench-clock-"))
    ws = [f"w{i:03d}" for i in range(1, args.workers + 1)]
    cpu, mask = max(os.sched_getaffinity(0)), os.sched_getaffinity(0)
    services = LocalServices(tmp / "svc", ws)
    host = services.host(tmp / "run", ws, minutes=600, time_scale=args.time_scale, seed=1)
    await host.start()
    hogs: list[int] = []
    try:
        for w in ws:
            await host.launch(w)
        await asyncio.sleep(10)  # the first turns under way
        calm = await phase(host, args.seconds, "as the machine is")
        # The host's loop (this thread) and its sim process, from now on, share one CPU with the hogs. The sim
        # process started above is pinned too, through its pid.
        os.sched_setaffinity(0, {cpu})
        for pid in _tree(os.getpid()):
            try:
                os.sched_setaffinity(pid, {cpu})
            except OSError:
                pass
        hogs = start_hogs(cpu, args.hogs, life_s=args.seconds + 120)
        hogged = await phase(host, args.seconds, f"with {args.hogs} hogs on CPU {cpu}")
    finally:
        for pid in hogs:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:  # it ended by itself
                pass
        for pid in _tree(os.getpid()):
            try:
                os.sched_setaffinity(pid, mask)
            except OSError:
                pass
        await host.stop()
        services.close()
    print_result({"workers": args.workers, "time_scale": args.time_scale, "seconds": args.seconds,
                  "hogs": args.hogs, "calm": calm, "hogged": hogged})


def _tree(root: int) -> list[int]:
    """Every thread of `root` and of its descendants (affinity is per thread)."""
    import psutil

    out = []
    for p in [psutil.Process(root), *psutil.Process(root).children(recursive=True)]:
        try:
            out += [t.id for t in p.threads()]
        except psutil.Error:
            pass
    return out


if __name__ == "__main__":
    asyncio.run(main())
