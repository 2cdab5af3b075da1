"""What a finished run sums up to, for `Run` (mixed in): `summary.json` and the lines printed at the end,
from the forge, the board and the chat as they stand after the workers stopped, and the final score.
Expects `Run`'s attributes (forge, board, chat, checkpoints, watch, ...).
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq

from agensh_ray.actors.supervise import call
from agensh_ray.driver.clock import clock_lines
from agensh_ray.trace import MODEL_ERROR

log = logging.getLogger("agensh.run")


def trace_counts(run_dir: Path, hosts: list[str] | None = None) -> dict | None:
    """The workers' turn errors, model errors (turn errors on a failing model) and crashes as the trace's
    `lifecycle` table holds them (read once every writer has closed), or None when this machine lacks any of it:
    no lifecycle file, or none of a host's in `hosts` (a multi-node run without shared storage keeps each host's
    files on its node: counting only those here would be a partial count shown as the whole)."""
    folder = Path(run_dir) / "trace" / "lifecycle"
    files = sorted(folder.glob("*.parquet"))
    if not files or any(not any(folder.glob(f"host-{h}-*.parquet")) for h in hosts or ()):
        return None
    n = Counter()
    for f in files:
        try:
            t = pq.read_table(f, columns=["worker_id", "event", "detail"]).to_pydict()
        except Exception as exc:  # a file cut by a crash: say so, count the rest
            log.warning("reading %s: %s", f, exc)
            continue
        for wid, event, detail in zip(t["worker_id"], t["event"], t["detail"]):
            if wid is None:
                continue
            if event == "turn_error":
                n["turn_errors"] += 1
                n["model_errors"] += (detail or "").startswith(MODEL_ERROR)
            elif event == "crashed":
                n["crashes"] += 1
    return {"turn_errors": n["turn_errors"], "model_errors": n["model_errors"], "crashes": n["crashes"]}


def strict_lines(s: dict) -> list[str]:
    """The closing lines' strict score, only when main ships files that change the test runner and the strict
    score differs from the official one (or is unknown): nothing otherwise."""
    files = s.get("runner_files") or []
    if not files or s.get("strict_score") == s.get("score"):
        return []
    shown = ", ".join(files[:5]) + (f" and {len(files) - 5} more" if len(files) > 5 else "")
    strict = ("unknown (its evaluation did not finish)" if s.get("strict_score") is None else
              f"{s['strict_score']:.1%} of hidden tests ({s.get('strict_tests_passed')}/{s['tests_total']})")
    return [f"  strict score   {strict} without the files main ships that change the test runner ({shown}); "
            "the score above counts what they made the tests report"]


def gateway_cost_line(s: dict) -> str:
    """The summary's dollars of the gateway's calls: unknown where a call had no price, never $0 for it."""
    unknown = s.get("model_calls_cost_unknown", 0)
    if not unknown:
        return f"${s['model_cost_usd']:.4f}"
    known = s.get("model_cost_usd_known") or 0.0
    what = f"{unknown} calls unpriced: a model with no price (--prices) or no usage reported"
    return (f"cost unknown ({what})" if known == 0 else f"${known:.4f} + unknown ({what})")


class Summary:
    def _summary(self) -> dict:
        prs = call("forge", lambda: self.forge.pr_list.remote("all"))
        events = call("forge", lambda: self.forge.events_since.remote(0, 10**9))
        conflicts = [e for e in events if e.kind == "merge_conflict"]
        merged_numbers = {p.number for p in prs if p.state == "merged"}
        entries = call("board", lambda: self.board.actor.since_rows.remote(0, 10**9))
        msgs = call("chat", lambda: self.chat.messages_since.remote(0, 10**9))
        res = self._final_score
        return {
            "run_id": self.run_id,
            "workers": len(self.workers),
            "harness": self.cfg.harness,
            "baseline": self.cfg.baseline,
            "task": self.task.name,
            "wall_s": round(time.time() - self.t0, 1),
            "prs_opened": len(prs),
            "prs_merged": len(merged_numbers),
            "prs_closed_unmerged": sum(p.state == "closed" for p in prs),
            "prs_open_at_end": sum(p.state == "open" for p in prs),
            "merged_pr_authors": len({p.author for p in prs if p.state == "merged"}),
            "merge_conflicts": len(conflicts),
            "merge_conflicts_resolved": len({e.pr for e in conflicts if e.pr in merged_numbers}),
            "board_entries": dict(Counter(e.type for e in entries)),
            "dms": sum(m.to is not None for m in msgs),
            "channel_posts": sum(m.to is None for m in msgs),
            # the last poll's; once the trace is written, _count_from_trace replaces them with the trace's
            "turn_errors": getattr(self, "_turn_errors", 0),
            "model_errors": getattr(self, "_last_status", {}).get("model_errors", 0),
            "crashes": getattr(self, "_last_status", {}).get("crashed", 0),
            "writes_waited": getattr(self, "_last_status", {}).get("writes_waited", 0),
            "writes_refused": getattr(self, "_last_status", {}).get("writes_refused", 0),
            "model": self.cfg.model,
            "actors_restarted": self.watch.restarts,
            "driver_resumes": self.prior.resumes + 1 if self.prior is not None else 0,
            **self._model_summary(),
            "score": res.score,
            "tests_passed": res.passed,
            "tests_total": res.total,
            "tests_not_run": res.not_run,
            "score_error": res.error_code,
            # ProgramBench's score counts files main ships that change its test runner (a conftest.py, ...);
            # the strict score is main's without them (equal to the score when there are none; null: unknown)
            "runner_files": res.runner_files,
            "strict_score": res.strict_score,
            "strict_tests_passed": res.strict_passed,
            "checkpoints": self.checkpoints.seq,
            # periodic ones that could not start in time, checkpoints that failed (lifecycle rows say why)
            "checkpoints_missed": self.checkpoints.missed,
            "checkpoints_failed": self.checkpoints.failed,
            "checkpoint_failure": self.checkpoints.last_failure,
            "run_dir": str(self.run_dir),
            "clock": self._clock_summary(),  # driver/clock.py: how far the agents lagged; machine-bound?
        }

    def _count_from_trace(self, s: dict) -> None:
        """Put the trace's counts of turn errors, model errors and crashes in the summary (every writer closed:
        the errors of the last seconds and those written while stopping are in), where this machine has it."""
        launched = getattr(self, "_launched", set())
        hosts = [hid for hid, (_, ws) in getattr(self, "hosts", {}).items() if launched.intersection(ws)]
        counts = trace_counts(self.run_dir, hosts)  # every host that launched a worker wrote lifecycle rows
        if counts is not None:
            s.update(counts)
        s["error_counts_from"] = "trace" if counts is not None else "last progress poll"

    def _print_summary(self, s: dict) -> None:
        (self.run_dir / "summary.json").write_text(json.dumps(s, indent=2))
        board = ", ".join(f"{k} {v}" for k, v in sorted(s["board_entries"].items()))
        lines = [
            f"run {s['run_id']} finished in {s['wall_s']}s",
            f"  workers        {s['workers']} ({s['merged_pr_authors']} authored a merged PR)",
            f"  pull requests  {s['prs_opened']} opened, {s['prs_merged']} merged, "
            f"{s['merge_conflicts']} merge conflicts ({s['merge_conflicts_resolved']} resolved and merged)",
            f"  board          {sum(s['board_entries'].values())} entries ({board})",
            f"  messages       {s['dms']} DMs, {s['channel_posts']} channel posts",
            *([f"  model calls    {s['model_calls']} through the gateway ({s['model_retries']} retried), "
               f"{s['model_tokens']:,} tokens, {gateway_cost_line(s)}"] if "model_calls" in s else []),
            *([f"  model cost     unknown: {s['turns_without_usage']} turns reported no usage, "
               f"{s['model_tokens_reported']:,} tokens reported, no price (the gateway counts and prices every call: "
               "docs/real-agents.md)" if s["model_cost_usd"] is None else
               f"  model cost     ${s['model_cost_usd']:.4f} as the agents reported it, "
               f"{s['model_tokens_reported']:,} tokens"] if "turns_without_usage" in s else []),
            *([f"  model          {s['model']}: {s['model_errors']} turns ended on a failing model, "
               f"{s['turn_errors']} turn errors in all"] if s.get("model") or s.get("model_errors") else []),
            *([f"  agents         {s['crashes']} crashes (the lifecycle table says why)"] if s.get("crashes") else []),
            f"  score          {s['score']:.1%} of hidden tests ({s['tests_passed']}/{s['tests_total']}), ProgramBench's "
            f"score; {s.get('checkpoints', 0)} checkpoints in checkpoints/",
            *strict_lines(s),
            *([f"  checkpoints    {s['checkpoints_missed']} missed, {s['checkpoints_failed']} failed (the lifecycle "
               f"table says why){'; last failure: ' + s['checkpoint_failure'] if s['checkpoint_failure'] else ''}"]
              if s.get("checkpoints_missed") or s.get("checkpoints_failed") else []),
            *clock_lines(s),
            f"  run folder     {s['run_dir']}",
            *([f"  object store   {st['pending']} files not shipped ({st['error']}): they are in {s['staging_dir']}"
               if st["pending"] else f"  object store   everything shipped ({st['outages']} outages, {st['outage_s']} s "
               f"unreachable); local staging copy {s['staging_dir']}"] if (st := s.get("storage")) else []),
            f"  query it:      python -m agensh_ray.analysis.query {s['run_dir']} merges  (no name: every question)",
        ]
        print("\n".join(lines), file=self.out, flush=True)

