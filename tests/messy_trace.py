"""Messy traces for the analysis's property tests: a small run whose true story is known (who opened,
reviewed and merged which PR, who claimed what, what each model call cost), written out the way a
real trace can look: rows written twice by two writers (a copy may lose its denormalised pr_author),
nulls in every nullable column, configured workers with no rows, Unicode and quotes in every text
column (worker ids too, when the run has no configuration), rows out of order across several files
per table, forge files of the older schema (no `verdict` column), tables missing altogether.

`runs()` is a hypothesis strategy of `MessyRun`s; `MessyRun.write(folder)` writes the run folder.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import strategies as st

from agensh_ray.config import worker_ids
from agensh_ray.trace import (
    SCHEMAS,
    BoardRow,
    DeliveryRow,
    ForgeRow,
    LifecycleRow,
    MessageRow,
    PrChangeRow,
    ScoreRow,
    TurnRow,
    UsageRow,
)

T0 = 1_767_225_600_000_000
NASTY = ["'", '"', "`", "’", "«»", "naïve", "日本語", "O'Brien", 'a "b" c', "\\", "|", "<b>x</b>", "$x$", "%s",
         "--", ";", "\n", "\t", "\x00", "\u202e", "🙂", "ǅ", "Ωmega", ""]
TEXT = st.one_of(st.text(max_size=12), st.sampled_from(NASTY))
ODD_IDS = ["w001", "wörker-ß", "o'neil", 'q"uote', "日本", "w 7", "$w$", "<w>"]
PATHS = ["docs/naïve.md", "docs/naïf.md", "docs/résumé.md", "docs/résultat.md", "src/日本/語.py", "textkit/registry.py",
         "a-b/c_d.txt", "ünï/ωmega.rs"]  # lower-case already; pairs an ASCII-only reading would confuse
CLAIM_WORDS = ["claim", "CLAIM:", "taking", "«claim»", "'claim'", "je prends"]
CLAIM_ENDS = ["", ".", " now", " (mine)", "'s part", " «ok»", ' "x"']
PRICES = {"claude": (3.0, 15.0)}  # analysis/prices.csv's row for the harness the run uses


def t(s: float) -> int:
    return T0 + int(s * 1_000_000)


@dataclass
class PR:
    number: int
    author: str
    opened_row: bool  # False: the trace never saw its pr_opened event
    reviews: list[tuple[str | None, str]]  # (reviewer, verdict)
    state: str  # merged | closed | open
    mergers: list[str | None]  # actors of its merge events, first first (None: the row has no actor)
    conflicts: int
    blocks: dict[str, set[tuple]]  # snapshot kind -> change blocks (path, status, o0, ol, n0, nl, function)


@dataclass
class MessyRun:
    """What happened (the truth) and how it was written (the mess)."""

    configured: int | None  # config.json's workers; None: no config.json
    harness: str
    time_scale: float
    workers: list[str]  # the run's workers (configured, else every id seen)
    prs: list[PR]
    claims: list[tuple[str | None, str]]  # (worker, path) in board order
    claim_texts: list[str]
    notes: list[tuple[str | None, str, str]]  # other board entries: (worker, type, text)
    messages: list[tuple[str, str, str | None, str]]  # (sender, kind, recipient, text)
    usage: list[tuple[str | None, int, int, float, bool]]  # (worker, in, out, reported cost, has event id)
    scores: list[int]  # passed of 20, in order
    started: list[str]  # workers with a lifecycle 'started' row
    seed: int
    rows: dict[str, list] = field(default_factory=dict)

    # -- the truth -----------------------------------------------------------------------------------------
    def author(self, pr: PR) -> str | None:
        """Who opened it; a PR never seen opened is known by its rows' pr_author, if any row has one."""
        if pr.opened_row or any(r.pr_author is not None for r in self.rows["forge"] if r.pr == pr.number):
            return pr.author
        return None

    def merger(self, pr: PR) -> str | None:
        return pr.mergers[0] if pr.mergers else None

    # -- the mess ------------------------------------------------------------------------------------------
    def write(self, run: Path, rnd) -> None:
        """Write the run folder; `rnd` (a random.Random) decides copies, nulls, files and order."""
        (run / "trace").mkdir(parents=True)
        if self.configured is not None:
            (run / "config.json").write_text(json.dumps({"workers": self.configured, "harness": self.harness,
                                                         "time_scale": self.time_scale, "minutes": 60}))
        for table, rows in self.rows.items():
            if not rows:
                continue
            rows = list(rows)
            rnd.shuffle(rows)  # out of order
            copies = [r.model_copy() for r in rows if r.event_id and rnd.random() < 0.3]
            opened = {p.number for p in self.prs if p.opened_row}
            for c in copies:  # a second writer's copy; it may have lost the denormalised author (where the
                if getattr(c, "pr", None) in opened and rnd.random() < 0.5:  # PR's opening names it anyway)
                    c.pr_author = None
            parts = [rows[i::3] for i in range(3)] if len(rows) > 2 and rnd.random() < 0.7 else [rows]
            for k, part in enumerate(parts + [copies]):
                old = table == "forge" and k == 0 and rnd.random() < 0.5  # a file of schema 1: no verdict
                _write(run, table, part, f"{'reconciler' if k == len(parts) else 'actor'}-{k}", old)


def _write(run: Path, table: str, rows: list, name: str, old: bool) -> None:
    if not rows:
        return
    folder = run / "trace" / table
    folder.mkdir(parents=True, exist_ok=True)
    data = [dict(r.model_dump(), run_id=run.name) for r in rows]
    schema = SCHEMAS[table]
    if old:
        schema = schema.remove(schema.get_field_index("verdict"))
        for d in data:
            d.pop("verdict")
            d["schema_version"] = 1
    pq.write_table(pa.Table.from_pylist(data, schema=schema), folder / f"{name}.parquet")


@st.composite
def runs(draw) -> MessyRun:
    configured = draw(st.one_of(st.none(), st.integers(1, 6)))
    if configured is None:
        pool = draw(st.lists(st.sampled_from(ODD_IDS), min_size=1, max_size=5, unique=True))
    else:
        pool = worker_ids(configured)
    active = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=len(pool), unique=True))
    who = st.sampled_from(active)
    maybe_who = st.one_of(who, who, who, st.none())
    harness = draw(st.sampled_from(["claude", "claude", "cmd:unpriced"]))
    prs = []
    for n in range(draw(st.integers(0, 5))):
        state = draw(st.sampled_from(["merged", "merged", "closed", "open"]))
        mergers = [draw(maybe_who)] + ([draw(who)] if draw(st.booleans()) else []) if state == "merged" else []
        blocks: dict[str, set[tuple]] = {}
        for snap in ["pr_opened"] + (["pr_merged"] if state == "merged" else ["pr_closed"] if state == "closed" else []):
            if draw(st.booleans()):
                blocks[snap] = {(draw(st.sampled_from(PATHS)), draw(st.sampled_from(["added", "modified"])),
                                 o0 := draw(st.integers(0, 30)), draw(st.integers(0, 6)), o0, draw(st.integers(0, 9)),
                                 draw(st.sampled_from(["", "def f():", "class Ω:"])))
                                for _ in range(draw(st.integers(1, 3)))}
                if draw(st.integers(0, 4)) == 0:
                    blocks[snap].add((draw(st.sampled_from(PATHS)), "modified", None, None, None, None, ""))  # binary
        prs.append(PR(n + 2, draw(who), draw(st.integers(0, 9)) > 0,
                      draw(st.lists(st.tuples(maybe_who, st.sampled_from(["approve", "comment", "request_changes"])),
                                    max_size=3)), state, mergers, draw(st.integers(0, 2)), blocks))
    subjects = draw(st.lists(st.sampled_from(PATHS), min_size=1, max_size=3, unique=True))  # few: claims collide
    claims = draw(st.lists(st.tuples(maybe_who, st.sampled_from(subjects)), max_size=6))
    claim_texts = [f"{draw(st.sampled_from(CLAIM_WORDS))} {p}{draw(st.sampled_from(CLAIM_ENDS))}" for _, p in claims]
    r = MessyRun(
        configured=configured, harness=harness, time_scale=draw(st.sampled_from([1.0, 2.5])),
        workers=pool if configured is not None else [], prs=prs, claims=claims, claim_texts=claim_texts,
        notes=draw(st.lists(st.tuples(maybe_who, st.sampled_from(["FACT", "OBSERVED", "FAIL"]), TEXT), max_size=3)),
        messages=draw(st.lists(st.tuples(who, st.sampled_from(["dm", "dm", "channel"]),
                                         st.one_of(who, st.none()), TEXT), max_size=5)),
        usage=draw(st.lists(st.tuples(st.one_of(who, st.none(), st.just("ghost")), st.integers(0, 3_000_000),
                                      st.integers(0, 200_000), st.floats(0, 5), st.booleans()), max_size=5)),
        scores=draw(st.lists(st.integers(0, 20), max_size=5)),
        started=draw(st.lists(st.sampled_from(active), unique=True)), seed=draw(st.integers(0, 2**16)),
    )
    r.rows = _rows(r, draw)
    if configured is None:  # the run's workers are the ones seen
        seen = {w for rows in (r.rows["forge"], r.rows["board"], r.rows["lifecycle"], r.rows["turns"],
                               r.rows["usage"]) for w in (x.worker_id for x in rows)}
        r.workers = sorted({w for w in seen | {m[0] for m in r.messages} if w is not None})
    return r


def _rows(r: MessyRun, draw) -> dict[str, list]:
    clock = iter(range(10, 100_000, 7))  # strictly increasing event times (seconds)
    rows: dict[str, list] = {k: [] for k in ("forge", "pr_changes", "board", "messages", "usage", "scores",
                                              "lifecycle", "turns", "deliveries")}
    seq = 0

    def forge(actor, kind, pr: PR | None, detail="", verdict=None):
        nonlocal seq
        seq += 1
        author = pr.author if pr and draw(st.integers(0, 3)) > 0 else None  # the lookup failed: None
        rows["forge"].append(ForgeRow(ts=t(next(clock)), worker_id=actor, event_id=f"forge:{seq}", seq=seq, kind=kind,
                                      pr=pr.number if pr else None, pr_author=author, detail=detail, verdict=verdict,
                                      ref=draw(st.one_of(st.none(), TEXT))))
        return rows["forge"][-1]

    for w in r.started:
        rows["lifecycle"].append(LifecycleRow(ts=t(next(clock)), worker_id=w, event="started", detail=draw(TEXT),
                                              pid=draw(st.one_of(st.none(), st.integers(1, 99999)))))
    for pr in r.prs:
        opened = forge(pr.author, "pr_opened" if pr.opened_row else "push", pr, draw(TEXT))  # never seen opened:
        # the PR still has a row (a push), which takes the opening snapshot here
        for reviewer, verdict in pr.reviews:
            forge(reviewer, "pr_reviewed", pr, f"{verdict}: {draw(TEXT)}", draw(st.sampled_from([verdict, None])))
        for _ in range(pr.conflicts):
            forge(pr.author, "merge_conflict", pr, f"conflicting files: {draw(st.sampled_from(PATHS))}")
        ends = [forge(m, "pr_merged", pr) for m in pr.mergers]
        if pr.state == "closed":
            ends.append(forge(pr.author, "pr_closed", pr))
        snaps = {"pr_opened": opened} | {e.kind: e for e in ends}
        for kind, blocks in pr.blocks.items():
            ev = snaps[kind]
            for path, status, o0, ol, n0, nl, fn in blocks:
                rows["pr_changes"].append(PrChangeRow(
                    ts=ev.ts, worker_id=ev.worker_id, event_id=ev.event_id, pr=pr.number,
                    pr_author=pr.author if draw(st.booleans()) else None, snapshot=kind, path=path, status=status,
                    old_start=o0, old_lines=ol, new_start=n0, new_lines=nl, function=fn))
    for i, ((w, _), text) in enumerate(zip(r.claims, r.claim_texts)):
        rows["board"].append(BoardRow(ts=t(next(clock)), worker_id=w, event_id=f"board:{i + 1}", seq=i + 1,
                                      type="CLAIM", text=text))
    for j, (w, kind, text) in enumerate(r.notes, start=len(r.claims) + 1):
        rows["board"].append(BoardRow(ts=t(next(clock)), worker_id=w, event_id=f"board:{j}", seq=j, type=kind, text=text,
                                      has_detail=draw(st.booleans())))
    for i, (sender, kind, recipient, text) in enumerate(r.messages):
        rows["messages"].append(MessageRow(ts=t(next(clock)), worker_id=sender, event_id=f"chat:{i + 1}", seq=i + 1,
                                           kind=kind, sender=sender, recipient=recipient if kind == "dm" else None,
                                           text=text))
    for i, (w, tin, tout, cost, has_id) in enumerate(r.usage):
        rows["usage"].append(UsageRow(ts=t(next(clock)), worker_id=w, event_id=f"usage:{i}" if has_id else "",
                                      turn=i, input_tokens=tin, output_tokens=tout, cost_usd=cost))
    for i, w in enumerate(r.started[:2]):
        s = next(clock)
        rows["turns"] += [TurnRow(ts=t(s), worker_id=w, turn=1, phase="start", trigger=draw(TEXT)),
                          TurnRow(ts=t(s + 3), worker_id=w, turn=1, phase="end", trigger="events",
                                  stop_reason=draw(st.one_of(st.none(), TEXT)), duration_ms=None)]
        rows["deliveries"].append(DeliveryRow(ts=t(s - 1), worker_id=w, event_id=f"nudge:{w}:{i}", kind="nudge",
                                              priority="low", via="turn_start", enqueue_ts=t(s - 1), latency_ms=0.0))
    for p in r.scores:
        rows["scores"].append(ScoreRow(ts=t(next(clock)), checkpoint="periodic", passed=p, total=20, pass_rate=p / 20))
    return rows


