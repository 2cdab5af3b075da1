"""The two ends of the embedded forge's git hooks: installing them in
repo.git/hooks (shell stubs that run `receive_hook.py`, a real file next to
this one, with this process's Python), and reading back what they recorded in
hook-events.jsonl.

The stubs are rewritten at every load of the forge: they name this process's
interpreter and this package's copy of the hook, which differ between
machines and installs. Reading goes by byte offset and complete lines only
(`applog.read_new_lines`): a hook still writing its line is read next time.
The offset reached is stored with each event folded from a line (`hook_end`),
so a restarted forge neither loses nor repeats one."""

from __future__ import annotations

import json
import logging
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agensh_ray.applog import read_new_lines

log = logging.getLogger(__name__)

RECEIVE_HOOK = Path(__file__).with_name("receive_hook.py")
KINDS = ("pre-receive", "post-receive")


def install_hooks(repo: Path, hook_log: Path, protected_ref: str, message: str) -> None:
    """(Re)write repo's pre-receive and post-receive hooks."""
    hooks = repo / "hooks"
    hooks.mkdir(exist_ok=True)
    (hooks / "agensh_hook.py").unlink(missing_ok=True)  # where the program was written before it was a file
    for kind in KINDS:
        argv = (sys.executable, "-I", "-S", str(RECEIVE_HOOK), kind, str(hook_log), protected_ref, message)
        path = hooks / kind
        path.write_text(f"#!/bin/sh\nexec {' '.join(shlex.quote(x) for x in argv)}\n")
        path.chmod(0o755)


class HookLog:
    """hook-events.jsonl, read from `offset` on."""

    def __init__(self, path: Path, offset: int = 0):
        self.path = path
        self.offset = offset
        """Byte offset of the first line not folded yet."""

    def fold(self, apply: Callable[[dict[str, Any], int], None]) -> None:
        """`apply(record, end offset)` for every new complete line, in order (bad lines are skipped)."""
        lines, _ = read_new_lines(self.path, self.offset)
        pos = self.offset
        for raw in lines:
            pos += len(raw)
            try:
                rec = json.loads(raw)
            except ValueError:
                log.warning("skipping a bad line in %s: %r", self.path, raw[:200])
                self.offset = pos
                continue
            apply(rec, pos)
            self.offset = pos
