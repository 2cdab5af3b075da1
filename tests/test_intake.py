"""The router intake: signed Gitea webhooks in, forge notifications out (by cursor)."""

from __future__ import annotations

import json
import socket
import threading

import httpx
import pyarrow.parquet as pq
import pytest

from agensh_ray.services.forge.gitea.intake import WebhookIntake, signature
from agensh_ray.services.forge.gitea.webhooks import ForgeEventLog, GiteaWebhookMapper
from agensh_ray.trace import IntakeRow, TraceWriter
from tests.support import wait_for

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


# --------------------------------------------------------------------------- hostile clients (issue 12)


def post_signed(it: WebhookIntake, event_type: str, body: bytes, delivery: str | None = None) -> httpx.Response:
    headers = {"X-Gitea-Event-Type": event_type, "Content-Type": "application/json",
               "X-Gitea-Signature": signature(SECRET, body)}
    if delivery:
        headers["X-Gitea-Delivery"] = delivery
    return httpx.post(it.url, content=body, headers=headers, timeout=30)


@pytest.fixture
def quick_intake(tmp_path):
    """An intake whose read timeout is short, so the slow clients' fate is seen within the test."""
    log = ForgeEventLog(tmp_path / "events.jsonl")
    rejected: list = []
    it = WebhookIntake(GiteaWebhookMapper(log, WORKERS), SECRET, read_timeout_s=2.0, workers=4,
                       on_rejected=lambda reason, remote, delivery: rejected.append(reason))
    it.start()
    yield it, log, rejected
    it.close()
    log.close()


@pytest.mark.security
def test_slow_clients_hold_no_threads_and_are_cut_off(quick_intake):
    it, log, _ = quick_intake
    threads_before = threading.active_count()
    slow = []
    try:
        for _ in range(200):
            s = socket.create_connection(("127.0.0.1", it.port), timeout=10)
            s.sendall(b"POST /hooks/gitea HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n")  # and then nothing
            slow.append(s)
        # While all 200 hang, a real delivery is answered, and no thread was made per client.
        assert send(it, "pull_request", pr_payload("opened")).status_code == 200
        assert threading.active_count() - threads_before <= 4, "the intake holds a thread per slow client"
        # Each slow client is answered 408 and dropped once the read timeout passes.
        for s in slow:
            data = b""
            while not data.endswith(b"\n") or b"\r\n\r\n" not in data:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
            assert data.startswith(b"HTTP/1.1 408 "), data[:80]
        assert len(log.since(0)) == 1
    finally:
        for s in slow:
            s.close()


@pytest.mark.security
def test_too_many_connections_get_503_not_a_hang(tmp_path):
    log = ForgeEventLog(tmp_path / "events.jsonl")
    it = WebhookIntake(GiteaWebhookMapper(log, WORKERS), SECRET, read_timeout_s=30, max_connections=3)
    it.start()
    held = []
    try:
        for _ in range(3):
            held.append(socket.create_connection(("127.0.0.1", it.port), timeout=10))
            held[-1].sendall(b"POST /hooks/gitea HTTP/1.1\r\n")
        wait_for(lambda: it._open == 3, 5, "three held connections")
        r = httpx.post(it.url, content=b"{}", timeout=10)
        assert r.status_code == 503 and "more than 3 connections" in r.text
    finally:
        for s in held:
            s.close()
        it.close()
        log.close()


@pytest.mark.security
@pytest.mark.parametrize("event_type, body, says", [
    ("pull_request", b'{"action": "opened", "pull_request": "not an object"}', "pull_request: "),
    ("pull_request", b'{"action": "opened", "pull_request": {"number": "two"}}', "pull_request.number: "),
    ("pull_request", b'{"action": "opened", "pull_request": {"title": "no number"}}', "has no `number`"),
    ("push", b'{"before": "x", "after": "y"}', "a push event without `ref`"),
    ("push", b'{"ref": ["refs/heads/x"]}', "ref: "),
    ("push", b'[1, 2, 3]', "a JSON list, not an object"),
    ("push", b'{"ref": "refs/heads/x", "sender": {"login": 5}}', "sender.login: "),
    ("push", b"not json", "the body is not JSON"),
])
def test_a_signed_body_of_the_wrong_shape_gets_400(quick_intake, event_type, body, says):
    it, log, rejected = quick_intake
    r = post_signed(it, event_type, body, delivery="x")
    assert r.status_code == 400, r.text
    assert says in r.text and "Traceback" not in r.text
    assert log.since(0) == [] and says in rejected[0]


@pytest.mark.security
@pytest.mark.parametrize("depth", [100_000, 40])
def test_deep_nesting_gets_400_not_a_dropped_connection(quick_intake, depth):
    it, log, rejected = quick_intake
    body = b'{"ref": "refs/heads/x", "extra": ' + b"[" * depth + b"]" * depth + b"}"
    r = post_signed(it, "push", body, delivery="deep")
    assert r.status_code == 400 and "nests deeper than 32 levels" in r.text
    assert log.since(0) == [] and "nests deeper than 32 levels" in rejected[0]
    assert send(it, "pull_request", pr_payload("opened")).status_code == 200, "the intake still serves"


@pytest.mark.security
def test_the_same_body_without_a_delivery_id_counts_once(quick_intake, tmp_path):
    it, log, _ = quick_intake
    body = json.dumps(pr_payload("opened")).encode()
    assert post_signed(it, "pull_request", body).status_code == 200
    assert post_signed(it, "pull_request", body).status_code == 200
    assert len(log.since(0)) == 1, "the same body twice without X-Gitea-Delivery must not notify twice"
    other = json.dumps(pr_payload("opened", number=3)).encode()
    assert post_signed(it, "pull_request", other).status_code == 200
    assert [e.pr for e in log.since(0)] == [2, 3]
    # Durable: a restarted intake still knows the body.
    again = ForgeEventLog(tmp_path / "events.jsonl")
    assert sum(d.startswith("sha256:") for d in again.deliveries) == 2
    again.close()
