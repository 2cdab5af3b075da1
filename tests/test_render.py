"""Every text an agent reads about an entry, a message, a PR or a delivery, verbatim: the sim agent
parses some of them with regular expressions, and real agents are prompted with them."""

from __future__ import annotations

from agensh_ray.models import BoardEntry, ChatMessage, Comment, EntryType, ForgeEvent, PullRequest, Review
from agensh_ray.render import board_text, dm_text, fmt_entry, fmt_message, fmt_pr, forge_text, post_text


def test_board_entry_texts():
    e = BoardEntry(seq=7, ts=1, type=EntryType.CLAIM, text="tac: textkit/commands/tac.py", worker_id="w003")
    assert fmt_entry(e) == "#7 CLAIM w003: tac: textkit/commands/tac.py"
    assert fmt_entry(e.model_copy(update={"has_detail": True})) == (
        "#7 CLAIM w003: tac: textkit/commands/tac.py [+detail: board_unfold]")
    assert board_text(e) == "[board #7 CLAIM w003] tac: textkit/commands/tac.py"


def test_message_texts():
    dm = ChatMessage(seq=3, ts=1, sender="w001", to="w002", text="I take tac")
    post = ChatMessage(seq=4, ts=1, sender="w001", text="main is green")
    assert fmt_message(dm) == "[DM w001 -> w002] I take tac"
    assert fmt_message(post) == "[#task w001] main is green"
    assert dm_text(dm) == "[DM from w001] I take tac"
    assert post_text(post) == "[#task w001] main is green"


def test_forge_event_texts():
    fe = ForgeEvent(seq=1, ts=1, kind="pr_reviewed", actor="w004", pr=3, detail="approve")
    assert forge_text(fe) == "[forge] PR #3 pr reviewed by w004: approve"
    assert forge_text(fe.model_copy(update={"detail": ""})) == "[forge] PR #3 pr reviewed by w004"
    assert forge_text(ForgeEvent(seq=2, ts=1, kind="push", actor="w004", detail="w004/tac")) == (
        "[forge] push by w004: w004/tac")


def test_pull_request_texts():
    pr = PullRequest(number=5, title="tac", author="w001", head="w001/tac", created_ts=1)
    assert fmt_pr(pr) == "PR #5 [open] w001/tac -> main by w001: tac"
    merged = pr.model_copy(update={
        "state": "merged", "merged_by": "w002", "body": "adds tac", "files": ["textkit/commands/tac.py"],
        "reviews": [Review(reviewer="w002", verdict="approve", ts=1)],
        "comments": [Comment(author="w003", body="nice", ts=1)], "diff": "--- a\n+++ b"})
    assert fmt_pr(merged).endswith("(merged by w002)")
    assert fmt_pr(merged, long=True).splitlines() == [
        "PR #5 [merged] w001/tac -> main by w001: tac (merged by w002)", "adds tac",
        "files: textkit/commands/tac.py", "review by w002: approve", "comment by w003: nice", "--- a", "+++ b",
    ]
