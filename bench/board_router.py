"""The board and the routers at the paper's scale: 1,024 simulated workers in 16 host actors.

What runs: the real BoardActor (group commit, fsync), the real RouterActor pool, the
real ChatActor, and 16 light `BenchHost` actors (bench/board_router_host.py) that each
hold a real `HostInbox` for 64 workers and play their agents (no agent processes: this
measures the infrastructure, not the models). The forge is a stand-in whose `events_since` returns
[] (the real one starts a git HTTP server and has no load here).

Phases:
1. paper-like load, accelerated by --speed: every worker posts a board entry about
   once a minute, reads the recent view (2,000 entries) once per ~2-minute turn, takes
   its queue at turn start and its urgent items at every call, and DMs a peer about
   every 10 minutes. A probe entry every 0.25 s measures fan-out: from the write call
   until the entry is in the queues of all 1,024 workers (the last host's accept).
2. write capacity: 4 hosts write batches of 256 (what a busy host's write coalescer
   sends) at rising rates to a second board with no routers; the highest rate
   sustained with a write-call p99 <= 50 ms is max_entries_per_s.
3. grep: the second board is filled to 1,000,000 entries, then timed greps.

Prints machine facts (with the disk's own fsync latency), progress with the diagnostics
that place a latency (CPU per role, the board's own write latency and GC pauses, how late
the hosts' event loops run a timer), and as its last line one JSON object: the issue's
figures plus phase1_cores (CPU the x10 load took, all roles), fill_entries_per_s
(sustained writes with no latency bound), grep_1m_no_literal_ms (regexes without a word
to index on) and the fsync figures. Actor processes that outlive ray.shutdown() are killed.
Ray workers run at nice 0 and without per-call task events here (flags to change).

    python bench/board_router.py                 # 1,024 workers, load x10
    python bench/board_router.py --speed 1 --load-s 120
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import ray

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agensh_ray.actors.board import BoardHandle, get_or_create_board  # noqa: E402
from agensh_ray.actors.chat import ChatActor  # noqa: E402
from agensh_ray.actors.router import RouterActor  # noqa: E402
from agensh_ray.config import RoutingConfig  # noqa: E402
from agensh_ray.models import BoardEntryIn  # noqa: E402
from bench.board_router_host import PROBE, WORDS, BenchHost, NoForge  # noqa: E402
from bench.common import (  # noqa: E402
    MemorySampler,
    cpu_by_process,
    cpu_by_role,
    descendants,
    fsync_ms,
    machine_facts,
    pct,
    print_result,
    ray_system_pids,
    reap,
    say,
)


GREP_PATTERNS = [("tokenizer 42", False), ("palindromes", False), (r"caesar\s+rot13", True), ("fill h03 7", False),
                 (r"unicode|squeeze", True), (r"\bregistry\b.*newline", True)]
"""The greps of phase 3, (pattern, regex): grep_1m_ms is the slowest of their medians."""
GREP_NO_LITERAL = (r"\d{3}\.\d+ ", r"[0-9]+x")
"""Regexes without a word to index on (a scan of the whole history): grep_1m_no_literal_ms."""


def ray_config(a) -> dict:
    """Ray settings of the instance this bench starts (printed with the machine facts)."""
    cfg: dict = {"worker_niceness": a.niceness}
    if not a.task_events:
        cfg["task_events_report_interval_ms"] = 0  # no per-call task records for the dashboard/state API
    return cfg


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=1024)
    ap.add_argument("--hosts", type=int, default=16)
    ap.add_argument("--routers", type=int, default=2)
    ap.add_argument("--speed", type=float, default=10.0, help="acceleration of the paper-like load")
    ap.add_argument("--load-s", type=float, default=60.0, help="seconds of paper-like load")
    ap.add_argument("--policy", default="all", choices=["all", "relevant"])
    ap.add_argument("--ship-ms", type=float, default=RoutingConfig().ship_interval_s * 1000,
                    help="a router's minimum interval between delivery calls to one host (RoutingConfig.ship_interval_s)")
    ap.add_argument("--linger-ms", type=float, default=RoutingConfig().linger_s * 1000,
                    help="a router's minimum interval between reads of one source (RoutingConfig.linger_s)")
    ap.add_argument("--grep-entries", type=int, default=1_000_000)
    ap.add_argument("--rates", default="1000,2500,5000,7500,10000,15000,20000,40000,60000",
                    help="offered entries/s of the capacity ramp")
    ap.add_argument("--step-s", type=float, default=4.0)
    ap.add_argument("--cap-writers", type=int, default=4, help="hosts that write in the capacity ramp")
    ap.add_argument("--cap-batch", type=int, default=256, help="entries per write call in the capacity ramp")
    ap.add_argument("--niceness", type=int, default=0, help="nice level of the Ray worker processes (Ray's default: 15)")
    ap.add_argument("--task-events", action="store_true",
                    help="keep Ray's per-call task events (off here: they cost ~40%% of a call's CPU)")
    ap.add_argument("--log-dir", default=None, help="where the board logs go (default: the system temp folder)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    a = ap.parse_args()

    t0 = time.time()
    tmp = Path(tempfile.mkdtemp(prefix="bench-board-router-", dir=a.log_dir))
    facts = machine_facts(ray=ray.__version__)
    facts["ray_system_config"] = ray_config(a)
    facts["log_dir"] = str(tmp)
    facts.update(fsync_ms(tmp))
    print("machine:", json.dumps(facts), flush=True)
    # Ray starts its workers at nice 15 so they yield to the raylet; on a machine shared with other
    # work (this one) that hands every actor's CPU to any other process, which is not what this measures.
    ray.init(address="local", num_cpus=2, include_dashboard=False, namespace=f"bench-{uuid.uuid4().hex[:6]}",
             log_to_driver=False, _system_config=ray_config(a))
    result: dict = {"workers": a.workers}
    system = ray_system_pids()
    # RSS only: reading PSS over the instance every 0.5 s would take CPU from the latencies measured here.
    sampler = MemorySampler([*system, os.getpid()], interval=0.5, pss=False).start()
    try:
        result.update(run(a, tmp, t0, sampler))
    finally:
        sampler.stop()
        ours = descendants(system)
        ray.shutdown()
        reap(ours)
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    result["peak_rss_mib"] = round(sampler.peak_rss_sum / 2**20)
    result.update({k: v for k, v in facts.items() if k.startswith("fsync")})
    result["wall_s"] = round(time.time() - t0, 1)
    print_result(result)


def run(a, tmp: Path, t0: float, sampler: MemorySampler) -> dict:
    out: dict = {}
    width = max(4, len(str(a.workers)))
    workers = [f"w{i:0{width}d}" for i in range(1, a.workers + 1)]
    per = -(-a.workers // a.hosts)
    groups = {f"h{i:02d}": workers[i * per:(i + 1) * per] for i in range(a.hosts)}
    tag = uuid.uuid4().hex[:6]

    board = get_or_create_board(f"board-{tag}", tmp / "board" / "board.jsonl", run_dir=str(tmp / "run"), run_id=tag)
    chat = ChatActor.options(name=f"chat-{tag}").remote(str(tmp / "chat"), str(tmp / "run"), tag)
    forge = NoForge.options(name=f"forge-{tag}").remote()
    ray.get(chat.add_user.remote(PROBE))
    ray.get([chat.add_user.remote(w) for w in workers])
    hosts = {h: BenchHost.options(name=f"{tag}-{h}").remote(h, ws, board, chat, workers) for h, ws in groups.items()}
    host_pids = ray.get([h.pid.remote() for h in hosts.values()])
    n_r = max(1, min(a.routers, len(hosts)))
    slices = [{h: (f"{tag}-{h}", groups[h]) for h in list(groups)[r::n_r]} for r in range(n_r)]
    routers = [RouterActor.options(name=f"{tag}-router{r}").remote(
        f"r{r}", s, f"board-{tag}", f"chat-{tag}", f"forge-{tag}", a.policy, 1.0,
        linger_s=a.linger_ms / 1000, ship_interval_s=a.ship_ms / 1000) for r, s in enumerate(slices)]
    router_pids = ray.get([r.ensure_started.remote() for r in routers])
    say(t0, f"{a.workers} workers on {len(hosts)} hosts, {len(routers)} routers, policy {a.policy}")

    # preload: 2,000 entries so the recent view is full
    pre = [BoardEntryIn(type="FACT", text=f"preload {i} {WORDS[i % 20]}", worker_id=workers[i % len(workers)])
           for i in range(2000)]
    for k in range(0, 2000, 500):
        board.write_batch(pre[k:k + 500])
    wait_delivered(board, hosts, t0)
    ray.get([h.drain.remote() for h in hosts.values()])

    # ---- phase 1: paper-like load + fan-out probes
    say(t0, f"phase 1: paper-like load x{a.speed:g} for {a.load_s:g} s "
            f"(~{a.workers / 60 * a.speed:.0f} posts/s, {a.workers / 120 * a.speed:.0f} recent reads/s)")
    cpu0, t_cpu0 = cpu_by_process(sampler.roots), time.time()
    loads = [h.run_load.remote(a.speed, a.load_s, 1000 * i) for i, h in enumerate(hosts.values())]
    probes: dict[int, float] = {}
    time.sleep(min(5.0, a.load_s / 4))  # let the load settle
    end = time.time() + a.load_s - min(5.0, a.load_s / 4) - 2
    while time.time() < end:
        ts = time.time()
        e = board.write(BoardEntryIn(type="FACT", text="probe: fan-out timing", worker_id=PROBE))
        probes[e.seq] = ts
        time.sleep(0.25)
    stats = ray.get(loads)
    cores = cpu_by_role(cpu0, cpu_by_process(sampler.roots), time.time() - t_cpu0)
    out["phase1_cores"] = round(sum(cores.values()), 2)
    say(t0, f"phase 1 cores used by role: {cores} (machine load average {os.getloadavg()[0]:.1f})")
    wait_delivered(board, hosts, t0)
    seen = ray.get([h.probes.remote() for h in hosts.values()])
    fan = [(max(s[q] for s in seen) - t) * 1000 for q, t in probes.items() if all(q in s for s in seen)]
    posts = [x for s in stats for x in s["posts"]]
    reads = [x for s in stats for x in s["reads"]]
    sizes = [x for s in stats for x in s["read_sizes"]]
    out.update(
        board_post_p50_ms=round(pct(posts, 0.5), 2), board_post_p99_ms=round(pct(posts, 0.99), 2),
        recent_read_p50_ms=round(pct(reads, 0.5), 2), recent_read_p99_ms=round(pct(reads, 0.99), 2),
        fanout_p50_ms=round(pct(fan, 0.5), 1), fanout_p99_ms=round(pct(fan, 0.99), 1),
    )
    rstat = ray.get([r.status.remote() for r in routers])
    binfo = board.info()
    say(t0, f"phase 1 inside the board: write p50 {binfo['write_ms_p50']} p99 {binfo['write_ms_p99']} ms "
            f"({binfo['commits']} commits of {binfo['entries_committed']} entries)")
    say(t0, f"phase 1 done: {len(posts)} posts ({len(posts) / a.load_s:.0f}/s), {len(reads)} recent reads "
            f"(median size {statistics.median(sizes) if sizes else 0:.0f}), {sum(s['dms'] for s in stats)} DMs, "
            f"{sum(s['turns'] for s in stats)} turns, {sum(s['taken'] for s in stats)} items taken "
            f"(take+render {sum(s['take_cpu_s'] for s in stats):.1f} and gc {sum(s['gc_s'] for s in stats):.1f} of the hosts' "
            f"{sum(s['cpu_s'] for s in stats):.1f} CPU s), {sum(s['fetches'] for s in stats)} recent fetches "
            f"({sum(s['rows'] for s in stats)} rows), "
            f"{len(fan)}/{len(probes)} probes, "
            f"{sum(s['errors'] for s in stats)} errors, stuck: {[s['stuck'] for s in stats if s['stuck']]}; routers: {sum(r['calls'] for r in rstat)} host calls, "
            f"{sum(r['shipped'] for r in rstat)} events shipped")
    lags = [x for s in stats for x in s["loop_lag"]]
    say(t0, f"phase 1 host event loops: timer lateness p50 {pct(lags, 0.5):.1f} p99 {pct(lags, 0.99):.1f} "
            f"max {max(lags, default=0):.1f} ms")
    say(t0, "  " + json.dumps(out))
    for r in routers:
        ray.kill(r, no_restart=True)

    # ---- phase 2: write capacity on a second board (no routers attached)
    cap = get_or_create_board(f"cap-{tag}", tmp / "cap" / "board.jsonl", run_dir=str(tmp / "run"), run_id=tag)
    cap.last_seq()  # started
    ray.get([h.blast.remote(cap, 500 / len(hosts), 64, 1.0) for h in hosts.values()])  # warm-up, not measured
    writers = list(hosts.values())[: a.cap_writers]
    best = 0.0
    for rate in [float(r) for r in a.rates.split(",")]:
        res = ray.get([h.blast.remote(cap, rate / len(writers), a.cap_batch, a.step_s) for h in writers])
        lat = [x for r in res for x in r["lat"]]
        got = sum(r["acked"] for r in res) / max(r["elapsed"] for r in res)
        p99 = pct(lat, 0.99)
        ok = p99 <= 50 and got >= 0.9 * rate
        info = cap.info()
        say(t0, f"phase 2: offered {rate:>7.0f}/s -> {got:>7.0f}/s, call p50 {pct(lat, 0.5):6.1f} ms "
                f"p99 {p99:6.1f} ms (inside the board: p50 {info['write_ms_p50']} p99 {info['write_ms_p99']} ms, "
                f"gc pauses {info['gc_pauses']} max {info['gc_pause_max_ms']} ms) "
                f"{'ok' if ok else 'over'}")
        if not ok:
            break
        best = max(best, got)
    out["max_entries_per_s"] = round(best)

    # ---- phase 3: grep over 1,000,000 entries
    have = cap.last_seq()
    need = max(0, a.grep_entries - have)
    t1 = time.time()
    ray.get([h.fill.remote(cap, need // len(hosts) + 1, 2000) for h in hosts.values()])
    fill_s = time.time() - t1
    out["fill_entries_per_s"] = round((cap.last_seq() - have) / fill_s)
    say(t0, f"phase 3: filled the board to {cap.last_seq():,} entries in {fill_s:.1f} s "
            f"({out['fill_entries_per_s']:,} entries/s, no latency bound)")
    times = []
    for pat, rx in GREP_PATTERNS:
        runs = []
        for _ in range(3):
            t = time.perf_counter()
            hits = cap.grep(pat, regex=rx, limit=50)
            runs.append((time.perf_counter() - t) * 1000)
        times.append(statistics.median(runs))
        say(t0, f"  grep {pat!r:28} {len(hits):3d} hits  {statistics.median(runs):8.1f} ms")
    slow = []
    for pat in GREP_NO_LITERAL:
        t = time.perf_counter()
        try:
            cap.grep(pat, regex=True, limit=50)
            slow.append((time.perf_counter() - t) * 1000)
        except Exception as exc:  # the time budget
            slow.append((time.perf_counter() - t) * 1000)
            say(t0, f"  grep {pat!r}: {exc}")
        say(t0, f"  grep {pat!r:28} (no literal to index on) {slow[-1]:8.1f} ms")
    out["grep_1m_ms"] = round(max(times), 1)
    out["grep_1m_no_literal_ms"] = round(max(slow), 1)
    out["grep_entries"] = cap.last_seq()
    return out


def wait_delivered(board: BoardHandle, hosts: dict, t0: float, timeout: float = 120) -> None:
    last = board.last_seq()
    deadline = time.time() + timeout
    while time.time() < deadline:
        if all(c["board"] >= last for c in ray.get([h.cursors.remote() for h in hosts.values()])):
            return
        time.sleep(0.1)
    say(t0, f"WARNING: hosts did not reach board seq {last} within {timeout} s")


if __name__ == "__main__":
    main()
