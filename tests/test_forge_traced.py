"""ForgeTracer without Ray: a real EmbeddedForge (real git, real HTTP), its events
written as forge / pr_changes trace rows; refused webhooks of the Gitea intake as
intake rows."""

from __future__ import annotations

import json

import httpx
import pyarrow.parquet as pq
import pytest

from agensh_ray.errors import MergeConflict
from agensh_ray.services.forge.embedded import EmbeddedForge
from agensh_ray.services.forge.gitea import GiteaForge
from agensh_ray.services.forge.traced import ForgeTracer
from agensh_ray.trace import TraceWriter
from tests.test_forge_embedded import STARTER, clone, commit_file, make_starter, push_branch


@pytest.fixture
def traced(git_env, tmp_path):
    starter = make_starter(tmp_path)
    forge = EmbeddedForge(tmp_path / "forge")
    forge.start()
    tracer = ForgeTracer(forge, TraceWriter(tmp_path / "run", "forge", "r1", flush_interval_s=0))
    tracer.init_repo(str(starter), "Build the thing", "Make greet() friendlier.")
    for w in ("w001", "w002", "w003"):
        tracer.add_user(w)
    yield tracer
    tracer.close()


def rows(tmp_path, table: str) -> list[dict]:
    return sorted(pq.read_table(tmp_path / "run" / "trace" / table).to_pylist(), key=lambda r: (r["ts"], r["event_id"]))


def test_open_review_merge_become_rows_with_author_and_change_blocks(traced, tmp_path):
    forge = traced.forge
    repo = clone(forge, "w001", tmp_path / "c")
    commit_file(repo, "app.py", STARTER["app.py"].replace("'hello'", "'hello, world'"), "friendlier greet")
    push_branch(repo, "w001/greet")
    pr = traced.pr_create("w001", "w001/greet", "Friendlier greet", "cc @w003")
    traced.pr_review(pr.number, "w002", "approve", "LGTM")
    merged = traced.pr_merge(pr.number, "w002")
    traced.trace.flush()

    forge_rows = sorted(rows(tmp_path, "forge"), key=lambda r: r["seq"])
    assert [(r["seq"], r["kind"], r["worker_id"], r["pr"], r["pr_author"], r["verdict"]) for r in forge_rows] == [
        (1, "push", "w001", None, None, None),  # pushed before the PR existed
        (2, "pr_opened", "w001", 2, "w001", None),
        (3, "pr_reviewed", "w002", 2, "w001", "approve"),
        (4, "pr_merged", "w002", 2, "w001", None),
    ]
    assert forge_rows[1]["detail"] == "Friendlier greet" and forge_rows[2]["detail"] == "approve: LGTM"
    assert forge_rows[3]["detail"] == f"merged w001/greet into main as {merged.merge_commit[:12]}"
    events = {e.kind: e for e in forge.events_since(0)}
    assert [r["event_id"] for r in forge_rows] == [e.event_id for e in forge.events_since(0)]

    changes = rows(tmp_path, "pr_changes")
    assert [(c["snapshot"], c["event_id"]) for c in changes] == [
        ("pr_opened", events["pr_opened"].event_id), ("pr_merged", events["pr_merged"].event_id)]
    for c in changes:
        assert (c["pr"], c["pr_author"], c["path"], c["status"]) == (2, "w001", "app.py", "modified")
        assert (c["old_start"], c["old_lines"], c["new_start"], c["new_lines"]) == (2, 1, 2, 1)
        assert c["function"] == "def greet():"


def test_pushes_are_traced_on_events_since_exactly_once(traced, tmp_path):
    forge = traced.forge
    repo = clone(forge, "w002", tmp_path / "c")
    commit_file(repo, "x.txt", "x\n", "x")
    push_branch(repo, "w002/x")  # through git, not through the tracer
    assert [e.kind for e in traced.events_since(0)] == ["push"]
    traced.events_since(0)
    traced.trace_events()
    traced.trace.flush()
    assert [(r["kind"], r["worker_id"], r["ref"]) for r in rows(tmp_path, "forge")] == [
        ("push", "w002", "refs/heads/w002/x")]


def test_a_refused_merge_still_traces_its_conflict(traced, tmp_path):
    forge = traced.forge
    a, b = clone(forge, "w001", tmp_path / "a"), clone(forge, "w002", tmp_path / "b")
    commit_file(a, "app.py", STARTER["app.py"].replace("VALUE = 1", "VALUE = 2"), "2")
    push_branch(a, "w001/v")
    commit_file(b, "app.py", STARTER["app.py"].replace("VALUE = 1", "VALUE = 3"), "3")
    push_branch(b, "w002/v")
    pa, pb = traced.pr_create("w001", "w001/v", "v2"), traced.pr_create("w002", "w002/v", "v3")
    traced.pr_merge(pa.number, "w003")
    with pytest.raises(MergeConflict):
        traced.pr_merge(pb.number, "w003")
    traced.trace.flush()
    last = max(rows(tmp_path, "forge"), key=lambda r: r["seq"])
    assert (last["kind"], last["worker_id"], last["pr"], last["pr_author"], last["detail"]) == (
        "merge_conflict", "w003", pb.number, "w002", "conflicting files: app.py")


def test_refused_webhooks_become_intake_rows(tmp_path):
    """The Gitea adapter's intake, no Gitea needed: a bad signature is one intake row and no event."""
    users = {"admin": {"login": "agensh-driver", "token": "t0"}, "w001": {"login": "w001", "token": "t1"}}
    forge = GiteaForge("http://127.0.0.1:9", "agensh", "run", users, tmp_path / "state", webhook_secret="s3cret",
                       intake_listen="127.0.0.1:0")
    forge.start()
    tracer = ForgeTracer(forge, TraceWriter(tmp_path / "run", "forge", "r1", flush_interval_s=0))
    try:
        body = json.dumps({"action": "opened"}).encode()
        r = httpx.post(forge.intake.url, content=body, timeout=10,
                       headers={"X-Gitea-Delivery": "d7", "X-Gitea-Signature": "0" * 64,
                                "X-Gitea-Event-Type": "pull_request"})
        assert r.status_code == 401
        assert tracer.events_since(0) == []
    finally:
        tracer.close()
    [row] = rows(tmp_path, "intake")
    assert (row["event_id"], row["source"], row["reason"], row["delivery"]) == (
        "intake:d7", "127.0.0.1", "bad or missing X-Gitea-Signature", "d7")
