"""The Gitea adapter through real HTTP and real git against the fake Gitea,
every request and response checked against services/fakes/specs/gitea-swagger.v1.json."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

import pytest

from agensh_ray.errors import ForgeError, MergeConflict
from agensh_ray.services.fakes.contract import missing_specs

SKIP = missing_specs("gitea")
pytestmark = [
    pytest.mark.contract,
    pytest.mark.skipif(SKIP is not None, reason=SKIP or ""),
]


def git(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_TERMINAL_PROMPT="0", GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull,
               GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@x.invalid", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@x.invalid")
    res = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
    if check and res.returncode != 0:
        raise AssertionError(f"git {' '.join(args)}: {res.stderr}")
    return res


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    from agensh_ray.services.fakes import FakeStack

    with FakeStack(tmp_path_factory.mktemp("gitea"), workers=3, mattermost=False) as s:
        yield s


@pytest.fixture(scope="module")
def forge(stack, tmp_path_factory):
    from agensh_ray.services.forge.gitea import GiteaForge

    f = GiteaForge.from_secrets(stack.secrets, tmp_path_factory.mktemp("forge-state"),
                                intake_listen=stack.intake_listen, merge_wait_s=20)
    f.start()
    yield f
    f.close()


def branch_with(forge, user: str, tmp: Path, branch: str, path: str, text: str, base: str = "origin/main") -> Path:
    repo = tmp / f"{user}-{branch.replace('/', '-')}"
    git("clone", "--quiet", forge.clone_url(user), str(repo), cwd=tmp)
    git("checkout", "--quiet", "-B", branch, base, cwd=repo)
    (repo / path).parent.mkdir(parents=True, exist_ok=True)
    (repo / path).write_text(text)
    git("add", "-A", cwd=repo)
    git("commit", "--quiet", "-m", f"{branch}: {path}", cwd=repo)
    git("push", "--quiet", "origin", f"HEAD:refs/heads/{branch}", cwd=repo)
    return repo


def wait_kind(forge, kind: str, pr: int | None = None, timeout: float = 10.0):
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for ev in forge.events_since(0):
            if ev.kind == kind and (pr is None or ev.pr == pr):
                return ev
        forge.events.wait_for(len(forge.events.events) + 1, 0.2)
    raise AssertionError(f"no {kind} event for PR {pr}: {[e.kind for e in forge.events_since(0)]}")


def test_issue_and_protected_main(forge, stack, tmp_path):
    issue = forge.issue_view(1)
    assert issue.number == 1 and "textkit" in (issue.title + issue.body).lower()
    with pytest.raises(ForgeError, match="issue #99 not found"):
        forge.issue_view(99)
    repo = tmp_path / "direct"
    git("clone", "--quiet", forge.clone_url("w001"), str(repo), cwd=tmp_path)
    (repo / "x.txt").write_text("x\n")
    git("add", "x.txt", cwd=repo)
    git("commit", "--quiet", "-m", "x", cwd=repo)
    res = git("push", "origin", "HEAD:refs/heads/main", cwd=repo, check=False)
    assert res.returncode != 0 and "protected branch main" in res.stderr


def test_full_pr_cycle_and_conflicts(forge, stack, tmp_path):
    fake = stack.gitea
    old_main = forge.main_head()
    branch_with(forge, "w001", tmp_path, "w001/feat-a", "shared.txt", "from a\n")
    pr = forge.pr_create("w001", "w001/feat-a", "Add shared from a", "first @w003 please look")
    assert pr.state == "open" and pr.author == "w001" and pr.files == ["shared.txt"]
    opened = wait_kind(forge, "pr_opened", pr.number)
    assert opened.notify == ["w003"] and opened.actor == "w001"
    with pytest.raises(ForgeError, match="already open for w001/feat-a -> main"):
        forge.pr_create("w001", "w001/feat-a", "again")
    with pytest.raises(ForgeError, match="cannot approve your own PR"):
        forge.pr_review(pr.number, "w001", "approve")
    forge.pr_review(pr.number, "w002", "approve", "looks right")
    forge.pr_comment(pr.number, "w003", "nice, @w001")
    view = forge.pr_view(pr.number)
    assert [(r.reviewer, r.verdict) for r in view.reviews] == [("w002", "approve")]
    assert [(c.author, c.body) for c in view.comments] == [("w003", "nice, @w001")]
    assert "+from a" in view.diff and view.files == ["shared.txt"]
    assert wait_kind(forge, "pr_reviewed", pr.number).notify == ["w001"]
    assert wait_kind(forge, "pr_commented", pr.number).notify == ["w001"]

    # A second PR from the old main touching the same file: conflicts once the first merges.
    branch_with(forge, "w002", tmp_path, "w002/feat-b", "shared.txt", "from b\n", base=old_main)
    pr_b = forge.pr_create("w002", "w002/feat-b", "Add shared from b")

    merged = forge.pr_merge(pr.number, "w002")
    assert merged.state == "merged" and merged.merged_by == "w002" and merged.merge_commit == forge.main_head()
    assert wait_kind(forge, "pr_merged", pr.number).notify == ["w001"]
    with pytest.raises(ForgeError, match="is merged"):
        forge.pr_merge(pr.number, "w003")

    # Gitea refuses with 405 while it checks and after it found the conflict; the adapter names the files.
    with pytest.raises(MergeConflict) as exc:
        forge.pr_merge(pr_b.number, "w002")
    assert exc.value.files == ["shared.txt"] and "Merge main into your branch" in str(exc.value)
    conflict = wait_kind(forge, "merge_conflict", pr_b.number)
    assert conflict.actor == "w002" and "shared.txt" in conflict.detail

    # A 409: main moves between Gitea's mergeability check and the merge itself.
    branch_with(forge, "w003", tmp_path, "w003/feat-c", "race.txt", "from c\n")
    pr_c = forge.pr_create("w003", "w003/feat-c", "race c")
    branch_with(forge, "w001", tmp_path, "w001/feat-d", "race.txt", "from d\n")
    pr_d = forge.pr_create("w001", "w001/feat-d", "race d")
    assert fake.wait_idle()

    def land_d_first(repo, issue):
        fake._merge(repo, repo["issues"][pr_d.number], {"do": "merge"}, "w003", True)

    fake.before_merge = land_d_first
    with pytest.raises(MergeConflict) as exc:
        forge.pr_merge(pr_c.number, "w003")
    assert exc.value.files == ["race.txt"]
    assert ("POST", f"/api/v1/repos/agensh/run/pulls/{pr_c.number}/merge", 409) in fake.requests
    assert forge.pr_view(pr_d.number, with_diff=False).state == "merged"

    # Close: the author is told when someone else closes.
    closed = forge.pr_close(pr_c.number, "w002")
    assert closed.state == "closed"
    assert wait_kind(forge, "pr_closed", pr_c.number).notify == ["w003"]
    states = {p.number: p.state for p in forge.pr_list("all")}
    assert states[pr.number] == "merged" and states[pr_b.number] == "open" and states[pr_c.number] == "closed"
    assert [p.number for p in forge.pr_list("merged")] == [pr.number, pr_d.number]

    # Resolve w002/feat-b as the agent is told to: merge main, fix, push, merge again. The push names the PR
    # and notifies its reviewers.
    forge.pr_review(pr_b.number, "w003", "comment", "conflicts with a, please merge main")
    repo_b = tmp_path / "w002-w002-feat-b"
    git("fetch", "--quiet", "origin", cwd=repo_b)
    assert git("merge", "origin/main", cwd=repo_b, check=False).returncode != 0
    (repo_b / "shared.txt").write_text("from a\nfrom b\n")
    git("add", "shared.txt", cwd=repo_b)
    git("commit", "--quiet", "--no-edit", cwd=repo_b)
    git("push", "--quiet", "origin", "HEAD:refs/heads/w002/feat-b", cwd=repo_b)
    push = wait_kind(forge, "push", pr_b.number)
    assert push.actor == "w002" and push.notify == ["w003"] and push.ref == "refs/heads/w002/feat-b"
    assert forge.pr_merge(pr_b.number, "w001").state == "merged"
    assert not fake.violations, "\n".join(map(str, fake.violations))


def test_merge_retries_after_405_try_again_later(forge, stack, tmp_path):
    fake = stack.gitea
    branch_with(forge, "w003", tmp_path, "w003/feat-slow", "slow.txt", "slow\n")
    fake.hold_checks()  # Gitea has not computed mergeability yet
    try:
        pr = forge.pr_create("w003", "w003/feat-slow", "slow check")
        result: dict = {}
        t = threading.Thread(target=lambda: result.update(pr=forge.pr_merge(pr.number, "w001")))
        t.start()
        path = f"/pulls/{pr.number}/merge"
        assert fake.wait_for_request("POST", path, 405), "the adapter never hit the 405"
    finally:
        fake.release_checks()
    t.join(timeout=30)
    assert result["pr"].state == "merged"
    codes = [s for m, p, s in fake.requests if m == "POST" and p.endswith(path)]
    assert codes[0] == 405 and codes[-1] == 200
    assert not fake.violations, "\n".join(map(str, fake.violations))


def test_refusals_are_worded_for_the_agent(forge):
    with pytest.raises(ForgeError, match="not found on the forge: push it first"):
        forge.pr_create("w001", "w001/no-such-branch", "x")
    with pytest.raises(ForgeError, match="head and base are both main"):
        forge.pr_create("w001", "main", "x")
    with pytest.raises(ForgeError, match="is an issue, not a pull request"):
        forge.pr_view(1)
    with pytest.raises(ForgeError, match="unknown user 'w999'"):
        forge.clone_url("w999")
    with pytest.raises(ForgeError, match="empty comment"):
        forge.pr_comment(1, "w001", " ")


@pytest.mark.security
def test_megabyte_pr_texts_are_refused_before_gitea_sees_them(forge, tmp_path):
    """The Gitea adapter refuses the same texts as the embedded forge, in the same words (the shared rules)."""
    branch_with(forge, "w002", tmp_path, "w002/big", "big.txt", "big\n")
    branch_with(forge, "w001", tmp_path, "w001/small", "small.txt", "small\n")
    pr = forge.pr_create("w001", "w001/small", "Add small")
    before = forge.pr_list("all")
    mb = "x" * (1 << 20)
    for attempt, says in (
        (lambda: forge.pr_create("w002", "w002/big", mb), "a PR title is 1,048,576 characters; the limit is 200 "),
        (lambda: forge.pr_create("w002", "w002/big", "Add big", mb), "the PR body is 1,048,576 characters; the "
                                                                       "limit is 65,536 "),
        (lambda: forge.pr_comment(pr.number, "w002", mb), "the comment is 1,048,576 characters; the limit is 65,536 "),
        (lambda: forge.pr_review(pr.number, "w002", "comment", mb), "the review body is 1,048,576 characters; "),
    ):
        with pytest.raises(ForgeError, match=f"^{says}"):
            attempt()
    view = forge.pr_view(pr.number, with_diff=False)
    assert forge.pr_list("all") == before and view.comments == [] and view.reviews == []


@pytest.mark.security
def test_gitea_protections_enforce_what_gitea_can(forge, stack, tmp_path):
    """What provisioning asks of Gitea, as the fake enforces it the way Gitea 1.27 does: main in any case,
    every tag, each worker's `<worker>/**` namespace and nobody on any other branch; what Gitea cannot do:
    let a worker delete its own (protected) branches."""
    mine = branch_with(forge, "w001", tmp_path, "w001/sec", "sec.txt", "w001\n")
    theirs = branch_with(forge, "w002", tmp_path, "w002/sec", "sec.txt", "w002\n")

    def push(repo: Path, *args: str) -> subprocess.CompletedProcess:
        return git("push", "origin", *args, cwd=repo, check=False)

    for ref, says in (("refs/heads/w002/sec", "Not allowed to push to protected branch w002/sec"),
                      ("refs/heads/w002/new", "Not allowed to push to protected branch w002/new"),
                      ("refs/heads/Main", "Not allowed to push to protected branch Main"),
                      ("refs/heads/MAIN", "Not allowed to push to protected branch MAIN"),
                      ("refs/heads/W002/sec", "Not allowed to push to protected branch W002/sec"),
                      ("refs/heads/loose-branch", "Not allowed to push to protected branch loose-branch"),
                      ("refs/tags/v1", "Tag v1 is protected")):
        res = push(mine, "--force", f"HEAD:{ref}")
        assert res.returncode != 0 and says in res.stderr, (ref, res.stderr)
    res = push(theirs, ":refs/heads/w001/sec")
    assert res.returncode != 0 and "protected from deletion" in res.stderr

    # Its own namespace: pushes and force-pushes (the sim agent's `push -f`).
    git("commit", "--quiet", "--amend", "-m", "rewritten", cwd=mine)
    assert push(mine, "-f", "HEAD:refs/heads/w001/sec").returncode == 0
    # Not possible on Gitea (services/README.md): deleting its own branch.
    assert "protected from deletion" in push(mine, ":refs/heads/w001/sec").stderr
    # The adapter refuses a PR from another worker's branch, as the embedded forge does.
    with pytest.raises(ForgeError, match="branch w002/sec is not yours"):
        forge.pr_create("w001", "w002/sec", "mine now")
    assert not stack.gitea.violations, "\n".join(map(str, stack.gitea.violations))
