"""`python -m agensh_ray.reconcile RUN_DIR`: make a stopped run's trace agree with its durable logs.

The board, the embedded chat and the embedded forge write the trace rows of every logged entry no
trace file holds whenever they start and close (agensh_ray/trace/reconcile.py). A run whose driver
was killed (SIGKILL, a lost head node) never closed them: its `board`, `messages` and `forge`
tables may lack the last seconds before the kill. This opens each log as its owner would, which
writes exactly the missing rows, and closes it again. Idempotent; only for a run that is not
running (a live owner would write the same rows). Prints how many rows each table gained.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from agensh_ray.board import BoardService
from agensh_ray.services.chat.embedded import EmbeddedChat
from agensh_ray.services.chat.feed import ChatFeed
from agensh_ray.services.forge.embedded import EmbeddedForge
from agensh_ray.services.forge.traced import ForgeTracer
from agensh_ray.trace import TraceWriter


def reconcile_run(run_dir: Path) -> dict[str, int]:
    """Rows written per table (0: it already agreed; a table whose log is absent is left out)."""
    run_dir = Path(run_dir).resolve()
    run_id = run_dir.name
    config = run_dir / "config.json"
    if config.is_file():
        run_id = json.loads(config.read_text()).get("run_id") or run_id
    added: dict[str, int] = {}
    if (run_dir / "board" / "board.jsonl").is_file():
        board = BoardService(str(run_dir / "board" / "board.jsonl"), run_dir=str(run_dir), run_id=run_id)
        added["board"] = board.reconciled
        board.close()
    if (run_dir / "chat" / "chat.jsonl").is_file():
        chat = ChatFeed(EmbeddedChat(run_dir / "chat"), TraceWriter(run_dir, "reconcile-chat", run_id, flush_interval_s=0))
        added["messages"] = chat.reconciled
        chat.close()
    if (run_dir / "forge" / "events.jsonl").is_file():
        forge = ForgeTracer(EmbeddedForge(run_dir / "forge"),  # not started: no HTTP server, only its state
                            TraceWriter(run_dir, "reconcile-forge", run_id, flush_interval_s=0))
        added["forge"] = forge.reconciled
        forge.close()
    return added


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m agensh_ray.reconcile", description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir", type=Path, help="a run folder (runs/<run_id>) whose run has stopped")
    a = p.parse_args(argv)
    if not a.run_dir.is_dir():
        p.error(f"{a.run_dir} is not a run folder")
    added = reconcile_run(a.run_dir)
    if not added:
        p.error(f"{a.run_dir} holds no board, chat or forge log (is it a run folder?)")
    for table, n in added.items():
        print(f"{table:9} {n} row(s) added", file=sys.stderr)
    print(json.dumps(added))
    return 0


if __name__ == "__main__":
    sys.exit(main())
