"""Benchmark: what the embedded forge's enforcement costs a push, a merge and a git request.

    python bench/forge_push.py [--pushes 40] [--merges 20] [--files 200]

One embedded forge (no Ray) seeded with --files files in a few folders; one worker's clone. Times,
each over real git on 127.0.0.1:
  * push_ms: `git push` of one small commit to a new branch of the worker's own namespace (the
    pre-receive hook checks the refs, then every path, link and file size of the new commits);
  * push_tree_ms: the same for a commit that adds --files files at once (the hook's content check
    grows with the paths a push adds);
  * merge_ms: `pr_merge` of a one-file PR (merge in the object store, the merged tree checked,
    compare-and-swap of main);
  * auth_us: checking one request's token against its stored salted hash (every git request does).
Prints the machine, then as its last line one JSON object with medians and p90s, whether the timed
forge enforces (`enforcing`: it has the receive checks of issue 12) and the load average before and
after (the machine may be shared: figures taken under load say so).

Only the API every version of the forge has is used, so the same script times an older checkout
for comparison (run it with that checkout's interpreter: the project is imported from the
installed package, this folder only provides bench.common).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.append(str(ROOT))  # after site-packages: the installed agensh_ray is the one timed

from agensh_ray.services.forge.embedded import EmbeddedForge  # noqa: E402
from bench.common import machine_facts, pct, print_result, say  # noqa: E402

ENV = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
       "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "b@x.invalid", "GIT_COMMITTER_NAME": "bench",
       "GIT_COMMITTER_EMAIL": "b@x.invalid"}


def git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", *args], cwd=cwd, env=ENV, check=True, capture_output=True)


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1000


def summary(name: str, values: list[float], digits: int = 1) -> dict:
    return {f"{name}_p50": round(pct(values, 0.5), digits), f"{name}_p90": round(pct(values, 0.9), digits)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pushes", type=int, default=40, help="pushes of one small commit (default 40)")
    ap.add_argument("--merges", type=int, default=20, help="PRs merged (default 20)")
    ap.add_argument("--files", type=int, default=200, help="files in the seed and in the big push (default 200)")
    args = ap.parse_args()
    t0 = time.time()
    git_version = subprocess.run(["git", "--version"], capture_output=True, text=True).stdout.strip()
    facts = machine_facts(git=git_version)
    print("machine:", json.dumps(facts), flush=True)
    enforcing = importlib.util.find_spec("agensh_ray.services.forge.embedded.tokens") is not None
    with tempfile.TemporaryDirectory(prefix="agensh-bench-forge-") as tmp:
        base = Path(tmp)
        starter = base / "starter"
        for i in range(args.files):
            path = starter / f"pkg{i % 8}" / f"mod{i}.py"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"VALUE = {i}\n" * 20)
        forge = EmbeddedForge(base / "forge")
        forge.start()
        try:
            forge.init_repo(starter, "bench", "bench")
            for w in ("w001", "w002"):
                forge.add_user(w)
            repo = base / "clone"
            git("clone", "--quiet", forge.clone_url("w001"), str(repo), cwd=base)
            say(t0, f"forge seeded with {args.files} files; timing {args.pushes} pushes")
            push_ms = []
            for i in range(args.pushes):
                (repo / f"note{i}.txt").write_text(f"{i}\n")
                git("add", "-A", cwd=repo)
                git("commit", "--quiet", "-m", f"note {i}", cwd=repo)
                push_ms.append(timed(lambda i=i: git("push", "--quiet", "origin", f"HEAD:refs/heads/w001/p{i}",
                                                     cwd=repo)))
            tree_ms = []
            for i in range(max(3, args.pushes // 8)):
                git("checkout", "--quiet", "-B", f"w001/tree{i}", "origin/main", cwd=repo)
                for j in range(args.files):
                    path = repo / f"new{i}" / f"d{j % 8}" / f"f{j}.txt"
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(f"{i} {j}\n")
                git("add", "-A", cwd=repo)
                git("commit", "--quiet", "-m", f"tree {i}", cwd=repo)
                tree_ms.append(timed(lambda i=i: git("push", "--quiet", "origin", f"HEAD:refs/heads/w001/tree{i}",
                                                     cwd=repo)))
            say(t0, f"timing {args.merges} merges")
            merge_ms = []
            for i in range(args.merges):
                git("checkout", "--quiet", "-B", f"w001/m{i}", "origin/main", cwd=repo)
                (repo / f"merge{i}.txt").write_text(f"{i}\n")
                git("add", "-A", cwd=repo)
                git("commit", "--quiet", "-m", f"merge {i}", cwd=repo)
                git("push", "--quiet", "origin", f"HEAD:refs/heads/w001/m{i}", cwd=repo)
                pr = forge.pr_create("w001", f"w001/m{i}", f"merge {i}")
                merge_ms.append(timed(lambda pr=pr: forge.pr_merge(pr.number, "w002")))
                git("fetch", "--quiet", "origin", cwd=repo)
            token = forge.add_user("w001")
            n = 20000
            t = time.perf_counter()
            for _ in range(n):
                forge._authenticate("w001", token)
            auth_us = (time.perf_counter() - t) / n * 1e6
        finally:
            forge.close()
    result = {"enforcing": enforcing, "pushes": args.pushes, "merges": args.merges, "files": args.files,
              **summary("push_ms", push_ms), **summary("push_tree_ms", tree_ms), **summary("merge_ms", merge_ms),
              "auth_us": round(auth_us, 2), "load_avg_start": facts["load_avg"][0],
              "load_avg_end": round(os.getloadavg()[0], 2)}
    say(t0, "done")
    print_result(result)


if __name__ == "__main__":
    main()
