"""The model gateway with 1,024 simulated agents: added latency, throughput under a 429 storm,
fairness, and 1,024 streams held at once.

What runs: the real `GatewayActor` (Ray, its HTTP front on loopback) and its `CoordinatorActor`,
the bundled fake OpenAI provider (`python -m agensh_ray.fakes.openai_server`, a process of its
own, with a fault schedule), and 1,024 simulated agents in this process (asyncio + aiohttp),
each looping: think 10-30 s, send one streaming chat-completions request (a ~3 KB body), read the
answer streamed over ~2 s (20 chunks, 0.1 s apart), as in the paper's runs.

Phases (each with a fresh fake and gateway):
1. latency: no limits, no faults; each request goes to the gateway or straight to the provider,
   at random, so both see the same machine. added_latency = the gateway's quantile of the time to
   the last byte minus the direct one's (p50, p99); the time to the first byte likewise.
2. 429 storm: the provider accepts `--limit-rps` requests a second (429 with Retry-After and
   remaining-requests 0 over it) and, for `--storm-s` of every `--storm-every` seconds, answers
   429 to a share `--storm-p` of the calls; the gateway is told the provider's limit. Demand (~46
   requests/s) is above the limit, so calls queue. throughput_vs_limit = the provider's answered
   calls per second / its limit, over the phase after a warm-up; fairness_jain = Jain's index of
   the calls each agent completed then; lost = calls an agent never got a whole answer to.
3. 1,024 streams: every agent sends at once, answers streamed over ~10 s; streams_held = the most
   calls the gateway had in flight at once.

gateway_cpu_ms_per_request = the gateway process's CPU over all phases / the calls it carried;
peak_rss_mib = its peak resident memory.

    python bench/gateway.py                      # ~6 minutes
    python bench/gateway.py --agents 256 --phase2-s 60
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import psutil
import ray

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agensh_ray.actors.gateway import CoordinatorActor, GatewayActor  # noqa: E402
from agensh_ray.config import GatewayConfig, ModelLimit, RetryConfig, RunConfig  # noqa: E402
from agensh_ray.fakes.faults import FaultSchedule, Storm  # noqa: E402
from agensh_ray.fakes.script import Script  # noqa: E402
from bench.common import MemorySampler, machine_facts, pct, print_result, say  # noqa: E402

REAL_KEY = "sk-bench-provider-key-0123456789"
ANSWER = "The tests pass on my branch; I am merging main into it before I open the pull request. " * 5
PROMPT = "Here is the board and the diff you asked for.\n" + "x = compute(a, b)  # a line of context\n" * 70


class Fake:
    """The fake provider in a process of its own."""

    def __init__(self, folder: Path, faults: FaultSchedule):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "script.json").write_text(Script(side=ANSWER).model_dump_json())
        (folder / "faults.json").write_text(faults.model_dump_json())
        self.record = folder / "requests.jsonl"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agensh_ray.fakes.openai_server", "--script", str(folder / "script.json"),
             "--faults", str(folder / "faults.json"), "--api-key", REAL_KEY, "--record", str(self.record),
             "--port", "0"], stdout=subprocess.PIPE, text=True, cwd=ROOT)
        line = self.proc.stdout.readline()
        self.url = line.split("listening on ", 1)[1].strip()

    def answered(self) -> list[tuple[float, int]]:
        out = []
        for line in self.record.read_text().splitlines():
            r = json.loads(line)
            out.append((r["ts"], r["status"]))
        return out

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


class Gateway:
    """A GatewayActor (and its coordinator) whose upstream is `fake`."""

    def __init__(self, fake: Fake, gw: GatewayConfig, run_dir: Path, agents: list[str]):
        cfg = RunConfig(workers=len(agents), harness="copilot", gateway=gw.model_copy(update={"enabled": True}))
        env = {"env_vars": {"COPILOT_PROVIDER_BASE_URL": fake.url, "COPILOT_PROVIDER_API_KEY": REAL_KEY}}
        cj = cfg.model_dump_json()
        self.coord = CoordinatorActor.remote(cj)
        self.actor = GatewayActor.options(runtime_env=env).remote(cj, str(run_dir), "bench", secrets.token_bytes(32),
                                                                   "n0", self.coord)
        ray.get(self.actor.start.remote())
        self.pid = ray.get(self.actor.pid.remote())
        ends = ray.get(self.actor.endpoint.remote(agents))
        self.url = next(iter(ends.values())).url
        self.keys = {a: e.key for a, e in ends.items()}

    def cpu_s(self) -> float:
        t = psutil.Process(self.pid).cpu_times()
        return t.user + t.system

    def status(self) -> dict:
        return ray.get(self.actor.status.remote())

    def stop(self) -> None:
        ray.get(self.actor.stop.remote())
        ray.kill(self.actor)
        ray.kill(self.coord)


class Agents:
    """The simulated agents: their loops and what each call met."""

    def __init__(self, n: int, seed: int):
        self.ids = [f"w{i:04d}" for i in range(1, n + 1)]
        self.rng = random.Random(seed)
        self.results: list[dict] = []
        self.body = json.dumps({"model": "gpt-4.1", "stream": True, "stream_options": {"include_usage": True},
                                "messages": [{"role": "system", "content": "You are a coding agent."},
                                             {"role": "user", "content": PROMPT}]}).encode()

    async def call(self, http: aiohttp.ClientSession, agent: str, url: str, key: str, via: str) -> dict:
        t0 = time.perf_counter()
        res = {"agent": agent, "via": via, "t0": time.time(), "ok": False, "status": None, "ttfb": None}
        try:
            async with http.post(url + "/chat/completions", data=self.body,
                                 headers={"authorization": f"Bearer {key}", "content-type": "application/json"}) as r:
                res["status"] = r.status
                tail = b""
                async for chunk in r.content.iter_any():
                    if res["ttfb"] is None:
                        res["ttfb"] = (time.perf_counter() - t0) * 1000
                    tail = (tail + chunk)[-64:]
                res["ok"] = r.status == 200 and b"[DONE]" in tail
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            res["error"] = f"{type(exc).__name__}: {exc}"
        res["ms"] = (time.perf_counter() - t0) * 1000
        res["t1"] = time.time()
        self.results.append(res)
        return res

    async def loop(self, agent: str, until: float, target, think: tuple[float, float], start_within: float,
                   http: aiohttp.ClientSession) -> None:
        await asyncio.sleep(self.rng.uniform(0, start_within))
        while time.time() < until:
            url, key, via = target(agent)
            await self.call(http, agent, url, key, via)
            await asyncio.sleep(min(self.rng.uniform(*think), max(0.0, until - time.time())))

    async def run(self, seconds: float, target, think, start_within: float) -> list[dict]:
        self.results = []
        until = time.time() + seconds
        conn = aiohttp.TCPConnector(limit=0, limit_per_host=0, force_close=False)
        timeout = aiohttp.ClientTimeout(total=900, sock_read=700)
        async with aiohttp.ClientSession(connector=conn, timeout=timeout) as http:
            await asyncio.gather(*(self.loop(a, until, target, think, start_within, http) for a in self.ids))
        return list(self.results)

    async def all_at_once(self, url: str, keys: dict[str, str], watch) -> list[dict]:
        self.results = []
        conn = aiohttp.TCPConnector(limit=0, limit_per_host=0)
        async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=600)) as http:
            calls = [asyncio.create_task(self.call(http, a, url, keys[a], "gateway")) for a in self.ids]
            await watch(calls)
            await asyncio.gather(*calls)
        return list(self.results)


def jain(xs: list[float]) -> float:
    return (sum(xs) ** 2) / (len(xs) * sum(x * x for x in xs)) if xs and any(xs) else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--agents", type=int, default=1024)
    ap.add_argument("--think", type=float, nargs=2, default=(10.0, 30.0), help="seconds between an agent's calls")
    ap.add_argument("--chunks", type=int, default=20, help="pieces each answer is streamed in")
    ap.add_argument("--chunk-delay", type=float, default=0.1, help="seconds between two pieces")
    ap.add_argument("--phase1-s", type=float, default=90.0)
    ap.add_argument("--phase2-s", type=float, default=180.0)
    ap.add_argument("--warmup-s", type=float, default=40.0, help="phase 2: seconds before throughput is counted")
    ap.add_argument("--limit-rps", type=float, default=30.0, help="phase 2: the provider's limit, requests/s")
    ap.add_argument("--storm-every", type=float, default=15.0)
    ap.add_argument("--storm-s", type=float, default=3.0)
    ap.add_argument("--storm-p", type=float, default=0.5, help="share of calls failed during a storm")
    ap.add_argument("--hold-delay", type=float, default=0.5, help="phase 3: seconds between pieces (~10 s streams)")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()

    t0 = time.time()
    print(json.dumps({"machine": machine_facts(ray=ray.__version__, aiohttp=aiohttp.__version__)}), flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="bench-gateway-"))
    agents = Agents(a.agents, a.seed)
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="WARNING", log_to_driver=False)
    cpu = 0.0
    carried = 0
    peak_rss = 0
    out: dict = {"agents": a.agents}
    try:
        # -- phase 1: added latency --------------------------------------------------------
        fake = Fake(tmp / "p1", FaultSchedule(chunks=a.chunks, chunk_delay_s=a.chunk_delay, seed=a.seed))
        gw = Gateway(fake, GatewayConfig(), tmp / "p1" / "run", agents.ids)
        mem = MemorySampler([gw.pid], interval=1.0, pss=False).start()
        c0 = gw.cpu_s()
        say(t0, f"phase 1: {a.agents} agents for {a.phase1_s:.0f}s, each call to the gateway or direct at random")

        def half(agent: str):
            if agents.rng.random() < 0.5:
                return gw.url, gw.keys[agent], "gateway"
            return fake.url, REAL_KEY, "direct"

        p1 = asyncio.run(agents.run(a.phase1_s, half, a.think, min(a.think[0], a.phase1_s / 3)))
        cpu += gw.cpu_s() - c0
        carried += sum(r["via"] == "gateway" for r in p1)
        gw.stop()
        mem.stop()
        peak_rss = max(peak_rss, mem.peak_rss_sum)
        fake.stop()
        lat = {v: [r["ms"] for r in p1 if r["via"] == v and r["ok"]] for v in ("gateway", "direct")}
        ttfb = {v: [r["ttfb"] for r in p1 if r["via"] == v and r["ok"]] for v in ("gateway", "direct")}
        for q, name in ((0.5, "p50"), (0.99, "p99")):
            out[f"added_latency_{name}_ms"] = round(pct(lat["gateway"], q) - pct(lat["direct"], q), 2)
            out[f"added_ttfb_{name}_ms"] = round(pct(ttfb["gateway"], q) - pct(ttfb["direct"], q), 2)
        lost1 = sum(not r["ok"] for r in p1)
        say(t0, f"phase 1: {len(p1)} calls ({len(lat['gateway'])} via the gateway), {lost1} not answered whole; "
                f"last byte p50 gateway {pct(lat['gateway'], .5):.1f} / direct {pct(lat['direct'], .5):.1f} ms, "
                f"p99 {pct(lat['gateway'], .99):.1f} / {pct(lat['direct'], .99):.1f} ms; first byte p50 "
                f"{pct(ttfb['gateway'], .5):.1f} / {pct(ttfb['direct'], .5):.1f} ms")

        # -- phase 2: a 429 storm under the provider's limit ------------------------------------
        faults = FaultSchedule(rate_limit_rpm=a.limit_rps * 60, chunks=a.chunks, chunk_delay_s=a.chunk_delay,
                               storms=[Storm(start_s=a.storm_every / 2, duration_s=a.storm_s, status=429,
                                             probability=a.storm_p, retry_after_s=1.0, every_s=a.storm_every)],
                               seed=a.seed)
        fake = Fake(tmp / "p2", faults)
        limits = {"openai/*": ModelLimit(rpm=a.limit_rps * 60)}
        gw = Gateway(fake, GatewayConfig(limits=limits, retry=RetryConfig(base_s=0.5, max_wait_s=10)),
                     tmp / "p2" / "run", agents.ids)
        mem = MemorySampler([gw.pid], interval=1.0, pss=False).start()
        c0 = gw.cpu_s()
        say(t0, f"phase 2: {a.phase2_s:.0f}s, the provider takes {a.limit_rps:g}/s and storms 429 on "
                f"{a.storm_p:.0%} of calls {a.storm_s:g}s in every {a.storm_every:g}s")
        start2 = time.time()
        p2 = asyncio.run(agents.run(a.phase2_s, lambda ag: (gw.url, gw.keys[ag], "gateway"), a.think, a.think[1]))
        end2 = time.time()
        st = gw.status()
        cpu += gw.cpu_s() - c0
        carried += len(p2)
        gw.stop()
        mem.stop()
        peak_rss = max(peak_rss, mem.peak_rss_sum)
        seen = fake.answered()
        fake.stop()
        lo, hi = start2 + a.warmup_s, start2 + a.phase2_s
        answered = sum(1 for ts, s in seen if s == 200 and lo <= ts < hi)
        out["requests"] = len(p1) + len(p2)
        out["lost"] = lost1 + sum(not r["ok"] for r in p2)
        out["throughput_vs_limit"] = round(answered / (a.limit_rps * (hi - lo)), 3)
        done = {ag: 0 for ag in agents.ids}
        for r in p2:
            if r["ok"] and lo <= r["t1"] < hi:
                done[r["agent"]] += 1
        out["fairness_jain"] = round(jain(list(done.values())), 4)
        refused = sum(1 for ts, s in seen if s == 429)
        waits = sorted(r["ms"] for r in p2 if r["ok"])
        say(t0, f"phase 2: {len(p2)} calls, {out['lost']} lost (both phases); the provider answered {answered} in "
                f"{hi - lo:.0f}s ({answered / (hi - lo):.1f}/s of {a.limit_rps:g}) and refused {refused} with 429; "
                f"gateway retries {st.get('retries', 0)}; call p50 {pct(waits, .5) / 1000:.1f}s p99 "
                f"{pct(waits, .99) / 1000:.1f}s (queueing included); {end2 - start2:.0f}s wall")
        out["provider_429s"] = refused
        out["gateway_retries"] = st.get("retries", 0)

        # -- phase 3: 1,024 streams at once -----------------------------------------------------
        fake = Fake(tmp / "p3", FaultSchedule(chunks=a.chunks, chunk_delay_s=a.hold_delay, seed=a.seed))
        gw = Gateway(fake, GatewayConfig(), tmp / "p3" / "run", agents.ids)
        mem = MemorySampler([gw.pid], interval=0.5, pss=False).start()
        c0 = gw.cpu_s()
        peak = [0]

        async def watch(calls):
            while not all(c.done() for c in calls):
                st = await asyncio.to_thread(gw.status)
                peak[0] = max(peak[0], st.get("active", 0))
                await asyncio.sleep(0.5)

        p3 = asyncio.run(agents.all_at_once(gw.url, gw.keys, watch))
        cpu += gw.cpu_s() - c0
        carried += len(p3)
        gw.stop()
        mem.stop()
        peak_rss = max(peak_rss, mem.peak_rss_sum)
        fake.stop()
        out["streams_held"] = peak[0]
        out["lost"] += sum(not r["ok"] for r in p3)
        out["requests"] += len(p3)
        say(t0, f"phase 3: {len(p3)} calls at once, {sum(r['ok'] for r in p3)} answered whole, {peak[0]} in flight "
                f"at the gateway at the peak; call p50 {pct([r['ms'] for r in p3], .5) / 1000:.1f}s")
        out["gateway_cpu_ms_per_request"] = round(cpu * 1000 / max(1, carried), 3)
        out["peak_rss_mib"] = round(peak_rss / 2**20, 1)
    finally:
        ray.shutdown()
    say(t0, "done")
    print_result(out)


if __name__ == "__main__":
    main()
