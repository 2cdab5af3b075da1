"""The built-in script for the textkit task: worker N plays one whole loop of
prompts/worker.md on the Nth feature, writing the oracle's code.

gather (board_read) -> claim (board_write CLAIM) -> act (the CLI's own file
tool writes the module, its shell adds the registry line and runs the
visible check) -> merge (commit and push a branch, pr_create, bring main in
with a union merge of the registry, pr_merge; on a conflict merge main again
and retry, up to MERGE_RETRIES times) -> board_write PATCH_SUMMARY. Tool names are Copilot CLI's
(`bash`, `create`); ours are found by suffix.
"""

from __future__ import annotations

import shlex

from agensh_ray.fakes.script import Script, Step, Turn
from agensh_ray.task import Task


MERGE_RETRIES = 6
"""Conflicts a worker's PR survives (each one a peer that merged first)."""


def _bash(command: str, description: str) -> Step:
    return Step(tool="bash", args={"command": command, "description": description, "initial_wait": 120})


def feature_turn(task: Task, index: int, dm_gate: str | None = None) -> Turn:
    """One turn that builds, merges and summarises the index-th feature."""
    f = task.features()[index % len(task.features())]
    branch = f"${{worker}}/feat-{f.name}"  # the forge takes only the worker's own namespace
    registry = task.spec.registry
    program = "\n".join([
        "from pathlib import Path",
        f"p = Path({registry!r})",
        "text = p.read_text()",
        f"line = {f.registry_line!r}",
        "if line not in text:",
        "    head, _, tail = text.rpartition('}')",
        "    p.write_text(head + line + '\\n' + '}' + tail)",
    ])
    insert = f"python3 -c {shlex.quote(program)}"
    union = f"grep -qs 'merge=union' .git/info/attributes || echo '{registry} merge=union' >> .git/info/attributes"
    sync_main = (
        f"{union} && git pull -q --no-rebase --no-edit origin main && python3 checks/check.py && git push -q origin HEAD"
    )
    return Turn(
        steps=[
            Step(tool="board_read", args={}, say="Gathering context: the board first."),
            Step(
                tool="board_write",
                args={"type": "CLAIM", "text": f"claim {f.name}: {f.module} + its registry line"[:100]},
                gate=dm_gate,
            ),
            Step(tool="create", args={"path": f"${{cwd}}/{f.module}", "file_text": task.oracle_module(f.name)}),
            _bash(f"git checkout -q -b {shlex.quote(branch)} && {insert} && python3 checks/check.py {f.name}",
                  f"register {f.name} and run its check"),
            _bash(f"git add -A && git commit -q -m {shlex.quote(f'{f.name}: implement the subcommand')} && "
                  f"git push -q origin HEAD", "commit and push the branch"),
            Step(tool="pr_create", args={"head": branch, "title": f"{f.name}: implement the subcommand",
                                         "body": f"Adds {f.module} and its registry line; check.py {f.name} passes."}),
            _bash(sync_main, "bring main into the branch and re-run every check"),
            Step(tool="pr_merge", args={"number": "${pr}"}),
            # Each conflict (a peer merged first): merge main again and retry, up to MERGE_RETRIES times.
            *[step for _ in range(MERGE_RETRIES) for step in (
                _bash(sync_main, "merge main again after the conflict").model_copy(update={"when": "ERROR"}),
                Step(tool="pr_merge", args={"number": "${pr}"}, unless=r"merged: PR #\d+"),
            )],
            Step(
                tool="board_write",
                args={"type": "PATCH_SUMMARY",
                      "text": f"{f.name}: added {f.module} + registry line; visible check passes; merged PR #${{pr}}"},
            ),
            Step(say=f"Merged {f.name} (PR #${{pr}}) and published a PATCH_SUMMARY."),
        ]
    )


def textkit_script(workers: int, task: Task | None = None) -> Script:
    """Worker wNNN (1-based) builds feature NNN-1; workers past the feature count start over."""
    task = task or Task.load("textkit")
    width = max(3, len(str(workers)))
    return Script(workers={f"w{i:0{width}d}": [feature_turn(task, i - 1)] for i in range(1, workers + 1)})
