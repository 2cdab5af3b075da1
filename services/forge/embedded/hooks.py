"""The two ends of the embedded forge's git hooks: installing them in
repo.git/hooks (shell stubs that run `receive_hook.py`, a real file next to
this one, with this process's Python, and the policy it reads), and reading
back what they recorded in hook-events.jsonl.

The stubs, the policy and the repository's receive settings are rewritten at
every load of the forge: the stubs name this process's interpreter and this
package's copy of the hook, which differ between machines and installs, and
the limits may have changed. git's own checks are on too:
`receive.fsckObjects` (malformed objects, `..` and `.git` tree entries) and
`receive.maxInputSize` (the pack, at the push limit). Reading goes by byte offset and complete lines only
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

from pydantic import BaseModel, ConfigDict, Field

from agensh_ray.applog import read_new_lines

log = logging.getLogger(__name__)

RECEIVE_HOOK = Path(__file__).with_name("receive_hook.py")
POLICY = "agensh-policy.json"
KINDS = ("pre-receive", "post-receive")
MiB = 1024 * 1024


class PushLimits(BaseModel):
    """How much one push may bring. Both are refused with a message naming the limit."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_push_bytes: int = Field(default=100 * MiB, gt=0)
    """The body of one push over HTTP (the pack, as sent); the HTTP server refuses more before git sees it."""
    max_file_bytes: int = Field(default=10 * MiB, gt=0)
    """One file (blob) of a pushed commit, uncompressed; the pre-receive hook refuses more."""


def install_hooks(repo: Path, hook_log: Path, protected: str, message: str, admins: list[str],
                  limits: PushLimits, git: Callable[..., Any]) -> None:
    """(Re)write repo's receive settings, the hooks' policy and the pre-receive and post-receive stubs.
    `git(*args)` runs git on the repository."""
    for key, value in (("receive.fsckObjects", "true"), ("receive.maxInputSize", str(limits.max_push_bytes))):
        git("config", key, value)
    hooks = repo / "hooks"
    hooks.mkdir(exist_ok=True)
    (hooks / "agensh_hook.py").unlink(missing_ok=True)  # where the program was written before it was a file
    policy = {"log": str(hook_log), "protected": protected, "message": message, "admins": list(admins),
              "max_file_bytes": limits.max_file_bytes}
    tmp = hooks / (POLICY + ".tmp")
    tmp.write_text(json.dumps(policy, indent=1) + "\n")
    tmp.replace(hooks / POLICY)
    for kind in KINDS:
        argv = (sys.executable, "-I", "-S", str(RECEIVE_HOOK), kind, str(hooks / POLICY))
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
