"""The router intake: signed Gitea webhooks in, forge notifications out (by cursor)."""

from __future__ import annotations

import json

import httpx
import pyarrow.parquet as pq
import pytest

from agensh_ray.services.forge.gitea.intake import WebhookIntake, signature
from agensh_ray.services.forge.gitea.webhooks import ForgeEventLog, GiteaWebhookMapper
from agensh_ray.trace import IntakeRow, TraceWriter

SECRET = "s3cret-for-tests"
WORKERS = {"w001": "w001", "w002": "w002", "w003": "w003"}


def pr_payload(action: str, number: int = 2, author: str = "w001", sender: str = "w001", **extra) -> dict:
    pr = {"number": number, "title": "Add upper", "body": "cc @w003 and @nobody", "user": {"login": author},
          "head": {"ref": "feat-upper"}, "base": {"ref": "main"}, "merged": False, "merge_commit_sha": None}
    pr.update(extra)
    return {"action": action, "number": number, "pull_request": pr, "sender": {"login": sender}}


@pytest.fixture
def intake(tmp_path):
    log = ForgeEventLog(tmp_path / "events.jsonl")
    rejected: list = []
    trace = TraceWriter(tmp_path / "run", "forge", "r1", flush_interval_s=0)

    def on_rejected(reason, remote, delivery):
        rejected.append(reason)
        trace.write(IntakeRow(event_id=f"intake:{delivery}", source=remote, reason=reason, delivery=delivery))

    it = WebhookIntake(GiteaWebhookMapper(log, WORKERS), SECRET, max_body=64 * 1024, on_rejected=on_rejected)
    it.start()
    yield it, log, rejected, trace
    it.close()
    trace.close()
    log.close()


def send(it: WebhookIntake, event_type: str, payload: dict, secret: str = SECRET, delivery: str = "d1",
         sig: str | None = None) -> httpx.Response:
    body = json.dumps(payload).encode()
    headers = {"X-Gitea-Event-Type": event_type, "X-Gitea-Event": event_type.split("_review")[0],
               "X-Gitea-Delivery": delivery, "Content-Type": "application/json",
               "X-Gitea-Signature": sig if sig is not None else signature(secret, body)}
    return httpx.post(it.url, content=body, headers=headers, timeout=10)


def test_good_signature_becomes_a_notification(intake):
    it, log, rejected, _ = intake
    r = send(it, "pull_request", pr_payload("opened"))
    assert r.status_code == 200 and "forge:1" in r.text
    [ev] = log.since(0)
    assert (ev.kind, ev.actor, ev.pr, ev.ref, ev.notify) == ("pr_opened", "w001", 2, "feat-upper", ["w003"])
    assert rejected == []


def test_bad_signature_is_refused_and_traced_only(intake, tmp_path):
    it, log, rejected, trace = intake
    assert send(it, "pull_request", pr_payload("opened"), secret="wrong").status_code == 401
    assert send(it, "pull_request", pr_payload("opened"), sig="").status_code == 401
    assert log.since(0) == [] and len(rejected) == 2
    trace.flush()
    rows = pq.read_table(tmp_path / "run" / "trace" / "intake").to_pylist()
    assert [r["reason"] for r in rows] == ["bad or missing X-Gitea-Signature"] * 2
    assert rows[0]["event_id"] == "intake:d1" and rows[0]["source"] == "127.0.0.1"


def test_body_limit_and_redelivery(intake):
    it, log, rejected, _ = intake
    big = pr_payload("opened", body="x" * 70_000)
    assert send(it, "pull_request", big).status_code == 413
    assert log.since(0) == [] and "exceeds" in rejected[0]
    assert send(it, "pull_request", pr_payload("opened"), delivery="same").status_code == 200
    assert send(it, "pull_request", pr_payload("opened"), delivery="same").status_code == 200
    assert len(log.since(0)) == 1, "a redelivered webhook must not notify twice"


def test_notify_rules_follow_the_embedded_forge(intake, tmp_path):
    it, log, _, _ = intake
    send(it, "pull_request", pr_payload("opened"), delivery="a")
    review = {**pr_payload("reviewed", sender="w002"), "review": {"type": "pull_request_review_approved",
                                                                 "content": "ok"}}
    send(it, "pull_request_review_approved", review, delivery="b")
    comment = {**pr_payload("created", sender="w001"), "comment": {"body": "thanks"}, "is_pull": True}
    send(it, "pull_request_comment", comment, delivery="c")
    push = {"ref": "refs/heads/feat-upper", "before": "1" * 40, "after": "2" * 40, "pusher": {"login": "w001"},
            "sender": {"login": "w001"}, "commits": []}
    send(it, "push", push, delivery="d")
    send(it, "pull_request", pr_payload("synchronized"), delivery="e")  # the push already said it
    merged = pr_payload("closed", sender="w003", merged=True, merge_commit_sha="abcdef1234567890")
    send(it, "pull_request", merged, delivery="f")
    evs = log.since(0)
    assert [(e.kind, e.actor, e.notify) for e in evs] == [
        ("pr_opened", "w001", ["w003"]),
        ("pr_reviewed", "w002", ["w001"]),
        ("pr_commented", "w001", ["w002"]),  # the author replying: tell the reviewers
        ("push", "w001", ["w002"]),  # a push to an open PR's head: its reviewers
        ("pr_merged", "w003", ["w001"]),
    ]
    assert evs[1].detail == "approve: ok" and evs[3].pr == 2 and "abcdef123456" in evs[4].detail
    # Durable: a restarted forge reloads the log, the per-PR memory and the seen deliveries.
    again = ForgeEventLog(tmp_path / "events.jsonl")
    assert [e.seq for e in again.since(0)] == [1, 2, 3, 4, 5]
    assert again.pr_state(2)["reviewers"] == ["w002"] and "f" in again.deliveries
    again.close()


def test_wrong_path_and_method(intake):
    it, _, _, _ = intake
    assert httpx.get(it.url, timeout=5).status_code == 405
    assert httpx.post(it.url.replace("/hooks/gitea", "/other"), content=b"{}", timeout=5).status_code == 404
