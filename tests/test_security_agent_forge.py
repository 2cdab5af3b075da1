"""A hostile worker's forge attacks made the way an agent makes them (issue 12): a real ACP agent process
(the scripted agent, `cmd:` harness) on a real worker host runs git in its own shell (inside its sandbox,
where no permission request stands between it and the forge: the policy's refusals of ACP terminal commands
are tests/test_security_sandbox.py's), in its own clone with its own credentials, and calls the forge's MCP
tools as itself. Each attack is refused by the forge with a message the agent reads in its command's
output or tool result; afterwards the forge is healthy: the victim's branch
and PR are as they were, a normal PR merges, every worker's token still works.

(tests/test_security_forge.py has each attack in detail, driven with git directly.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


from agensh_ray.config import SandboxConfig
from tests.support import LocalServices, await_for
from tests.test_forge_embedded import commit_file, git, push_branch

pytestmark = pytest.mark.security

WORKERS = ["w001", "w002", "w003"]
ID = "-c user.name=w001 -c user.email=w001@agensh.invalid"
ESCAPE = (  # a commit whose tree holds ../../../escape.txt, made with git's plumbing (a checkout cannot)
    "b=$(echo evil | git hash-object -w --stdin)"
    " && t=$(printf '100644 blob %s\\tescape.txt\\n' $b | git mktree)"
    " && for i in 1 2 3; do t=$(printf '040000 tree %s\\t..\\n' $t | git mktree); done"
    f" && c=$(git {ID} commit-tree $t -p HEAD -m escape)"
    " && git push origin $c:refs/heads/w001/escape 2>&1"
)
# (what the agent runs, what its terminal must show)
ATTACKS = [
    ((f"git checkout -q -b w002/evil && echo x > evil.txt && git add evil.txt"
      f" && git {ID} commit -q --author 'w002 <w002@agensh.invalid>' -m 'by w002, honestly'"
      " && git push origin HEAD:refs/heads/w002/evil 2>&1"), "w002/evil is not yours"),
    ("git push -f origin HEAD:refs/heads/w002/feature 2>&1", "w002/feature is not yours"),
    ("git push origin :refs/heads/w002/feature 2>&1", "w002/feature is not yours"),
    ("git push origin HEAD:refs/heads/Main 2>&1", "'Main' names main"),
    ("git push origin HEAD:refs/heads/main 2>&1", "main is protected"),
    ("git tag main && git push origin refs/tags/main 2>&1", "tags are refused"),
    (ESCAPE, "hasDotdot"),  # git's own fsck on receive, before any hook
    ((f"git checkout -q -B w001/big && head -c 50000000 /dev/zero > big.bin && git add big.bin"
      f" && git {ID} commit -q -m big && git push origin HEAD:refs/heads/w001/big 2>&1"),
     "files are limited to 10 MiB"),
]


def steps(victim_pr: int) -> list[dict]:
    terminal = [{"do": "shell", "text": text} for text, _ in ATTACKS]
    tools = [
        {"do": "mcp", "tool": "pr_create", "args": {"head": "w002/feature", "title": "mine now"}},
        {"do": "mcp", "tool": "pr_review", "args": {"number": victim_pr, "verdict": "approve", "body": "LGTM"}},
        {"do": "mcp", "tool": "pr_merge", "args": {"number": victim_pr}},
    ]
    return [*terminal, *tools]


def step_results(log: Path) -> list[dict]:
    if not log.exists():
        return []
    return [r for r in map(json.loads, log.read_text().splitlines()) if r["event"] == "step" and r["turn"] == 0]


def refs(repo_git: Path) -> dict[str, str]:
    out = subprocess.run(["git", "--git-dir", str(repo_git), "for-each-ref", "--format=%(refname) %(objectname)"],
                         capture_output=True, text=True, check=True).stdout
    return dict(line.split() for line in out.splitlines())


@pytest.fixture
def services(git_env, tmp_path):
    s = LocalServices(tmp_path, WORKERS)
    yield s
    s.close()


async def test_a_hostile_agent_is_refused_by_the_forge_through_its_own_terminal_and_tools(services, tmp_path):
    forge = services.forge_plain
    # The victim: w002's branch and its open PR.
    victim = tmp_path / "w002"
    git("clone", "--quiet", forge.clone_url("w002"), str(victim), cwd=tmp_path)
    git("checkout", "--quiet", "-b", "w002/feature", cwd=victim)
    commit_file(victim, "w002.txt", "w002's work\n", "w002's feature")
    push_branch(victim, "w002/feature")
    pr = forge.pr_create("w002", "w002/feature", "w002's feature")
    before = refs(forge.repo)
    tokens = {w: forge.add_user(w) for w in WORKERS}

    scripts = tmp_path / "scripts"  # the agent runs sandboxed: it sees its script through a read-only mount
    scripts.mkdir()
    script = scripts / "script.json"
    script.write_text(json.dumps({"turns": [steps(pr.number)]}))
    todo = len(steps(pr.number))
    host = services.host(tmp_path / "run", ["w001"], minutes=240, time_scale=60,
                         sandbox=SandboxConfig(read_only=[scripts]),
                         harness=f"cmd:{sys.executable} -m agensh_ray.fakes.acp_agent --script {script} --log ~/agent.jsonl")
    log = host.workers["w001"].home / "agent.jsonl"
    await host.start()
    try:
        await host.launch("w001")
        await await_for(lambda: len(step_results(log)) >= todo, 240, "the hostile agent's turn")
    finally:
        await host.stop()

    results = step_results(log)
    for (text, says), rec in zip(ATTACKS, results):
        out = rec["result"]
        assert rec["ok"] and out["exit_code"] != 0, f"accepted: {text}\n{out}"
        assert says in out["output"], f"{says!r} not in:\n{out['output']}"
    create, review, merge = (rec["result"] for rec in results[len(ATTACKS):])
    assert create.startswith("ERROR:") and "branch w002/feature is not yours" in create
    # Review and merge are the integrators' role: allowed, and what lands is w002's work, not w001's.
    assert review.startswith("reviewed: ") and merge.startswith("merged: "), (review, merge)

    after = refs(forge.repo)
    assert after["refs/heads/w002/feature"] == before["refs/heads/w002/feature"]
    assert [r for r in after if r.startswith("refs/tags/")] == []
    assert [r for r in after if r.lower() == "refs/heads/main"] == ["refs/heads/main"]
    assert not {"refs/heads/w002/evil", "refs/heads/w001/escape", "refs/heads/w001/big"} & set(after)
    merged = forge.pr_view(pr.number, with_diff=False)
    assert (merged.state, merged.author, merged.merged_by) == ("merged", "w002", "w001")
    git("fetch", "--quiet", "origin", cwd=victim)
    tree = git("ls-tree", "-r", "--name-only", "origin/main", cwd=victim).stdout.split()
    assert "w002.txt" in tree and "evil.txt" not in tree and "big.bin" not in tree
    rejected = [e for e in forge.events_since(0) if e.kind == "push_rejected"]
    assert {e.actor for e in rejected} == {"w001"} and len(rejected) >= len(ATTACKS)

    # Healthy: every token still works, and a normal PR of another worker merges.
    for w, token in tokens.items():
        assert forge._authenticate(w, token), f"{w}'s token stopped working"
    repo = tmp_path / "w003"
    git("clone", "--quiet", forge.clone_url("w003"), str(repo), cwd=tmp_path)
    git("checkout", "--quiet", "-b", "w003/ok", cwd=repo)
    commit_file(repo, "ok.txt", "fine\n", "a normal change")
    push_branch(repo, "w003/ok")
    assert forge.pr_merge(forge.pr_create("w003", "w003/ok", "normal").number, "w002").state == "merged"
