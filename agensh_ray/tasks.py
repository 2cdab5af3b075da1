"""`python -m agensh_ray.tasks`: the tasks a run can take, and what each holds.

    python -m agensh_ray.tasks list [--source local|programbench]
    python -m agensh_ray.tasks show ID        # a bundled name, a task folder, or programbench:<instance_id>
    python -m agensh_ray.tasks generate --features F --seed S --out DIR [--depth L --width W --registries R ...]

`list` prints one line per task: its id (what --task takes), source, language, difficulty and
active tests (tests of active branches, ignored tests left out). `show` adds the branches, the
ignore reasons and, for a catalogue instance, what this machine lacks to run it. `generate` writes a task
folder sized for an organization (agensh_ray/task/generate.py; docs/tasks.md, "Generated tasks").
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from pathlib import Path

from agensh_ray.errors import TaskError
from agensh_ray.task import CATALOGUE_PREFIX, Task, known_tasks


def _rows(source: str | None) -> list[tuple[str, str, str, str, int]]:
    rows = []
    if source in (None, "local"):
        for name in known_tasks():
            t = Task.load(name)
            rows.append((name, "local", t.instance.get("language", "?"), t.instance.get("difficulty") or "-",
                         t.active_tests()))
    if source in (None, "programbench"):
        from agensh_ray.task.catalogue import CatalogueTask, catalogue

        for iid in sorted(catalogue()):
            t = CatalogueTask(iid)
            rows.append((f"{CATALOGUE_PREFIX}{iid}", "programbench", t.instance.get("language", "?"),
                         t.instance.get("difficulty") or "-", t.active_tests()))
    return rows


def cmd_list(source: str | None) -> int:
    rows = _rows(source)
    width = max((len(r[0]) for r in rows), default=2)
    print(f"{'id':<{width}}  {'source':<12}  {'language':<8}  {'difficulty':<10}  active tests")
    for iid, src, lang, diff, n in rows:
        print(f"{iid:<{width}}  {src:<12}  {lang:<8}  {diff:<10}  {n}")
    print(f"{len(rows)} tasks")
    return 0


def cmd_show(spec: str) -> int:
    task = Task.load(spec)
    inst = task.instance
    print(f"id           {task.name}")
    print(f"source       {task.source}" + (f" ({task.root})" if task.root else ""))
    for key in ("repository", "commit", "language", "difficulty"):
        print(f"{key:<12} {inst.get(key, '-')}")
    print(f"title        {task.title}")
    print(f"reference    {task.reference_relpath} (execute-only in each worker's clone)")
    print(f"active tests {task.active_tests()}")
    print("branches:")
    for branch, info in (inst.get("branches") or {}).items():
        reasons = Counter(r["id"] for t in info.get("ignored_tests") or [] for r in t.get("reasons") or [])
        state = f"ignored: {info.get('ignore_reason') or 'no reason given'}" if info.get("ignored") else "active"
        why = ", ".join(f"{k} {v}" for k, v in reasons.most_common())
        print(f"  {branch:<14} {len(info.get('tests') or []):>4} tests, {len(info.get('ignored_tests') or []):>3} "
              f"ignored{f' ({why})' if why else ''}; {state}")
    if inst.get("eval_clean_hashes"):
        print(f"gold hashes  {', '.join(h[:12] for h in inst['eval_clean_hashes'])} (removed from submissions)")
    if task.source == "programbench":
        from agensh_ray.task.catalogue import missing_requirements

        missing = missing_requirements(inst)
        print("this machine: " + ("has everything it needs" if not missing else "lacks:"))
        for m in missing:
            print(f"  - {m}")
    return 0


def cmd_generate(a: argparse.Namespace) -> int:
    import time

    from agensh_ray.task.generate import Params, generate

    params = Params(features=a.features, seed=a.seed, depth=a.depth, width=a.width, registries=a.registries,
                    helpers=a.helpers, helper_share=a.helper_share, extra_deps=a.extra_deps, size_alpha=a.size_alpha,
                    size_min=a.size_min, size_max=a.size_max, branches=a.branches)
    try:
        params.check()
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    try:
        g = generate(params, Path(a.out))
    except FileExistsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    size = sum(p.stat().st_size for p in Path(a.out).rglob("*") if p.is_file())
    print(f"wrote {a.out}: F={g['features']} L={g['critical_path']} width={g['width']} registries={g['registries']} "
          f"ideal speedup min(N, {g['max_parallelism']:.1f}); {size / 1e6:.2f} MB in {time.monotonic() - t0:.2f} s")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m agensh_ray.tasks", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    lp = sub.add_parser("list", help="every task: id, source, language, difficulty, active tests")
    lp.add_argument("--source", choices=["local", "programbench"], default=None,
                    help="only bundled task folders (local) or ProgramBench's catalogue (programbench)")
    sp = sub.add_parser("show", help="one task: its fields, branches, ignore reasons, what this machine lacks")
    sp.add_argument("id", help="a bundled task's name, a task folder, or programbench:<instance_id>")
    gp = sub.add_parser("generate", help="write a generated task folder (docs/tasks.md, 'Generated tasks')")
    gp.add_argument("--features", "-F", type=int, required=True, help="F: subcommands to rebuild")
    gp.add_argument("--seed", type=int, default=0, help="everything is drawn from it: same arguments, same bytes")
    gp.add_argument("--out", required=True, help="the task folder to write (its name is the instance id)")
    gp.add_argument("--depth", "-L", type=int, default=4, help="L: the critical path, in features (default 4)")
    gp.add_argument("--width", "-W", type=int, default=None, help="the most features on one level (default ceil(F/L))")
    gp.add_argument("--registries", "-R", type=int, default=4, help="registry files the features spread over (4)")
    gp.add_argument("--helpers", type=int, default=None, help="shared helpers (default max(1, F//16))")
    gp.add_argument("--helper-share", type=float, default=0.2, help="share of features using a helper (0.2)")
    gp.add_argument("--extra-deps", type=float, default=0.5, help="mean extra dependencies per feature (0.5)")
    gp.add_argument("--size-alpha", type=float, default=1.2, help="Pareto shape of feature sizes (1.2)")
    gp.add_argument("--size-min", type=int, default=2, help="smallest feature, in lines (2)")
    gp.add_argument("--size-max", type=int, default=200, help="largest feature, in lines (200)")
    gp.add_argument("--branches", type=int, default=None, help="hidden test branches (default ceil(F/128), <= 32)")
    a = p.parse_args(argv)
    try:
        if a.cmd == "generate":
            return cmd_generate(a)
        return cmd_list(a.source) if a.cmd == "list" else cmd_show(a.id)
    except TaskError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # `tasks list | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
