"""What a finished run sums up to, for `Run` (mixed in): `summary.json` and the lines printed at the end,
from the forge, the board and the chat as they stand after the workers stopped, and the final score.
Expects `Run`'s attributes (forge, board, chat, checkpoints, watch, ...).
"""

from __future__ import annotations

import json
import time
from collections import Counter

from agensh_ray.actors.supervise import call


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
            "turn_errors": getattr(self, "_turn_errors", 0),
            "model_errors": getattr(self, "_last_status", {}).get("model_errors", 0),
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
        }

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
               f"{s['model_tokens']:,} tokens, ${s['model_cost_usd']:.4f}"] if "model_calls" in s else []),
            *([f"  model cost     unknown: {s['turns_without_usage']} turns reported no usage, "
               f"{s['model_tokens_reported']:,} tokens reported, no price (the gateway counts and prices every call: "
               "docs/real-agents.md)" if s["model_cost_usd"] is None else
               f"  model cost     ${s['model_cost_usd']:.4f} as the agents reported it, "
               f"{s['model_tokens_reported']:,} tokens"] if "turns_without_usage" in s else []),
            *([f"  model          {s['model']}: {s['model_errors']} turns ended on a failing model, "
               f"{s['turn_errors']} turn errors in all"] if s.get("model") or s.get("model_errors") else []),
            f"  score          {s['score']:.1%} of hidden tests ({s['tests_passed']}/{s['tests_total']}), ProgramBench's "
            f"score; {s.get('checkpoints', 0)} checkpoints in checkpoints/",
            *strict_lines(s),
            *([f"  checkpoints    {s['checkpoints_missed']} missed, {s['checkpoints_failed']} failed (the lifecycle "
               f"table says why){'; last failure: ' + s['checkpoint_failure'] if s['checkpoint_failure'] else ''}"]
              if s.get("checkpoints_missed") or s.get("checkpoints_failed") else []),
            f"  run folder     {s['run_dir']}",
            *([f"  object store   {st['pending']} files not shipped ({st['error']}): they are in {s['staging_dir']}"
               if st["pending"] else f"  object store   everything shipped ({st['outages']} outages, {st['outage_s']} s "
               f"unreachable); local staging copy {s['staging_dir']}"] if (st := s.get("storage")) else []),
            f"  query it:      python -m agensh_ray.analysis.query {s['run_dir']} merges  (no name: every question)",
        ]
        print("\n".join(lines), file=self.out, flush=True)

