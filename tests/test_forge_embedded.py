"""The embedded forge end to end: real git, real HTTP on 127.0.0.1."""

from __future__ import annotations

import base64
import gzip
import http.client
import os
import subprocess
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from agensh_ray.errors import ForgeError, MergeConflict
from agensh_ray.services.forge.embedded import PROTECTION_MESSAGE, EmbeddedForge

KEY = "6b" * 32
"""The forge's token key: a restarted forge with the same key issues the same tokens."""

STARTER = {
    "README.md": "# starter\n",
    "app.py": "def greet():\n    return 'hello'\n\n\nVALUE = 1\n",
}


def git(*args: str, cwd: Path, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("GIT_ASKPASS", "SSH_ASKPASS")}
    env["GIT_TERMINAL_PROMPT"] = "0"
    res = subprocess.run(
        ["git", "-c", "credential.helper=", *args], cwd=cwd, env=env, capture_output=True, text=True, input=input
    )
    if check and res.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed ({res.returncode}):\n{res.stdout}\n{res.stderr}")
    return res


def clone(forge: EmbeddedForge, user: str, dest: Path) -> Path:
    git("clone", "--quiet", forge.clone_url(user), str(dest), cwd=dest.parent)
    return dest


def commit_file(repo: Path, path: str, content: str, message: str) -> None:
    (repo / path).parent.mkdir(parents=True, exist_ok=True)
    (repo / path).write_text(content)
    git("add", path, cwd=repo)
    git("commit", "--quiet", "-m", message, cwd=repo)


def push_branch(repo: Path, branch: str) -> subprocess.CompletedProcess:
    return git("push", "--quiet", "origin", f"HEAD:refs/heads/{branch}", cwd=repo)


def make_starter(tmp_path: Path) -> Path:
    starter = tmp_path / "starter"
    starter.mkdir()
    for name, text in STARTER.items():
        (starter / name).write_text(text)
    return starter


@pytest.fixture
def forge(git_env, tmp_path):
    starter = make_starter(tmp_path)
    f = EmbeddedForge(tmp_path / "forge", token_key=KEY)
    f.start()
    f.init_repo(starter, "Build the thing", "Make greet() friendlier.")
    for w in ("w001", "w002", "w003", "w004"):
        f.add_user(w)
    yield f
    f.close()


def kinds(forge: EmbeddedForge) -> list[str]:
    return [e.kind for e in forge.events_since(0)]


# --------------------------------------------------------------------------- tests


def test_init_repo_seeds_main_and_issue(forge):
    issue = forge.issue_view(1)
    assert (issue.number, issue.title, issue.author) == (1, "Build the thing", "admin")
    assert len(forge.main_head()) == 40
    out = subprocess.run(
        ["git", "--git-dir", str(forge.repo), "log", "--format=%an|%cn|%s", "main"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    assert out == "admin|agensh-forge|Initial commit"
    with pytest.raises(ForgeError, match="is an issue"):
        forge.pr_view(1)


def test_clone_with_credentials_and_401_without(forge, tmp_path):
    repo = clone(forge, "w001", tmp_path / "c1")
    assert (repo / "app.py").read_text() == STARTER["app.py"]

    bad = forge.clone_url("w001").replace(forge.add_user("w001"), "0" * 40)
    res = git("clone", "--quiet", bad, str(tmp_path / "c2"), cwd=tmp_path, check=False)
    assert res.returncode != 0
    assert "Authentication failed" in res.stderr or "401" in res.stderr

    # No credentials at all: 401 with a Basic challenge, for fetch as well as push.
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(f"{forge.url}/repo.git/info/refs?service=git-upload-pack", timeout=5)
    assert exc.value.code == 401
    assert exc.value.headers["WWW-Authenticate"] == 'Basic realm="agensh"'

    with pytest.raises(ForgeError, match="add_user"):
        forge.clone_url("nobody")


def test_push_to_main_rejected_branch_push_recorded(forge, tmp_path):
    repo = clone(forge, "w001", tmp_path / "c")
    head_before = forge.main_head()
    commit_file(repo, "app.py", "VALUE = 2\n", "direct")
    res = git("push", "origin", "HEAD:main", cwd=repo, check=False)
    assert res.returncode != 0
    assert PROTECTION_MESSAGE in res.stderr
    assert forge.main_head() == head_before

    push_branch(repo, "w001/feature")
    events = forge.events_since(0)
    assert [e.kind for e in events] == ["push_rejected", "push"]
    assert events[0].actor == "w001" and events[0].ref == "refs/heads/main"
    assert events[1].actor == "w001" and events[1].ref == "refs/heads/w001/feature"
    assert [e.seq for e in events] == [1, 2]
    assert forge.events_since(1)[0].seq == 2


def test_pr_flow_review_merge(forge, tmp_path):
    repo = clone(forge, "w001", tmp_path / "c")
    git("checkout", "--quiet", "-b", "w001/greet", cwd=repo)
    commit_file(repo, "app.py", STARTER["app.py"].replace("'hello'", "'hello, world'"), "friendlier greet")
    commit_file(repo, "docs/notes.md", "notes\n", "notes")
    push_branch(repo, "w001/greet")

    pr = forge.pr_create("w001", "w001/greet", "Friendlier greet", "Closes #1. cc @w003")
    assert pr.number == 2 and pr.state == "open"
    assert pr.files == ["app.py", "docs/notes.md"]

    view = forge.pr_view(pr.number)
    assert view.files == ["app.py", "docs/notes.md"]
    assert "+    return 'hello, world'" in view.diff
    assert "-    return 'hello'" in view.diff
    assert forge.pr_view(pr.number, with_diff=False).diff is None
    assert [p.number for p in forge.pr_list()] == [2]

    with pytest.raises(ForgeError, match="own PR"):
        forge.pr_review(pr.number, "w001", "approve")
    forge.pr_review(pr.number, "w002", "approve", "LGTM")
    forge.pr_comment(pr.number, "w001", "thanks @w002!")
    merged = forge.pr_merge(pr.number, "w002")
    assert merged.state == "merged" and merged.merged_by == "w002"
    assert merged.merge_commit == forge.main_head() and merged.merged_ts

    git("pull", "--quiet", "origin", "main", cwd=repo)
    shown = git("show", f"{merged.merge_commit}:app.py", cwd=repo).stdout
    assert "'hello, world'" in shown
    parents = git("rev-list", "--parents", "-n1", merged.merge_commit, cwd=repo).stdout.split()
    assert len(parents) == 3  # --no-ff: a real merge commit
    assert "+    return 'hello, world'" in forge.pr_view(pr.number).diff

    events = forge.events_since(0)
    assert [e.kind for e in events] == ["push", "pr_opened", "pr_reviewed", "pr_commented", "pr_merged"]
    assert [e.seq for e in events] == [1, 2, 3, 4, 5]
    opened, reviewed, commented, merged_ev = events[1:]
    assert opened.notify == ["w003"]  # nobody in particular, plus the mention
    assert reviewed.notify == ["w001"] and reviewed.actor == "w002" and reviewed.pr == 2
    assert commented.notify == ["w002"]  # the author replying: reviewers + mention
    assert merged_ev.notify == ["w001"]

    with pytest.raises(ForgeError, match="merged"):
        forge.pr_merge(pr.number, "w002")
    with pytest.raises(ForgeError, match="merged"):
        forge.pr_close(pr.number, "w002")
    assert forge.pr_list("merged")[0].number == 2 and forge.pr_list() == []


def test_conflict_then_resolve(forge, tmp_path):
    a = clone(forge, "w001", tmp_path / "a")
    b = clone(forge, "w002", tmp_path / "b")
    commit_file(a, "app.py", STARTER["app.py"].replace("VALUE = 1", "VALUE = 2"), "value 2")
    push_branch(a, "w001/value")
    commit_file(b, "app.py", STARTER["app.py"].replace("VALUE = 1", "VALUE = 3"), "value 3")
    push_branch(b, "w002/value")
    pa = forge.pr_create("w001", "w001/value", "value 2")
    pb = forge.pr_create("w002", "w002/value", "value 3")
    forge.pr_merge(pa.number, "w003")

    with pytest.raises(MergeConflict) as exc:
        forge.pr_merge(pb.number, "w003")
    assert exc.value.pr == pb.number and exc.value.files == ["app.py"]
    assert forge.pr_view(pb.number).state == "open"
    conflict = forge.events_since(0)[-1]
    assert conflict.kind == "merge_conflict" and conflict.notify == ["w002"]

    # The worker resolves in its clone: fetch, merge origin/main, fix, push, merge again.
    git("fetch", "--quiet", "origin", cwd=b)
    res = git("merge", "origin/main", cwd=b, check=False)
    assert res.returncode != 0
    (b / "app.py").write_text(STARTER["app.py"].replace("VALUE = 1", "VALUE = 5"))
    git("add", "app.py", cwd=b)
    git("commit", "--quiet", "--no-edit", cwd=b)
    push_branch(b, "w002/value")
    merged = forge.pr_merge(pb.number, "w003")
    assert merged.state == "merged"
    text = subprocess.run(
        ["git", "--git-dir", str(forge.repo), "show", "main:app.py"], capture_output=True, text=True, check=True
    ).stdout
    assert "VALUE = 5" in text
    ks = kinds(forge)
    assert ks.count("merge_conflict") == 1 and ks.count("pr_merged") == 2
    assert ks[-2:] == ["push", "pr_merged"]


def test_restart_reloads_state(forge, tmp_path):
    repo = clone(forge, "w001", tmp_path / "c")
    commit_file(repo, "x.txt", "x\n", "x")
    push_branch(repo, "w001/x")
    pr = forge.pr_create("w001", "w001/x", "add x")
    forge.pr_review(pr.number, "w002", "request_changes", "rename it")
    events_before = forge.events_since(0)
    token = forge.add_user("w001")
    forge.close()
    forge.close()  # idempotent

    again = EmbeddedForge(forge.root, token_key=KEY)
    again.start()
    try:
        again.init_repo(tmp_path / "starter", "ignored", "ignored")  # idempotent: loads
        assert again.issue_view(1).title == "Build the thing"
        assert again.add_user("w001") == token
        prs = again.pr_list("all")
        assert [(p.number, p.state, p.head) for p in prs] == [(2, "open", "w001/x")]
        assert prs[0].reviews[0].verdict == "request_changes"
        assert again.events_since(0) == events_before
        # The old clone still works against the restarted forge (same token, new port).
        git("remote", "set-url", "origin", again.clone_url("w001"), cwd=repo)
        commit_file(repo, "x.txt", "y\n", "rename")
        push_branch(repo, "w001/x")
        push = again.events_since(len(events_before))[0]
        assert push.kind == "push" and push.seq == len(events_before) + 1
        assert push.pr == 2 and push.notify == ["w002"]  # the reviewer hears of the update
        merged = again.pr_merge(2, "w002")
        assert merged.number == 2 and merged.state == "merged"
        assert again.events_since(0)[-1].seq == len(events_before) + 2
    finally:
        again.close()


def test_pr_errors_are_helpful(forge, tmp_path):
    with pytest.raises(ForgeError, match="branch w001/nope not found on the forge: push it first"):
        forge.pr_create("w001", "w001/nope", "nope")
    with pytest.raises(ForgeError, match="PR #99 not found"):
        forge.pr_view(99)
    with pytest.raises(ForgeError, match="head and base are both main"):
        forge.pr_create("w001", "main", "x")

    repo = clone(forge, "w001", tmp_path / "c")
    push_branch(repo, "w001/empty")  # no commits beyond main
    with pytest.raises(ForgeError, match="no commits"):
        forge.pr_create("w001", "w001/empty", "empty")

    commit_file(repo, "z.txt", "z\n", "z")
    push_branch(repo, "w001/z")
    pr = forge.pr_create("w001", "refs/heads/w001/z", "z")
    assert pr.head == "w001/z"
    with pytest.raises(ForgeError, match="already open"):
        forge.pr_create("w001", "w001/z", "z again")
    with pytest.raises(ForgeError, match="bad verdict"):
        forge.pr_review(pr.number, "w002", "lgtm")  # type: ignore[arg-type]
    closed = forge.pr_close(pr.number, "w001")
    assert closed.state == "closed" and closed.closed_by == "w001"
    with pytest.raises(ForgeError, match="only open PRs can be merged"):
        forge.pr_merge(pr.number, "w002")
    assert forge.events_since(0)[-1].notify == []  # closed by its own author


def test_git_chunked_push_and_gzip_chunked_fetch_request(forge, tmp_path):
    # A push larger than http.postBuffer: git sends it with Transfer-Encoding: chunked.
    repo = clone(forge, "w001", tmp_path / "c")
    (repo / "blob.bin").write_bytes(os.urandom(300_000))
    git("add", "blob.bin", cwd=repo)
    git("commit", "--quiet", "-m", "blob", cwd=repo)
    git("-c", "http.postBuffer=65536", "push", "--quiet", "origin", "HEAD:refs/heads/w001/blob", cwd=repo)
    assert forge.pr_create("w001", "w001/blob", "blob").files == ["blob.bin"]

    # A hand-made upload-pack request, gzip'd and chunked.
    head = forge.main_head()
    body = f"0032want {head}\n".encode() + b"0000" + b"0009done\n"
    packed = gzip.compress(body)
    cred = base64.b64encode(f"w002:{forge.add_user('w002')}".encode()).decode()
    conn = http.client.HTTPConnection("127.0.0.1", forge.port, timeout=10)
    conn.putrequest("POST", "/repo.git/git-upload-pack")
    conn.putheader("Authorization", f"Basic {cred}")
    conn.putheader("Content-Type", "application/x-git-upload-pack-request")
    conn.putheader("Content-Encoding", "gzip")
    conn.putheader("Transfer-Encoding", "chunked")
    conn.endheaders()
    for i in range(0, len(packed), 7):
        part = packed[i: i + 7]
        conn.send(b"%x\r\n%s\r\n" % (len(part), part))
    conn.send(b"0\r\n\r\n")
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    assert resp.status == 200
    assert data.startswith(b"0008NAK\n") and b"PACK" in data


def test_concurrent_push_and_merge(forge, tmp_path):
    workers = ["w001", "w002", "w003", "w004"]
    clones = {w: clone(forge, w, tmp_path / w) for w in workers}
    errors: list[BaseException] = []
    merged: list[int] = []

    def work(w: str) -> None:
        try:
            repo = clones[w]
            commit_file(repo, f"{w}.txt", f"{w}\n", f"{w} file")
            push_branch(repo, f"{w}/file")
            pr = forge.pr_create(w, f"{w}/file", f"{w} file")
            forge.pr_view(pr.number)
            merged.append(forge.pr_merge(pr.number, w).number)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert sorted(merged) == [2, 3, 4, 5]
    tree = subprocess.run(
        ["git", "--git-dir", str(forge.repo), "ls-tree", "--name-only", "main"],
        capture_output=True, text=True, check=True,
    ).stdout.split()
    assert {f"{w}.txt" for w in workers} <= set(tree)
    events = forge.events_since(0)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert sorted(e.kind for e in events) == sorted(["push"] * 4 + ["pr_opened"] * 4 + ["pr_merged"] * 4)
