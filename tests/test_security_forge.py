"""One subject: a hostile worker against the embedded forge (issue 12), every
attack and its refusal in one place (split, the shared fixtures and checks
would be repeated). Through the path an agent has: git over the forge's HTTP
with its OWN clone URL (w001's credentials), and the forge's tools as its
worker id (tests/test_security_agent_forge.py makes them from a real agent's
terminal and MCP tools). Each attack is refused
with a message that says why, is recorded as a `push_rejected` event, and
leaves the forge healthy: a normal PR merges, every other worker's branches
are untouched, and no token can be read from the forge's files.

(Inside a run a real agent reaches git through its sandbox; the sandbox
changes nothing on this path, so git is driven here directly with the
worker's own credentials.)"""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from agensh_ray.errors import ForgeError
from agensh_ray.services.forge.embedded import PROTECTION_MESSAGE, EmbeddedForge, tokens
from agensh_ray.services.forge.embedded.hooks import PushLimits
from agensh_ray.services.forge.githttp import GitHTTPServer
from tests.support import wait_for
from tests.test_forge_embedded import clone, commit_file, git, make_starter, push_branch

pytestmark = pytest.mark.security

KEY = "5e" * 32
WORKERS = ("w001", "w002", "w003")


@pytest.fixture
def forge(git_env, tmp_path):
    f = EmbeddedForge(tmp_path / "forge", token_key=KEY)
    f.start()
    f.init_repo(make_starter(tmp_path), "Build the thing", "Make greet() friendlier.")
    for w in (*WORKERS, "admin"):
        f.add_user(w)
    yield f
    f.close()


@pytest.fixture
def victim(forge, tmp_path):
    """w002's clone with an open PR from w002/feature."""
    repo = clone(forge, "w002", tmp_path / "w002")
    git("checkout", "--quiet", "-b", "w002/feature", cwd=repo)
    commit_file(repo, "w002.txt", "w002's work\n", "w002's feature")
    push_branch(repo, "w002/feature")
    pr = forge.pr_create("w002", "w002/feature", "w002's feature")
    return repo, pr


@pytest.fixture
def attacker(forge, tmp_path):
    """w001's clone, with w001's own credentials in its origin URL."""
    repo = clone(forge, "w001", tmp_path / "w001")
    commit_file(repo, "w001.txt", "w001 was here\n", "w001's commit")
    return repo


def refs(forge: EmbeddedForge) -> dict[str, str]:
    out = subprocess.run(["git", "--git-dir", str(forge.repo), "for-each-ref", "--format=%(refname) %(objectname)"],
                         capture_output=True, text=True, check=True).stdout
    return dict(line.split() for line in out.splitlines())


def push(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return git("push", "origin", *args, cwd=repo, check=False)


def rejected(forge: EmbeddedForge) -> list:
    return [e for e in forge.events_since(0) if e.kind == "push_rejected"]


def assert_refused(res: subprocess.CompletedProcess, *says: str) -> None:
    assert res.returncode != 0, f"the push was accepted:\n{res.stderr}"
    for text in says:
        assert text in res.stderr, f"{text!r} not in:\n{res.stderr}"


def crafted_commit(repo: Path, tree: dict, message: str = "crafted") -> str:
    """A commit on HEAD whose tree is `tree`: {name: text | {subtree} | ("link", target)}, made with
    git's plumbing (a checkout could not make most of these)."""

    def make(entries: dict) -> str:
        lines = []
        for name, value in entries.items():
            if isinstance(value, dict):
                lines.append(f"040000 tree {make(value)}\t{name}")
            else:
                mode, data = ("120000", value[1]) if isinstance(value, tuple) else ("100644", value)
                blob = git("hash-object", "-w", "--stdin", cwd=repo, input=data).stdout.strip()
                lines.append(f"{mode} blob {blob}\t{name}")
        return git("mktree", cwd=repo, input="\n".join(lines) + "\n").stdout.strip()

    return git("commit-tree", make(tree), "-p", "HEAD", "-m", message, cwd=repo).stdout.strip()


def assert_healthy(forge: EmbeddedForge, tmp_path: Path, before: dict[str, str]) -> None:
    """Every ref but w001's and the merges is as it was, every worker's token still works (and is the one the
    run's key made), a normal PR merges, and no token is in any file."""
    after = refs(forge)
    for ref, sha in before.items():
        if not ref.startswith("refs/heads/w001/") and ref != "refs/heads/main":
            assert after.get(ref) == sha, f"{ref} changed"
    for w in (*WORKERS, "admin"):
        assert forge._authenticate(w, tokens.derive(tokens.as_key(KEY), w)), f"{w}'s token stopped working"
    assert git("ls-remote", "--heads", forge.clone_url("w002"), cwd=tmp_path).stdout.count("refs/heads/") >= 1
    repo = clone(forge, "w003", tmp_path / f"w003-{time.monotonic_ns()}")
    git("checkout", "--quiet", "-b", "w003/ok", cwd=repo)
    commit_file(repo, f"ok-{time.monotonic_ns()}.txt", "fine\n", "a normal change")
    push_branch(repo, "w003/ok")
    pr = forge.pr_create("w003", "w003/ok", "a normal PR")
    assert forge.pr_merge(pr.number, "w002").state == "merged"
    assert_no_token_in_files(forge)


def assert_no_token_in_files(forge: EmbeddedForge) -> None:
    tokens = [forge.add_user(w).encode() for w in (*WORKERS, "admin")]
    for path in forge.root.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            for token in tokens:
                assert token not in data, f"a token is readable in {path}"


# ============================================================================ tokens


def test_the_forge_state_keeps_token_hashes_not_tokens(forge, tmp_path):
    state = [json.loads(x) for x in (forge.root / "state.jsonl").read_text().splitlines()]
    users = [r for r in state if r["t"] == "user"]
    assert sorted(r["name"] for r in users) == sorted((*WORKERS, "admin"))
    assert all(set(r) == {"t", "name", "salt", "hash"} for r in users)
    assert_no_token_in_files(forge)

    # A restarted forge with the run's key authenticates every worker and hands out the same clone URLs.
    url = forge.clone_url("w002")
    forge.close()
    again = EmbeddedForge(forge.root, token_key=KEY)
    again.start()
    try:
        assert again.clone_url("w002").split("@")[0] == url.split("@")[0]
        assert again.add_user("w002") == forge.add_user("w002")
        clone(again, "w002", tmp_path / "after-restart")
    finally:
        again.close()

    # Without the key the forge cannot make the token again: it says so, and add_user issues a new one.
    keyless = EmbeddedForge(forge.root)
    keyless.start()
    try:
        with pytest.raises(ForgeError, match="keeps only a hash of w002's token"):
            keyless.clone_url("w002")
        old = url.split("//", 1)[1].split("@")[0].split(":")[1]
        new = keyless.add_user("w002")
        assert new != old and not keyless._authenticate("w002", old) and keyless._authenticate("w002", new)
        clone(keyless, "w002", tmp_path / "rotated")
    finally:
        keyless.close()


def test_a_state_file_with_plain_tokens_is_rewritten_without_them(git_env, tmp_path):
    root = tmp_path / "forge"
    root.mkdir()
    (root / "state.jsonl").write_text(json.dumps({"t": "user", "name": "w001", "token": "ab" * 20}) + "\n")
    f = EmbeddedForge(root)
    f.start()
    try:
        f.init_repo(make_starter(tmp_path), "t", "b")
        assert "ab" * 20 not in (root / "state.jsonl").read_text()
        assert f.add_user("w001") == "ab" * 20, "the old token keeps working"
        clone(f, "w001", tmp_path / "c")
    finally:
        f.close()


def test_user_names_that_differ_only_in_case_are_refused(forge):
    with pytest.raises(ForgeError, match="only in case"):
        forge.add_user("W001")


# ============================================================================ branch ownership


def test_a_worker_cannot_touch_another_workers_branches(forge, victim, attacker, tmp_path):
    repo2, pr = victim
    before = refs(forge)

    res = push(attacker, "HEAD:refs/heads/w002/evil")
    assert_refused(res, "refs/heads/w002/evil: w002/evil is not yours", "only branches named w001/<topic>",
                   "Nothing from this push was accepted")

    res = push(attacker, "--force", "HEAD:refs/heads/w002/feature")  # over w002's PR head
    assert_refused(res, "w002/feature is not yours")
    res = push(attacker, ":refs/heads/w002/feature")  # delete it
    assert_refused(res, "w002/feature is not yours")
    res = push(attacker, "HEAD:refs/heads/W002/feature")  # a case variant is not w001's namespace either
    assert_refused(res, "W002/feature is not yours")
    res = push(attacker, "HEAD:refs/heads/w001")  # the bare namespace name is no branch of it
    assert_refused(res, "is not yours")

    assert refs(forge) == before
    events = rejected(forge)
    assert [(e.actor, e.ref) for e in events] == [
        ("w001", "refs/heads/w002/evil"), ("w001", "refs/heads/w002/feature"), ("w001", "refs/heads/w002/feature"),
        ("w001", "refs/heads/W002/feature"), ("w001", "refs/heads/w001"),
    ]
    assert all("is not yours" in e.detail for e in events)

    # Opening a PR from another worker's branch is refused at the tool too.
    with pytest.raises(ForgeError, match="branch w002/feature is not yours"):
        forge.pr_create("w001", "w002/feature", "mine now")

    # Peer review and merge are the integrator's role: w001 may approve and merge w002's PR, and what
    # lands on main is w002's work, not w001's.
    forge.pr_review(pr.number, "w001", "approve", "LGTM")
    merged = forge.pr_merge(pr.number, "w001")
    assert (merged.author, merged.merged_by) == ("w002", "w001")
    tree = git("ls-tree", "--name-only", "-r", merged.merge_commit, cwd=repo2, check=False).stdout
    git("fetch", "--quiet", "origin", cwd=repo2)
    tree = git("ls-tree", "--name-only", "-r", "origin/main", cwd=repo2).stdout.split()
    assert "w002.txt" in tree and "w001.txt" not in tree

    # Its own branch, force-pushed as the sim agent does, and deleted: all fine.
    assert push(attacker, "-f", "-u", "HEAD:refs/heads/w001/topic").returncode == 0
    git("commit", "--quiet", "--amend", "-m", "rewritten", cwd=attacker)
    assert push(attacker, "-f", "HEAD:refs/heads/w001/topic").returncode == 0
    assert push(attacker, ":refs/heads/w001/topic").returncode == 0
    assert_healthy(forge, tmp_path, before)


def test_a_spoofed_commit_author_gains_nothing(forge, victim, attacker, tmp_path):
    """w001 commits as w002 (`git commit --author`): the forge goes by the credentials that pushed and by the
    worker that calls its tools, never by what a commit says about itself."""
    before = refs(forge)
    (attacker / "spoof.txt").write_text("w001 pretending\n")
    git("add", "spoof.txt", cwd=attacker)
    git("commit", "--quiet", "--author", "w002 <w002@agensh.invalid>", "-m", "w002's work, honestly", cwd=attacker)
    assert git("log", "-1", "--format=%an", cwd=attacker).stdout.strip() == "w002"

    assert_refused(push(attacker, "HEAD:refs/heads/w002/spoof"), "w002/spoof is not yours")
    assert refs(forge) == before
    [event] = rejected(forge)
    assert (event.actor, event.ref) == ("w001", "refs/heads/w002/spoof")

    # In its own namespace the push is w001's, whatever the commit says, and so is the PR.
    push_branch(attacker, "w001/spoof")
    [pushed] = [e for e in forge.events_since(0) if e.kind == "push" and e.ref == "refs/heads/w001/spoof"]
    assert pushed.actor == "w001"
    with pytest.raises(ForgeError, match="branch w001/spoof is not yours"):
        forge.pr_create("w002", "w001/spoof", "w002's PR, honestly")
    pr = forge.pr_create("w001", "w001/spoof", "spoofed author")
    merged = forge.pr_merge(pr.number, "w003")
    assert (merged.author, merged.merged_by) == ("w001", "w003")
    [event] = [e for e in forge.events_since(0) if e.kind == "pr_merged"]
    assert (event.pr, event.actor, event.notify) == (pr.number, "w003", ["w001"])
    assert_healthy(forge, tmp_path, before)


@pytest.mark.parametrize("ref, says", [
    ("refs/heads/main", PROTECTION_MESSAGE),
    ("refs/heads/Main", "'Main' names main"),
    ("refs/heads/MAIN", "'MAIN' names main"),
    ("refs/heads/ｍａｉｎ", "names main"),
    ("refs/tags/v1", "tags are refused"),
    ("refs/tags/main", "tags are refused"),
    ("refs/notes/commits", "only branches may be pushed"),
])
def test_main_in_any_spelling_tags_and_other_refs_are_refused(forge, attacker, tmp_path, ref, says):
    before = refs(forge)
    assert_refused(push(attacker, f"HEAD:{ref}"), says)
    assert refs(forge) == before
    [event] = rejected(forge)
    assert (event.actor, event.ref) == ("w001", ref) and says in event.detail


def test_the_admin_account_may_push_any_branch_but_main(forge, tmp_path):
    repo = clone(forge, "admin", tmp_path / "admin")
    commit_file(repo, "x.txt", "x\n", "x")
    assert push(repo, "HEAD:refs/heads/release/x").returncode == 0
    assert_refused(push(repo, "HEAD:refs/heads/Main"), "names main")
    assert_refused(push(repo, "HEAD:refs/tags/v1"), "tags are refused")


def test_connections_that_send_nothing_are_closed(forge, tmp_path):
    """A worker opening connections to the forge's git HTTP and sending nothing (or half a push) holds no
    thread past the idle timeout (300 s in a run; 1 s here)."""
    srv = GitHTTPServer(forge.root, forge._authenticate, repos=("repo.git",), idle_timeout_s=1.0)
    srv.start()
    held = []
    try:
        threads = threading.active_count()
        auth = base64.b64encode(f"w001:{forge.add_user('w001')}".encode()).decode()
        for i in range(20):
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=60)
            if i % 2:  # headers that never end
                s.sendall(b"POST /repo.git/git-receive-pack HTTP/1.1\r\nHost: x\r\n")
            else:  # a push body that stops
                s.sendall(b"POST /repo.git/git-receive-pack HTTP/1.1\r\nHost: x\r\nAuthorization: Basic "
                          + auth.encode() + b"\r\nContent-Length: 1000\r\n\r\n0000")
            held.append(s)
        for s in held:
            try:
                assert s.recv(4096) == b"", "the server answered instead of closing"
            except ConnectionResetError:
                pass
        wait_for(lambda: threading.active_count() <= threads, 30, "the handler threads to end")
    finally:
        for s in held:
            s.close()
        srv.close()
    clone(forge, "w003", tmp_path / "still-serving")


# ============================================================================ crafted trees


CRAFTED = [
    ({"..": {"..": {"..": {"escape.txt": "evil\n"}}}}, "hasDotdot"),
    ({"..": {"x": "x\n"}}, "hasDotdot"),
    ({".git": {"hooks": {"x": "#!/bin/sh\n"}}}, "hasDotgit"),
    ({".GIT": {"x": "x\n"}}, "hasDotgit"),
    ({".git.": {"x": "x\n"}}, "hasDotgit"),
    ({".git ": {"x": "x\n"}}, "hasDotgit"),
    ({"link": ("link", "/etc/passwd")}, "its target is absolute"),
    ({"link": ("link", "../../outside")}, "points outside the repository"),
    ({"d": {"link": ("link", "../../x")}}, "points outside the repository"),
    ({"d": {"link": ("link", "a/../../../x")}}, "'..' after a name"),
    ({"link": ("link", ".git/config")}, "a '.git' component"),
    ({"a\\..\\b": "x\n"}, "a backslash"),
    ({"G\u200cIT~1": {"x": "x\n"}}, "a '.git' component"),
]


@pytest.mark.parametrize("tree, says", CRAFTED, ids=[str(i) for i in range(len(CRAFTED))])
def test_crafted_trees_are_refused(forge, victim, attacker, tmp_path, tree, says):
    before = refs(forge)
    commit = crafted_commit(attacker, {"README.md": "# starter\n", **tree})
    res = push(attacker, f"{commit}:refs/heads/w001/crafted")
    assert_refused(res, says)
    assert refs(forge) == before
    [event] = rejected(forge)
    assert (event.actor, event.ref) == ("w001", "refs/heads/w001/crafted") and says in event.detail
    assert_healthy(forge, tmp_path, before)


def test_links_inside_the_tree_are_fine(forge, attacker):
    commit = crafted_commit(attacker, {"README.md": "# starter\n", "docs": {"l": ("link", "../README.md")},
                                       "here": ("link", "docs/l")})
    assert push(attacker, f"{commit}:refs/heads/w001/links").returncode == 0


def test_a_file_over_the_limit_is_refused(forge, attacker, tmp_path):
    before = refs(forge)
    (attacker / "big.txt").write_bytes(b"0123456789abcdef" * (50 * 1000 * 1000 // 16))  # 50 MB, compresses well
    git("add", "big.txt", cwd=attacker)
    git("commit", "--quiet", "-m", "50 MB", cwd=attacker)
    res = push(attacker, "HEAD:refs/heads/w001/big")
    assert_refused(res, "'big.txt' is 50000000 bytes (47.7 MiB): files are limited to 10 MiB (10485760 bytes) each")
    assert refs(forge) == before
    [event] = rejected(forge)
    assert "files are limited to 10 MiB" in event.detail
    assert_healthy(forge, tmp_path, before)


def test_a_push_over_the_limit_is_refused_with_a_message(git_env, tmp_path):
    f = EmbeddedForge(tmp_path / "forge", limits=PushLimits(max_push_bytes=1024 * 1024))
    f.start()
    try:
        f.init_repo(make_starter(tmp_path), "t", "b")
        for w in WORKERS:
            f.add_user(w)
        repo = clone(f, "w001", tmp_path / "c")
        before = refs(f)
        (repo / "noise.bin").write_bytes(os.urandom(2 * 1024 * 1024))  # does not compress
        git("add", "noise.bin", cwd=repo)
        git("commit", "--quiet", "-m", "2 MiB of noise", cwd=repo)
        # A body over git's http.postBuffer goes chunked; a smaller one goes with a Content-Length.
        for post_buffer in ("65536", "8388608"):
            res = git("-c", f"http.postBuffer={post_buffer}", "push", "origin", "HEAD:refs/heads/w001/noise",
                      cwd=repo, check=False)
            assert_refused(res, "remote: refused: this push is 2.0 MiB", "pushes are limited to 1 MiB (1048576 bytes)",
                           "[remote rejected] HEAD -> w001/noise (push over the 1 MiB limit)")
        assert refs(f) == before
        assert [(e.actor, e.ref) for e in rejected(f)] == [("w001", "refs/heads/w001/noise")] * 2
        assert "pushes are limited to 1 MiB" in rejected(f)[0].detail
        # A small push still goes through, over the same connection settings.
        git("reset", "--quiet", "--hard", "HEAD~1", cwd=repo)
        commit_file(repo, "small.txt", "small\n", "small")
        push_branch(repo, "w001/small")
        assert f.pr_merge(f.pr_create("w001", "w001/small", "small").number, "w002").state == "merged"
    finally:
        f.close()


# ============================================================================ a merge that fails


def forced_branch(forge: EmbeddedForge, branch: str, tree: dict, drop: str = "") -> str:
    """A branch written straight into the bare repository, past every hook (as an old forge or an operator
    could have): the bad state the receive checks now keep out. `drop` ("blob" or "tree"): then delete an
    object it needs (the file's content; its root tree, so git itself cannot merge it)."""
    gd = ["--git-dir", str(forge.repo)]
    blobs = []

    def make(entries: dict) -> str:
        lines = []
        for name, value in entries.items():
            if isinstance(value, dict):
                lines.append(f"040000 tree {make(value)}\t{name}")
            else:
                blob = git(*gd, "hash-object", "-w", "--stdin", cwd=forge.root, input=value).stdout.strip()
                blobs.append(blob)
                lines.append(f"100644 blob {blob}\t{name}")
        return git(*gd, "mktree", cwd=forge.root, input="\n".join(lines) + "\n").stdout.strip()

    base = forge.main_head()
    base_tree = git(*gd, "rev-parse", f"{base}^{{tree}}", cwd=forge.root).stdout.strip()
    listing = git(*gd, "ls-tree", base_tree, cwd=forge.root).stdout
    tree_id = make(tree)
    merged = git(*gd, "mktree", cwd=forge.root, input=listing + "".join(
        line + "\n" for line in git(*gd, "ls-tree", tree_id, cwd=forge.root).stdout.splitlines())).stdout.strip()
    commit = git(*gd, "commit-tree", merged, "-p", base, "-m", "forced", cwd=forge.root).stdout.strip()
    git(*gd, "update-ref", f"refs/heads/{branch}", commit, cwd=forge.root)
    gone = {"blob": blobs[-1] if blobs else "", "tree": merged}.get(drop)
    if gone:
        (forge.repo / "objects" / gone[:2] / gone[2:]).unlink()
    return commit


def normal_pr(forge: EmbeddedForge, tmp_path: Path, name: str) -> int:
    """A PR of w003's from a clone of main alone (a clone of every branch would fetch the broken ones)."""
    repo = tmp_path / name
    git("clone", "--quiet", "--single-branch", "--branch", "main", forge.clone_url("w003"), str(repo), cwd=tmp_path)
    git("checkout", "--quiet", "-b", f"w003/{name}", cwd=repo)
    commit_file(repo, f"{name}.txt", f"{name}\n", name)
    push_branch(repo, f"w003/{name}")
    return forge.pr_create("w003", f"w003/{name}", name).number


def test_a_merge_that_fails_leaves_the_forge_able_to_merge(forge, tmp_path):
    # The PR: ../../../escape.txt, here forced in past the hooks.
    forced_branch(forge, "w002/escape", {"..": {"..": {"..": {"escape.txt": "evil\n"}}}})
    bad = forge.pr_create("w002", "w002/escape", "escape")
    main_before = forge.main_head()
    with pytest.raises(ForgeError) as exc:
        forge.pr_merge(bad.number, "w001")
    text = str(exc.value)
    assert text.startswith(f"merging PR #{bad.number} failed: the merged tree has content the forge refuses")
    assert "'../../../escape.txt'" in text and "other PRs still merge" in text
    failed = forge.events_since(0)[-1]
    assert (failed.kind, failed.pr, failed.actor, failed.notify) == ("merge_failed", bad.number, "w001", ["w002"])
    assert forge.main_head() == main_before and forge.pr_view(bad.number).state == "open"
    assert not (tmp_path / "escape.txt").exists() and not (forge.root.parent / "escape.txt").exists()

    # PRs whose merge fails inside git: an object the branch needs is gone (git 2.39's merge-tree would
    # read a missing tree as empty and drop every file: the forge checks the branch is whole first).
    for drop in ("blob", "tree"):
        says = f"missing {drop} object" if drop == "blob" else "bad tree object"
        forced_branch(forge, f"w002/broken-{drop}", {f"broken-{drop}.txt": "gone\n"}, drop=drop)
        broken = forge.pr_create("w002", f"w002/broken-{drop}", "broken")
        with pytest.raises(ForgeError, match=f"merging PR #{broken.number} failed: ") as exc:
            forge.pr_merge(broken.number, "w001")
        assert says in str(exc.value)
        assert forge.events_since(0)[-1].kind == "merge_failed" and forge.main_head() == main_before

    # The next PR merges; so does one after a restart of the forge.
    assert forge.pr_merge(normal_pr(forge, tmp_path, "next"), "w001").state == "merged"
    assert not list(forge.root.rglob("*.lock")), "no lock left behind"
    forge.close()
    again = EmbeddedForge(forge.root, token_key=KEY)
    again.start()
    try:
        assert again.pr_merge(normal_pr(again, tmp_path, "after-restart"), "w001").state == "merged"
        with pytest.raises(ForgeError, match="failed"):
            again.pr_merge(bad.number, "w001")  # still refused, still nothing broken
        assert again.pr_merge(normal_pr(again, tmp_path, "after-that"), "w001").state == "merged"
    finally:
        again.close()


def test_locks_left_by_an_older_forge_or_a_crash_do_not_stop_merging(forge, tmp_path):
    pr = normal_pr(forge, tmp_path, "first")
    # The old layout: an internal worktree whose merge aborted and left index.lock behind.
    git("--git-dir", str(forge.repo), "worktree", "add", "--quiet", "--detach", str(forge.root / "work"), "main",
        cwd=forge.root)
    lock = forge.repo / "worktrees" / "work" / "index.lock"
    lock.write_text("")
    # A ref lock left by a process killed in the middle of moving main.
    main_lock = forge.repo / "refs" / "heads" / "main.lock"
    main_lock.write_text("")
    old = time.time() - 3600
    os.utime(main_lock, (old, old))
    forge.close()
    again = EmbeddedForge(forge.root, token_key=KEY)
    again.start()
    try:
        again.init_repo(tmp_path / "starter", "ignored", "ignored")
        assert not lock.exists() and not (forge.root / "work").exists()
        assert again.pr_merge(pr, "w001").state == "merged"
        assert not main_lock.exists()
    finally:
        again.close()
