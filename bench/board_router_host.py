"""The simulated side of bench/board_router.py: `BenchHost`, a WorkerActor without agents (a real
HostInbox for its 64 workers, and coroutines that play them against the board and the chat), and
`NoForge`, the forge stand-in the routers poll.

These actor classes are shipped to Ray's workers by value, as they were when they lived in the
bench's __main__: the workers' sys.path has bench/ and the working directory, not necessarily the
project root, so they could not import this module by name.
"""

from __future__ import annotations

import asyncio
import gc
import os
import random
import sys
import time

import ray
import ray.cloudpickle

from agensh_ray.actors.board import BoardHandle
from agensh_ray.models import BoardEntryIn
from agensh_ray.render import render
from agensh_ray.routing import HostInbox

PROBE = "probe"
WORDS = ("parser", "tokenizer", "tac", "rot13", "caesar", "upper", "lower", "title", "reverse", "squeeze",
         "number", "head", "sort", "freq", "palindromes", "registry", "newline", "unicode", "tabs", "empty")
TYPES = ("OBSERVED", "FACT", "FACT", "FAIL", "CLAIM", "PATCH_SUMMARY")


def entry_text(rng: random.Random, worker: str, i: int) -> tuple[str, str]:
    t = rng.choice(TYPES)
    a, b = rng.sample(WORDS, 2)
    return t, f"{a} and {b}: {worker} note {i} on line {rng.randint(1, 999)}"[:100]


def fill_text(host_id: str, k: int, j: int) -> str:
    """The text of entry j of batch k that host `host_id` writes to fill the board for the grep phase."""
    return f"{WORDS[j % 20]} {WORDS[(j * 7 + k) % 20]} fill {host_id} {k}.{j}"


@ray.remote(num_cpus=0)
class NoForge:
    """Forge stand-in: the routers poll `events_since`; nothing happens on the forge in this bench."""

    def events_since(self, cursor: int, limit: int = 1000) -> list:
        return []


@ray.remote(num_cpus=0, max_concurrency=1000)
class BenchHost:
    """A WorkerActor without agents: a real HostInbox for its workers, and coroutines that play them."""

    def __init__(self, host_id: str, workers: list[str], board: BoardHandle, chat, all_workers: list[str]):
        self.host_id = host_id
        self.workers = workers
        self.inbox = HostInbox(workers)
        self.board = board
        self.chat = chat
        self.all_workers = all_workers
        self.probe_seen: dict[int, float] = {}
        self.stats = {"posts": [], "reads": [], "read_sizes": [], "taken": 0, "turns": 0, "dms": 0, "errors": 0,
                      "take_cpu_s": 0.0, "cpu_s": 0.0}
        self._stop = asyncio.Event()
        gc.freeze()  # Ray's and the libraries' objects: no full collection needs to walk them again

    def pid(self) -> int:
        return os.getpid()

    # -- router intake (what WorkerHost.deliver does) --------------------------------------
    def deliver(self, events, cursors) -> int:
        now = time.time()
        for ev in events:
            if ev.author == PROBE:
                self.probe_seen[ev.seq] = now
        self.board.observe([ev.row for ev in events if ev.row is not None], cursors.get("board"))
        return self.inbox.accept(events, cursors)

    def cursors(self) -> dict[str, int]:
        return dict(self.inbox.cursors)

    def drain(self) -> int:
        return sum(len(self.inbox.take(w, urgent_only=False)) for w in self.workers)

    def probes(self) -> dict[int, float]:
        return dict(self.probe_seen)

    # -- phase 1: paper-like load ----------------------------------------------------------
    async def run_load(self, speed: float, seconds: float, seed: int) -> dict:
        self._stop.clear()
        self.stats = {"posts": [], "reads": [], "read_sizes": [], "taken": 0, "turns": 0, "dms": 0, "errors": 0,
                      "take_cpu_s": 0.0, "cpu_s": 0.0}
        self.inflight = {"post": 0, "read": 0, "dm": 0}
        gc_t = {"s": 0.0, "t": 0.0}

        def on_gc(phase: str, info: dict) -> None:
            if phase == "start":
                gc_t["t"] = time.perf_counter()
            else:
                gc_t["s"] += time.perf_counter() - gc_t["t"]

        gc.callbacks.append(on_gc)
        p0 = time.process_time()
        tasks = [asyncio.create_task(self._worker(w, speed, seed + i)) for i, w in enumerate(self.workers)]
        lag: list[float] = []
        self.stats["loop_lag"] = lag

        async def watch_lag() -> None:  # how late the event loop runs a 10 ms timer: the host's own queueing
            while not self._stop.is_set():
                t = time.perf_counter()
                await asyncio.sleep(0.01)
                lag.append((time.perf_counter() - t - 0.01) * 1000)

        tasks.append(asyncio.create_task(watch_lag()))
        await asyncio.sleep(seconds)
        self._stop.set()
        done, stuck = await asyncio.wait(tasks, timeout=30)
        for t in stuck:
            t.cancel()
        self.stats["stuck"] = {k: v for k, v in self.inflight.items() if v} if stuck else {}
        self.stats["cpu_s"] = time.process_time() - p0
        gc.callbacks.remove(on_gc)
        self.stats["gc_s"] = gc_t["s"]
        self.stats["fetches"], self.stats["rows"] = self.board.fetch_counts()
        return self.stats

    async def _sleep(self, s: float) -> bool:
        try:
            await asyncio.wait_for(self._stop.wait(), s)
            return False
        except asyncio.TimeoutError:
            return True

    async def _worker(self, w: str, speed: float, seed: int) -> None:
        rng = random.Random(seed)
        post_every, turn_every, dm_every = 60.0 / speed, 120.0 / speed, 600.0 / speed
        now = time.monotonic()
        next_post = now + rng.uniform(0, post_every)
        next_turn = now + rng.uniform(0, turn_every)
        next_dm = now + rng.expovariate(1 / dm_every)
        i = 0
        while True:
            due = min(next_post, next_turn, next_dm)
            if not await self._sleep(max(0.0, due - time.monotonic())):
                return
            now = time.monotonic()
            try:
                if now >= next_turn:  # turn start: the whole queue, then the recent view
                    c0 = time.thread_time()
                    items = self.inbox.take_shared(w, urgent_only=False)
                    render(items, mid_turn=False)
                    self.stats["take_cpu_s"] += time.thread_time() - c0
                    self.stats["taken"] += len(items)
                    self.stats["turns"] += 1
                    t0 = time.perf_counter()
                    self.inflight["read"] += 1
                    view = await self.board.arecent()
                    self.inflight["read"] -= 1
                    self.stats["reads"].append((time.perf_counter() - t0) * 1000)
                    self.stats["read_sizes"].append(len(view))
                    next_turn += turn_every * rng.uniform(0.8, 1.2)
                if now >= next_post:
                    t, text = entry_text(rng, w, i)
                    i += 1
                    t0 = time.perf_counter()
                    self.inflight["post"] += 1
                    await self.board.awrite(BoardEntryIn(type=t, text=text, worker_id=w))
                    self.inflight["post"] -= 1
                    self.stats["posts"].append((time.perf_counter() - t0) * 1000)
                    c0 = time.thread_time()
                    items = self.inbox.take_shared(w, urgent_only=True)
                    render(items, mid_turn=True)  # the tool result's tail
                    self.stats["take_cpu_s"] += time.thread_time() - c0
                    self.stats["taken"] += len(items)
                    next_post += post_every * rng.uniform(0.5, 1.5)
                if now >= next_dm:
                    to = rng.choice(self.all_workers)
                    if to != w:
                        self.inflight["dm"] += 1
                        await self.chat.dm.remote(w, to, f"{w}: I take {rng.choice(WORDS)}, ok?")
                        self.inflight["dm"] -= 1
                        self.stats["dms"] += 1
                    next_dm += rng.expovariate(1 / dm_every)
            except Exception:
                self.stats["errors"] += 1

    # -- phase 2/3: write capacity, fill ---------------------------------------------------
    async def blast(self, board: BoardHandle, rate: float, batch: int, seconds: float, max_inflight: int = 16) -> dict:
        """Offer `rate` entries/s in batches of `batch` for `seconds`; per-call latencies (ms) and entries acked."""
        lat: list[float] = []
        acked = 0
        sem = asyncio.Semaphore(max_inflight)
        interval = batch / rate
        n = 0

        async def one(k: int) -> None:
            nonlocal acked
            entries = [BoardEntryIn(type="FACT", text=f"{self.host_id} capacity {k}.{j} tokenizer {j % 97}",
                                    worker_id=self.workers[j % len(self.workers)]) for j in range(batch)]
            t0 = time.perf_counter()
            try:
                res = await board.awrite_batch(entries)
                acked += len(res)
                lat.append((time.perf_counter() - t0) * 1000)
            finally:
                sem.release()

        t_start = time.perf_counter()
        pending = []
        while time.perf_counter() - t_start < seconds:
            target = t_start + n * interval
            delay = target - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            await sem.acquire()
            pending.append(asyncio.create_task(one(n)))
            n += 1
        await asyncio.gather(*pending)
        return {"lat": lat, "acked": acked, "elapsed": time.perf_counter() - t_start}

    async def fill(self, board: BoardHandle, total: int, batch: int) -> int:
        done = 0
        k = 0
        while done < total:
            n = min(batch, total - done)
            entries = [BoardEntryIn(type=TYPES[j % len(TYPES)], text=fill_text(self.host_id, k, j),
                                    worker_id=self.workers[j % len(self.workers)]) for j in range(n)]
            await board.awrite_batch(entries)
            done += n
            k += 1
        return done


# By value, like a class of __main__ (see the module docstring): cloudpickle would otherwise ship the
# functions and constants the actors use (entry_text, WORDS, ...) as references to this module.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
