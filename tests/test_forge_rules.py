"""The rules both forges share (services/forge/rules.py), and the embedded forge's
receive hook as git runs it: a real file, standalone, stdlib only."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agensh_ray.errors import ForgeError
from agensh_ray.services.forge import rules
from agensh_ray.services.forge.embedded import PROTECTION_MESSAGE
from agensh_ray.services.forge.embedded.hooks import RECEIVE_HOOK, HookLog, PushLimits, install_hooks

MAIN = "refs/heads/main"
OLD, NEW = "1" * 40, "2" * 40

# --------------------------------------------------------------------------- rules


def test_mentions_read_names_not_emails_or_paths():
    text = "cc @w003, @w002. and @w003 again; mail a@b.example, see docs/@x, @@w009 and @w004-"
    assert rules.mentions(text) == ["w003", "w002", "w004"]
    assert rules.mentions(None) == [] and rules.mentions("") == []


def test_branch_names_are_normalised_and_checked():
    assert rules.branch_name("  refs/heads/w001/x ", "head") == "w001/x"
    assert rules.branch_name("origin/w001/x", "head") == "origin/w001/x"
    assert rules.branch_name("origin/w001/x", "head", strip_origin=True) == "w001/x"
    assert rules.branch_name("refs/heads/origin/x", "head", strip_origin=True) == "x"
    with pytest.raises(ForgeError, match="^pr_create needs a base branch name$"):
        rules.branch_name("  ", "base")
    with pytest.raises(ForgeError, match="^'a b' is not a valid branch name$"):
        rules.branch_name("a b", "head", well_formed=lambda name: " " not in name)
    with pytest.raises(ForgeError, match="^'-x' is not a valid branch name$"):
        rules.branch_name("-x", "head", well_formed=lambda name: True)
    assert rules.branch_name("w001/" + "x" * 195, "head") == "w001/" + "x" * 195
    with pytest.raises(ForgeError, match=r"^the base branch name is 201 characters; the limit is 200 \(PRs target"):
        rules.branch_name("x" * 201, "base")


def test_pr_texts_are_bounded():
    rules.check_title("t" * 200)
    rules.check_comment("c" * 65_536)
    for kind in ("body", "review"):
        rules.check_text(kind, "b" * 65_536)
        rules.check_text(kind, "")
        with pytest.raises(ForgeError, match="is 65,537 characters; the limit is 65,536 "):
            rules.check_text(kind, "b" * 65_537)
    with pytest.raises(ForgeError, match="^a PR title is 201 characters; the limit is 200 "):
        rules.check_title("t" * 201)
    with pytest.raises(ForgeError, match="^the comment is 65,537 characters; the limit is 65,536 "):
        rules.check_comment("c" * 65_537)


@pytest.mark.parametrize(
    ("kind", "actor", "expected"),
    [
        ("pr_opened", "w001", []),
        ("pr_reviewed", "w002", ["w001"]),
        ("pr_merged", "w002", ["w001"]),
        ("pr_closed", "w003", ["w001"]),
        ("merge_conflict", "w002", ["w001"]),
        ("pr_commented", "w003", ["w001"]),  # anyone else: the author
        ("pr_commented", "w001", ["w002", "w003"]),  # the author replying: the reviewers
        ("push", "w001", ["w002", "w003"]),  # a push to the PR's head: the reviewers
    ],
)
def test_who_an_event_concerns(kind, actor, expected):
    assert rules.concerned(kind, actor, "w001", ["w002", "w003"]) == expected


def test_notify_list_is_each_once_and_never_the_actor():
    assert rules.notify_list("w002", ["w001", None, "w002", "w001"], ["w003", "w002", "w001"]) == ["w001", "w003"]


def test_event_details_and_diff_limit():
    assert rules.push_detail("refs/heads/x", "0" * 40, NEW) == f"created refs/heads/x at {NEW[:12]}"
    assert rules.push_detail("refs/heads/x", OLD, "0" * 40) == f"deleted refs/heads/x (was {OLD[:12]})"
    assert rules.push_detail("refs/heads/x", OLD, NEW) == f"updated refs/heads/x: {OLD[:12]} -> {NEW[:12]}"
    assert rules.review_detail("approve", "") == "approve" and rules.verdict_of("request_changes: no") == (
        "request_changes")
    assert rules.conflict_detail([]) == "conflicting files: (unknown)"
    long = "x" * (rules.MAX_DIFF_CHARS + 5)
    assert rules.truncate_diff(long).endswith(f"\n... diff truncated at {rules.MAX_DIFF_CHARS} characters ...\n")
    assert rules.truncate_diff("short") == "short"


def test_refusals_read_the_same_for_both_forges():
    with pytest.raises(ForgeError, match=r"^bad state 'done': use one of open, merged, closed, all$"):
        rules.check_pr_state("done")
    with pytest.raises(ForgeError, match=r"^bad verdict 'lgtm': use one of approve, comment, request_changes$"):
        rules.check_verdict("lgtm")
    with pytest.raises(ForgeError, match="you cannot request changes your own PR"):
        rules.check_not_own_review(2, "w001", "w001", "request_changes")
    rules.check_not_own_review(2, "w001", "w001", "comment")
    assert str(rules.pr_not_found(9, [2, 4])) == "PR #9 not found (open PRs: #2, #4); pr_list shows them all"
    assert str(rules.pr_not_found(9, [])).startswith("PR #9 not found (open PRs: none)")


# --------------------------------------------------------------------------- the receive hook


def run_hook(kind: str, policy: Path, updates: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-I", "-S", str(RECEIVE_HOOK), kind, str(policy)],
        input=updates, capture_output=True, text=True, env={"REMOTE_USER": "w001", **env}, timeout=30, cwd=cwd,
    )


def write_policy(tmp_path: Path) -> tuple[Path, Path]:
    log = tmp_path / "hook-events.jsonl"
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"log": str(log), "protected": "main", "message": PROTECTION_MESSAGE,
                                  "admins": ["admin"], "max_file_bytes": 1000}))
    return policy, log


def lines(log: Path) -> list[dict]:
    return [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []


def test_hook_standalone_refuses_main_and_records_it(tmp_path):
    policy, log = write_policy(tmp_path)
    res = run_hook("pre-receive", policy, f"{OLD} {NEW} refs/heads/w001/x\n{OLD} {NEW} {MAIN}\n", tmp_path)
    assert res.returncode == 1
    assert res.stderr.splitlines() == [
        f"refused: {MAIN}: {PROTECTION_MESSAGE}",
        "Nothing from this push was accepted. Push only your own branch, e.g. "
        "`git push origin HEAD:refs/heads/w001/<topic>`.",
    ]
    [rec] = lines(log)
    assert (rec["kind"], rec["actor"], rec["old"], rec["new"], rec["ref"]) == ("push_rejected", "w001", OLD, NEW, MAIN)
    assert rec["reason"] == f"{MAIN}: {PROTECTION_MESSAGE}"

    # A check that cannot run (here: no repository, so the objects cannot be read) refuses: fail closed.
    res = run_hook("pre-receive", policy, f"{OLD} {NEW} refs/heads/w001/x\n", tmp_path)
    assert res.returncode == 1 and "the forge could not check this push" in res.stderr
    # The internal bypass skips the ref rules, never the content checks.
    res = run_hook("pre-receive", policy, f"{OLD} {NEW} {MAIN}\n", tmp_path, AGENSH_FORGE_INTERNAL="1")
    assert res.returncode == 1 and "could not check" in res.stderr and PROTECTION_MESSAGE not in res.stderr
    assert len(lines(log)) == 3

    assert run_hook("post-receive", policy, f"{OLD} {NEW} refs/heads/a\n{OLD} {NEW} refs/heads/b\nnoise\n",
                    tmp_path).returncode == 0
    assert [(r["kind"], r["ref"]) for r in lines(log)[3:]] == [("push", "refs/heads/a"), ("push", "refs/heads/b")]


def test_installed_hooks_run_the_file_for_a_real_push(git_env, tmp_path):
    """git itself runs the hooks install_hooks wrote; HookLog folds what they recorded, once."""
    bare, log = tmp_path / "repo.git", tmp_path / "hook-events.jsonl"
    subprocess.run(["git", "init", "--bare", "--quiet", "--initial-branch", "main", str(bare)], check=True)

    def git(*args: str) -> None:
        subprocess.run(["git", "--git-dir", str(bare), *args], check=True)

    install_hooks(bare, log, "main", PROTECTION_MESSAGE, ["admin"], PushLimits(), git)
    work = tmp_path / "work"
    subprocess.run(["git", "init", "--quiet", "--initial-branch", "main", str(work)], check=True)
    (work / "a.txt").write_text("a\n")
    subprocess.run(["git", "add", "a.txt"], cwd=work, check=True)
    subprocess.run(["git", "commit", "--quiet", "-m", "a"], cwd=work, check=True)

    refused = subprocess.run(["git", "push", str(bare), "HEAD:main"], cwd=work, capture_output=True, text=True)
    assert refused.returncode != 0 and PROTECTION_MESSAGE in refused.stderr
    # By path there is no REMOTE_USER: the pusher is "local", whose namespace is local/...
    pushed = subprocess.run(["git", "push", str(bare), "HEAD:refs/heads/local/a"], cwd=work, capture_output=True,
                            text=True)
    assert pushed.returncode == 0, pushed.stderr

    seen: list[tuple[str, str, int]] = []
    hooks = HookLog(log)
    hooks.fold(lambda rec, end: seen.append((rec["kind"], rec["ref"], end)))
    hooks.fold(lambda rec, end: seen.append((rec["kind"], rec["ref"], end)))
    assert [(k, r) for k, r, _ in seen] == [("push_rejected", MAIN), ("push", "refs/heads/local/a")]
    assert seen[-1][2] == hooks.offset == log.stat().st_size
