"""A synthetic trace shaped like a 1,024-worker run, for bench/analysis.py (Shape FULL: 6 hours, about
10 million events) and for tests (Shape SMALL: 1.5 hours, about 200k events, the last ~300 workers of
the launch schedule never start; tests/test_analysis_browser.py renders its report).

Generated with numpy + pyarrow (no pydantic per row) with the real Arrow schemas of agensh_ray.trace:
1,024 workers launched on the default schedule (one every 30 s for the first hour, then every 3 s),
16 host writers plus the board, forge, chat and driver writers, turns of ~30 s with ~8 s gaps, ~6
tool calls and one usage row per turn, board entries with colliding claims, DMs, ~8k PRs with
reviews, conflicts and diff snapshots, a score every 10 minutes; what a worker writes, it writes
after it started. 2% of the board, chat, forge and pr_changes rows are written again by a second
writer (the analysis views count each event once). The remaining event budget goes to deliveries.
Each writer's rows are written in time order, `rows_per_file` rows per file (the writer's max_rows).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from agensh_ray.trace import SCHEMA_VERSION, SCHEMAS

T0 = 1_795_000_000_000_000  # µs
WORKERS = 1024
RUN_ID = "bench"


@dataclass(frozen=True)
class Shape:
    """What the synthetic run is made of."""

    hours: float = 6
    turn_s: float = 30.0
    gap_s: float = 8.0
    tool_calls_per_turn: float = 6
    board: int = 60_000
    messages: int = 40_000
    prs: int = 8_000
    crashes: int = 100
    copies: float = 0.02
    """Share of the board, chat, forge and pr_changes rows that a second writer writes again (a reconciler
    replaying a durable log): the analysis views count each event once."""


FULL = Shape()  # the benchmark: 6 hours of 1,024 workers
SMALL = Shape(hours=1.5, turn_s=300, gap_s=60, tool_calls_per_turn=1, board=3_000, messages=2_000, prs=400, crashes=20)
"""The same 1,024 workers in a trace small enough for a test (about 200k events): 1.5 hours, so the last ~300
workers of the launch schedule never start."""
COPIED = {"board", "messages", "forge", "pr_changes"}


def launch_times(n: int) -> np.ndarray:
    """Seconds at which each worker starts: every 30 s for the first hour, then every 3 s."""
    first = min(n, 120)
    t = list(np.arange(first) * 30.0)
    t += list(3600.0 + np.arange(n - first) * 3.0)
    return np.array(t)


def up_at(rng, start: np.ndarray, t: np.ndarray) -> np.ndarray:
    """For each time in t, a random worker among those started by then (start is in launch order)."""
    return (rng.random(len(t)) * np.maximum(1, np.searchsorted(start, t, side="right"))).astype(np.int64)


def wid(idx: np.ndarray) -> pa.Array:
    names = pa.array([f"w{i + 1:04d}" for i in range(WORKERS)])
    return names.take(pa.array(idx, pa.int64()))


def prefixed(prefix: str, nums: np.ndarray) -> pa.Array:
    return pc.binary_join_element_wise(pa.scalar(prefix), pc.cast(pa.array(nums), pa.string()), "")


def choice(rng, values: list, n: int, p=None) -> pa.Array:
    return pa.array(values).take(pa.array(rng.choice(len(values), n, p=p), pa.int64()))


def ts_array(seconds: np.ndarray) -> pa.Array:
    return pa.array(T0 + (seconds * 1e6).astype(np.int64), pa.timestamp("us", tz="UTC"))


class Writer:
    """Writes tables like TraceWriters would: per writer, in time order, rows_per_file per file."""

    def __init__(self, run: Path, rows_per_file: int, copies: float = 0.0, seed: int = 0):
        self.run = run
        self.rows_per_file = rows_per_file
        self.copies = copies
        self.rng = np.random.default_rng(seed + 1)
        self.events = 0
        self.files = 0

    def write(self, table: str, cols: dict, writer: np.ndarray | str) -> None:
        n = len(cols["ts"])
        schema = SCHEMAS[table]
        full = {}
        for f in schema:
            if f.name in cols:
                full[f.name] = cols[f.name]
            elif f.name == "run_id":
                full[f.name] = pa.array([RUN_ID] * n) if n else pa.array([], pa.string())
            elif f.name == "schema_version":
                full[f.name] = pa.array(np.full(n, SCHEMA_VERSION, np.int64))
            elif f.name == "event_id" or (not f.nullable and pa.types.is_string(f.type)):
                full[f.name] = pa.array([""] * n, pa.string())  # e.g. lifecycle.node: "" where unknown
            else:
                full[f.name] = pa.nulls(n, f.type)
        tbl = pa.table({k: (v if isinstance(v, (pa.Array, pa.ChunkedArray)) else pa.array(v)) for k, v in full.items()})
        tbl = pa.Table.from_arrays([tbl[f.name].cast(f.type) for f in schema], schema=schema)
        folder = self.run / "trace" / table
        folder.mkdir(parents=True, exist_ok=True)
        writers = np.full(n, writer) if isinstance(writer, str) else writer
        for w in np.unique(writers):
            part = tbl.filter(pa.array(writers == w)).sort_by("ts")
            for k, start in enumerate(range(0, part.num_rows, self.rows_per_file)):
                pq.write_table(part.slice(start, self.rows_per_file), folder / f"{w}-1-bench-{k:05d}.parquet")
                self.files += 1
        self.events += n
        if table in COPIED and self.copies and n:
            again = tbl.take(pa.array(np.sort(self.rng.choice(n, int(n * self.copies), replace=False))))
            pq.write_table(again, folder / "reconciler-1-bench-00000.parquet")
            self.files += 1
            self.events += again.num_rows


def generate(run: Path, events: int, rows_per_file: int, seed: int = 0, shape: Shape = FULL) -> int:
    rng = np.random.default_rng(seed)
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"workers": WORKERS, "harness": "claude", "time_scale": 1.0,
                                                 "minutes": shape.hours * 60}))
    (run / "summary.json").write_text(json.dumps({"run_id": RUN_ID, "workers": WORKERS, "synthetic": True}))
    out = Writer(run, rows_per_file, shape.copies, seed)
    end = shape.hours * 3600.0
    start = launch_times(WORKERS)
    host = np.array([f"host-h{i // 64:03d}" for i in range(WORKERS)])

    # lifecycle: started, ~100 crash+restart, stopped; only the workers the schedule starts before the end
    # (all of them in FULL; in SMALL the rest never start: no row of theirs anywhere)
    n_up = int((start < end).sum())
    crash_w = rng.choice(n_up, shape.crashes, replace=False)
    crash_t = start[crash_w] + rng.uniform(600, 3600, shape.crashes)
    crash_w, crash_t = crash_w[crash_t + 30 < end], crash_t[crash_t + 30 < end]
    nc = len(crash_w)
    lw = np.concatenate([np.arange(n_up), crash_w, crash_w, np.arange(n_up)])
    lt = np.concatenate([start[:n_up], crash_t, crash_t + 30, np.full(n_up, end)])
    ev = ["started"] * n_up + ["crashed"] * nc + ["restarted"] * nc + ["stopped"] * n_up
    out.write("lifecycle", {"ts": ts_array(lt), "worker_id": wid(lw), "event": pa.array(ev),
                            "host": pa.array(host[lw]), "detail": pa.array([""] * len(lw))}, host[lw])

    # scores every 10 minutes, logistic progress
    st = np.arange(0, end + 1, 600.0)
    rate = 1 / (1 + np.exp(-(st - 3 * 3600) / 2400))
    passed = np.round(rate * 400).astype(np.int64)
    out.write("scores", {"ts": ts_array(st), "checkpoint": pa.array(["periodic"] * (len(st) - 1) + ["final"]),
                         "commit": prefixed("c", np.arange(len(st))), "passed": pa.array(passed),
                         "total": pa.array(np.full(len(st), 400)), "pass_rate": pa.array(passed / 400.0)}, "driver")

    # turns: per worker, ~30 s turns with ~8 s gaps from its start to the end
    k = int((end / (shape.turn_s + shape.gap_s)) * 1.6)
    dur = rng.exponential(shape.turn_s, (WORKERS, k)) + 1
    gap = rng.exponential(shape.gap_s, (WORKERS, k)) + 0.1
    t_start = start[:, None] + np.cumsum(dur + gap, axis=1) - dur
    t_end = t_start + dur
    ok = t_end < end
    tw, tn = np.nonzero(ok)
    ts0, ts1 = t_start[ok], t_end[ok]
    nturn = len(tw)
    trig = choice(rng, ["events", "first", "nudge", "share_findings", "wind_down"], nturn, [0.9, 0.02, 0.04, 0.03, 0.01])
    rows_w = np.concatenate([tw, tw])
    out.write("turns", {
        "ts": ts_array(np.concatenate([ts0, ts1])), "worker_id": wid(rows_w),
        "turn": pa.array(np.concatenate([tn + 1, tn + 1])),
        "phase": pa.array(["start"] * nturn + ["end"] * nturn),
        "trigger": pa.concat_arrays([trig, trig]),
        "stop_reason": pa.concat_arrays([pa.nulls(nturn, pa.string()), choice(rng, ["end_turn", "cancelled"], nturn, [0.97, 0.03])]),
        "duration_ms": pa.concat_arrays([pa.nulls(nturn, pa.float64()), pa.array((ts1 - ts0) * 1000)]),
    }, host[rows_w])

    # usage: one row per turn end
    out.write("usage", {"ts": ts_array(ts1), "worker_id": wid(tw), "turn": pa.array(tn + 1),
                        "input_tokens": pa.array(rng.integers(5_000, 80_000, nturn)),
                        "output_tokens": pa.array(rng.integers(200, 4_000, nturn)),
                        "cost_usd": pa.array(np.zeros(nturn))}, host[tw])

    # board
    names = [f"cmd{i:04d}" for i in range(3000)]
    nb = shape.board
    bt = np.sort(rng.uniform(0, end, nb))
    bw = up_at(rng, start, bt)
    btype = rng.choice(["CLAIM", "FACT", "OBSERVED", "FAIL", "PATCH_SUMMARY"], nb, p=[0.25, 0.33, 0.25, 0.07, 0.10])
    bname = np.array(names)[rng.integers(0, len(names), nb)]
    text = np.char.add(np.char.add(np.char.add(np.char.lower(btype), " "), bname),
                       np.char.add(": src/commands/", np.char.add(bname, ".py + registry line")))
    out.write("board", {"ts": ts_array(bt), "worker_id": wid(bw), "event_id": prefixed("board:", np.arange(1, nb + 1)),
                        "seq": pa.array(np.arange(1, nb + 1)), "type": pa.array(btype), "text": pa.array(text),
                        "has_detail": pa.array(rng.random(nb) < 0.2)}, "board")

    # messages: DMs (skewed toward a few busy workers) and channel posts
    nm = shape.messages
    mt = np.sort(rng.uniform(0, end, nm))
    snd = np.minimum((rng.pareto(1.5, nm) * 50).astype(int), np.maximum(1, np.searchsorted(start, mt, "right")) - 1)
    rcv = up_at(rng, start, mt)
    is_dm = rng.random(nm) < 0.75
    recipient = wid(rcv).to_numpy(zero_copy_only=False).astype(object)
    recipient[~is_dm] = None
    out.write("messages", {"ts": ts_array(mt), "worker_id": wid(snd), "event_id": prefixed("chat:", np.arange(1, nm + 1)),
                           "seq": pa.array(np.arange(1, nm + 1)), "kind": pa.array(np.where(is_dm, "dm", "channel")),
                           "sender": wid(snd), "recipient": pa.array(recipient, pa.string()),
                           "text": pa.array(["about the registry conflict, I take the other half"] * nm)}, "chat")

    # forge: ~8k PRs
    npr = shape.prs
    pr = np.arange(2, npr + 2)
    t_open = rng.uniform(0, end - 600, npr)
    author = up_at(rng, start, t_open - 60)
    opened = np.maximum(t_open, start[author] + 60)
    fate = rng.choice(3, npr, p=[0.8, 0.1, 0.1])  # merged, closed, open
    done = opened + rng.exponential(900, npr) + 30
    fate[done >= end] = 2
    done = np.minimum(done, end - 1)  # what happens to a PR still open at the end happens before it
    peer = up_at(rng, start, done)
    peer = np.where(peer == author, (peer + 1) % n_up, peer)
    merger = np.where(rng.random(npr) < 0.3, peer, author)
    reviewed = rng.random(npr) < 0.5
    nconf = rng.poisson(0.8, npr)
    rows = {"ts": [], "worker": [], "kind": [], "pr": [], "author": [], "detail": [], "verdict": []}

    def add(mask, t, w, kind, detail="", verdict=None):
        m = int(mask.sum())
        rows["ts"].append(t[mask]); rows["worker"].append(w[mask]); rows["pr"].append(pr[mask])  # noqa: E702
        rows["author"].append(author[mask]); rows["kind"].append(np.full(m, kind))  # noqa: E702
        rows["detail"].append(np.full(m, detail, dtype=object)); rows["verdict"].append(np.full(m, verdict, dtype=object))  # noqa: E702

    allp = np.ones(npr, bool)
    for frac in (0.0, 0.33, 0.66):
        add(allp, opened - 20 + frac * (done - opened), author, "push", "updated branch")
    add(allp, opened, author, "pr_opened", "Add a command")
    rv_t = opened + (done - opened) * 0.3
    add(reviewed, rv_t, peer, "pr_reviewed", "approve: lgtm", "approve")
    add(rng.random(npr) < 0.3, opened + (done - opened) * 0.2, peer, "pr_commented", "why not reuse split_lines?")
    for c in range(1, 4):
        add(nconf >= c, opened + (done - opened) * (0.4 + 0.1 * c), merger, "merge_conflict",
            "conflicting files: src/registry.py" if c != 2 else "conflicting files: src/registry.py, src/core/util.py")
    add(fate == 0, done, merger, "pr_merged", "merged")
    add(fate == 1, done, author, "pr_closed", "Add a command")
    fts = np.concatenate(rows["ts"])
    order = np.argsort(fts, kind="stable")
    seq = np.empty(len(fts), np.int64)
    seq[order] = np.arange(1, len(fts) + 1)
    fw = np.concatenate(rows["worker"])
    fpr = np.concatenate(rows["pr"])
    kinds = np.concatenate(rows["kind"])
    fpr_col = pa.array(np.where(kinds == "push", -1, fpr))
    fpr_col = pc.if_else(pc.equal(fpr_col, -1), pa.scalar(None, pa.int64()), fpr_col)
    out.write("forge", {"ts": ts_array(fts), "worker_id": wid(fw), "event_id": prefixed("forge:", seq),
                        "seq": pa.array(seq), "kind": pa.array(kinds), "pr": fpr_col,
                        "pr_author": wid(np.concatenate(rows["author"])),
                        "ref": pa.array(np.full(len(fts), "refs/heads/work")),
                        "detail": pa.array(np.concatenate(rows["detail"]), pa.string()),
                        "verdict": pa.array(np.concatenate(rows["verdict"]), pa.string())}, "forge")

    # pr_changes: at open and at merge/close; a new command file, a registry insertion, core edits
    core_files = [f"src/core/mod{i:03d}.py" for i in range(200)]
    funcs = [f"def fn{i:02d}(x):" for i in range(20)]
    cols = {k: [] for k in ("ts", "worker", "pr", "author", "snapshot", "path", "status", "o0", "ol", "n0", "nl", "fn")}
    snaps = [(allp, opened, author, "pr_opened"), (fate == 0, done, merger, "pr_merged"), (fate == 1, done, author, "pr_closed")]
    new_file = np.array(names)[rng.integers(0, len(names), npr)]
    nedit = rng.integers(0, 3, npr)
    edit_file = rng.integers(0, len(core_files), (npr, 2))
    edit_line = rng.integers(1, 400, (npr, 2))
    edit_len = rng.integers(1, 12, (npr, 2))
    edit_fn = rng.integers(0, len(funcs), (npr, 2))
    for mask, t, w, snap in snaps:
        idx = np.nonzero(mask)[0]
        m = len(idx)

        def put(sel, path, status, o0, ol, n0, nl, fn):
            cols["ts"].append(t[sel]); cols["worker"].append(w[sel]); cols["pr"].append(pr[sel])  # noqa: E702
            cols["author"].append(author[sel]); cols["snapshot"].append(np.full(len(sel), snap))  # noqa: E702
            cols["path"].append(path); cols["status"].append(np.full(len(sel), status))  # noqa: E702
            for key, v in (("o0", o0), ("ol", ol), ("n0", n0), ("nl", nl)):
                cols[key].append(np.broadcast_to(v, len(sel)).astype(np.int64))
            cols["fn"].append(np.broadcast_to(np.asarray(fn, dtype=object), len(sel)))

        put(idx, np.char.add(np.char.add("src/commands/", new_file[idx]), ".py"), "added", 0, 0, 1, 40, "")
        put(idx, np.full(m, "src/registry.py"), "modified", 120, 0, 121, 1, "COMMANDS = {")
        for e in range(2):
            sel = idx[nedit[idx] > e]
            put(sel, np.array(core_files)[edit_file[sel, e]], "modified", edit_line[sel, e], edit_len[sel, e],
                edit_line[sel, e], edit_len[sel, e] + 1, np.array(funcs, dtype=object)[edit_fn[sel, e]])
    cat = {k: np.concatenate(v) for k, v in cols.items()}
    out.write("pr_changes", {"ts": ts_array(cat["ts"]), "worker_id": wid(cat["worker"]), "pr": pa.array(cat["pr"]),
                             "pr_author": wid(cat["author"]), "snapshot": pa.array(cat["snapshot"]),
                             "path": pa.array(cat["path"]), "status": pa.array(cat["status"]),
                             "old_start": pa.array(cat["o0"]), "old_lines": pa.array(cat["ol"]),
                             "new_start": pa.array(cat["n0"]), "new_lines": pa.array(cat["nl"]),
                             "function": pa.array(cat["fn"], pa.string())}, "forge")

    # tool calls: ~6 per turn, inside the turn
    per = rng.poisson(shape.tool_calls_per_turn, nturn)
    ti = np.repeat(np.arange(nturn), per)
    nt = len(ti)
    tt = ts0[ti] + rng.random(nt) * (ts1[ti] - ts0[ti])
    okc = rng.random(nt) > 0.03
    err = pc.if_else(pa.array(okc), pa.scalar(None, pa.string()), pa.scalar("exit status 1"))
    out.write("tool_calls", {"ts": ts_array(tt), "worker_id": wid(tw[ti]),
                             "tool": choice(rng, ["board_read", "board_write", "dm_send", "pr_create", "pr_merge",
                                                  "Read", "Edit", "Bash: pytest -q", "Bash: git push"], nt),
                             "source": choice(rng, ["mcp", "agent"], nt, [0.3, 0.7]),
                             "tool_call_id": prefixed("call_", np.arange(nt)),
                             "duration_ms": pa.array(rng.exponential(800, nt)), "ok": pa.array(okc), "error": err,
                             "turn": pa.array(tn[ti] + 1)}, host[tw[ti]])

    # deliveries: the rest of the budget
    nd = max(0, events - out.events)
    dw = rng.integers(0, n_up, nd)
    dt_ = np.maximum(rng.uniform(0, end, nd), start[dw])
    kind = choice(rng, ["board", "dm", "channel", "forge", "nudge", "share_findings", "wind_down"], nd,
                  [0.86, 0.01, 0.01, 0.1, 0.005, 0.013, 0.002])
    lat = rng.exponential(150, nd)
    out.write("deliveries", {"ts": ts_array(dt_), "worker_id": wid(dw), "event_id": prefixed("board:", rng.integers(1, nb, nd)),
                             "kind": kind, "priority": choice(rng, ["high", "low"], nd, [0.9, 0.1]),
                             "via": choice(rng, ["mid_turn", "turn_start"], nd, [0.8, 0.2]),
                             "enqueue_ts": ts_array(dt_ - lat / 1000), "latency_ms": pa.array(lat)}, host[dw])
    print(f"generated {out.events:,} events in {out.files:,} files under {run}", flush=True)
    return out.events
