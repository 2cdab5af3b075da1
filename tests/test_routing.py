"""Routing without Ray: Fanout targets and priorities, HostInbox dedup and queues, TurnClock timing."""

from __future__ import annotations

import pickle

import pytest

from agensh_ray.config import RoutingConfig
from agensh_ray.models import BoardEntry, ChatMessage, Delivery, EntryType, ForgeEvent
from agensh_ray.render import render
from agensh_ray.routing import Event, Fanout, HostInbox, TurnClock, words

HOSTS = {"h0": ["w1", "w2", "w3"], "h1": ["w4", "w5"]}
S = 1_000_000  # board clock microseconds per second


def entry(seq: int, worker: str, text: str, type: str = "FACT", ts: int = 100 * S) -> BoardEntry:
    return BoardEntry(seq=seq, ts=ts, type=EntryType(type), text=text, worker_id=worker)


def deliver(fan: Fanout, inboxes: dict[str, HostInbox], source: str, batch: list) -> None:
    per_host = fan.split(source, batch)
    cursor = batch[-1].seq
    for h, inbox in inboxes.items():
        inbox.accept(per_host.get(h, []), {source: cursor})


def inboxes() -> dict[str, HostInbox]:
    return {h: HostInbox(ws) for h, ws in HOSTS.items()}


def seen(inbox: dict[str, HostInbox], worker: str, urgent_only: bool = False) -> list[tuple[str, str, str]]:
    host = next(h for h, ws in HOSTS.items() if worker in ws)
    return [(q.event_id, q.priority, q.kind) for q in inbox[host].take(worker, urgent_only)]


# ------------------------------------------------------------------ Fanout


def test_policy_all_one_event_per_host_every_other_worker_high():
    fan, ib = Fanout(HOSTS, "all"), inboxes()
    per_host = fan.board([entry(1, "w1", "parser handles tabs")])
    assert {h: len(v) for h, v in per_host.items()} == {"h0": 1, "h1": 1}  # per host, not per worker
    assert per_host["h0"][0].high is None  # "every other worker": expanded by the host
    deliver(fan, ib, "board", [entry(1, "w1", "parser handles tabs")])
    assert seen(ib, "w1") == []  # not to its author
    for w in ("w2", "w3", "w4", "w5"):
        assert seen(ib, w) == [("board:1", "high", "board")]


def test_policy_relevant_overlap_and_fail_high_rest_summarised():
    fan, ib = Fanout(HOSTS, "relevant"), inboxes()
    deliver(fan, ib, "board", [
        entry(1, "w2", "CLAIM tac: textkit/commands/tac.py", "CLAIM"),
        entry(2, "w4", "rot13 and caesar in commands/rot13.py", "CLAIM"),
    ])
    for w in ("w1", "w2", "w3", "w4", "w5"):
        ib[fan.host_of[w]].take(w, urgent_only=False)
    deliver(fan, ib, "board", [
        entry(3, "w1", "tac keeps the final newline of the last line"),  # overlaps w2's claim
        entry(4, "w5", "the ROT13 table is ASCII only", "OBSERVED"),  # overlaps w4's claim
        entry(5, "w3", "make check breaks on empty input", "FAIL"),  # FAIL: high for all
        entry(6, "w3", "the reference is a zipapp"),  # overlaps nobody
    ])
    assert seen(ib, "w2", urgent_only=True) == [("board:3", "high", "board"), ("board:5", "high", "board")]
    assert seen(ib, "w2") == [("board:4", "low", "summary"), ("board:6", "low", "summary")]
    assert seen(ib, "w4") == [
        ("board:3", "low", "summary"), ("board:4", "high", "board"), ("board:5", "high", "board"),
        ("board:6", "low", "summary"),
    ]
    assert seen(ib, "w5") == [("board:3", "low", "summary"), ("board:5", "high", "board"),
                              ("board:6", "low", "summary")]


def test_relevant_claims_end_with_patch_summary_or_ttl():
    fan = Fanout(HOSTS, "relevant", claim_ttl_s=3600)
    fan.track(entry(1, "w2", "tac command", "CLAIM", ts=0))
    assert fan.claimants("tac is done?", now_ts=10 * S) == {"w2"}
    assert fan.claimants("tac is done?", now_ts=3601 * S) == set()  # older than the claim TTL
    fan.track(entry(2, "w2", "tac command", "CLAIM", ts=4000 * S))
    fan.track(entry(3, "w4", "tac too", "CLAIM", ts=4000 * S))
    assert fan.claimants("tac", now_ts=4001 * S) == {"w2", "w4"}
    fan.track(entry(4, "w2", "tac merged in PR #3", "PATCH_SUMMARY", ts=4002 * S))
    assert fan.claimants("tac", now_ts=4003 * S) == {"w4"}
    fan.track(entry(5, "w4", "now rot13", "CLAIM", ts=4004 * S))  # a new claim replaces the old one
    assert fan.claimants("tac", now_ts=4005 * S) == set()


def test_relevant_ignores_stop_words_and_words_everyone_claims():
    assert "the" not in words("the parser") and "py" not in words("tac.py") and "tac" in words("tac.py")
    hosts = {"h": [f"w{i}" for i in range(6)]}
    fan = Fanout(hosts, "relevant")
    for i, cmd in enumerate(["tac", "rot13", "upper", "lower", "title"]):
        fan.track(entry(i + 1, f"w{i}", f"textkit {cmd}", "CLAIM"))
    assert fan.claimants("textkit builds again", now_ts=100 * S) == set()  # held by all five claimants
    assert fan.claimants("textkit upper is wrong", now_ts=100 * S) == {"w2"}


def test_unknown_policy_is_refused():
    with pytest.raises(ValueError, match="unknown delivery policy 'some'; valid: all, relevant"):
        Fanout(HOSTS, "some")


def test_chat_dm_high_to_its_host_only_channel_low_to_all_others():
    fan, ib = Fanout(HOSTS), inboxes()
    msgs = [
        ChatMessage(seq=1, ts=1, sender="w1", to="w5", text="I take tac, you take rot13?"),
        ChatMessage(seq=2, ts=2, sender="w2", text="main is green"),
    ]
    per_host = fan.chat(msgs)
    assert [e.kind for e in per_host["h0"]] == ["channel"]
    assert [e.kind for e in per_host["h1"]] == ["dm", "channel"]
    deliver(fan, ib, "chat", msgs)
    assert seen(ib, "w5", urgent_only=True) == [("chat:1", "high", "dm")]
    assert seen(ib, "w5") == [("chat:2", "low", "channel")]
    assert seen(ib, "w2") == []
    assert seen(ib, "w1") == [("chat:2", "low", "channel")]


def test_forge_notifies_listed_workers_low_not_the_actor():
    fan, ib = Fanout(HOSTS), inboxes()
    ev = ForgeEvent(seq=7, ts=1, kind="pr_reviewed", actor="w4", pr=3, detail="approve",
                    notify=["w1", "w4", "w5", "w1"])
    assert set(fan.forge([ev])) == {"h0", "h1"}
    deliver(fan, ib, "forge", [ev])
    assert seen(ib, "w1") == [("forge:7", "low", "forge")]
    assert seen(ib, "w5") == [("forge:7", "low", "forge")]
    assert seen(ib, "w4") == [] and seen(ib, "w2") == []


# ------------------------------------------------------------------ HostInbox


def test_replayed_batches_never_reach_the_agent_twice():
    fan, ib = Fanout(HOSTS), HostInbox(HOSTS["h0"])
    batch = [entry(i, "w4", f"fact {i}") for i in range(1, 6)]
    ev = fan.board(batch)["h0"]
    assert ib.accept(ev[:3], {"board": 3}) == 9
    assert [q.event_id for q in ib.take("w1", False)] == ["board:1", "board:2", "board:3"]
    # a restarted router resumes from an older cursor and sends everything again
    assert ib.accept(ev, {"board": 5}) == 6
    assert [q.event_id for q in ib.take("w1", False)] == ["board:4", "board:5"]
    assert ib.accept(ev, {"board": 5}) == 0
    assert ib.take("w1", False) == [] and ib.duplicates == 8 and ib.cursors["board"] == 5
    assert ib.accepted == 5
    assert [q.event_id for q in ib.take("w2", False)] == [f"board:{i}" for i in range(1, 6)]


def test_cursor_moves_past_events_for_other_hosts():
    ib = HostInbox(["w1"])
    assert ib.accept([], {"chat": 40}) == 0
    assert ib.cursors == {"board": 0, "chat": 40, "forge": 0}
    assert ib.accept([Event("chat", 12, "dm", "old", "w9", 0, ("w1",))], {"chat": 40}) == 0


def test_urgent_take_leaves_low_items_and_turn_start_takes_all_in_order():
    ib = HostInbox(["w1", "w2"])
    ib.accept([
        Event("chat", 1, "channel", "hello", "w9", 0, (), None),
        Event("board", 1, "board", "a fact", "w9", 0, None, (), "FACT"),
        Event("chat", 2, "dm", "psst", "w9", 0, ("w1",)),
    ], {})
    assert ib.has_urgent("w1") and ib.kinds("w1") == {"channel", "board", "dm"}
    assert [q.kind for q in ib.take("w1", urgent_only=True)] == ["board", "dm"]
    assert not ib.has_urgent("w1") and ib.has_any("w1") and ib.kinds("w1") == {"channel"}
    ib.push_local(Delivery(event_id="nudge:w1:1", worker_id="w1", priority="low", kind="nudge", text="go",
                           enqueue_ts=0))
    assert [q.kind for q in ib.take("w1", urgent_only=False)] == ["channel", "nudge"]
    assert not ib.has_any("w1") and ib.kinds("w1") == set()
    assert ib.queued() == 2 and len(ib.queues["w2"]) == 2 and ib.kinds("w2") == {"channel", "board"}


def test_event_is_small_and_picklable():
    ev = Event("board", 3, "board", "[board #3 FACT w1] x", "w1", 5, None, (), "FACT")
    assert pickle.loads(pickle.dumps(ev)) == ev and ev.event_id == "board:3"


def test_render_folds_summaries_per_type():
    ib = HostInbox(["w1"])
    ib.accept([
        Event("board", 1, "board", "[board #1 FAIL w2] boom", "w2", 0, None, (), "FAIL"),
        Event("board", 2, "board", "[board #2 FACT w2] x", "w2", 0, (), None, "FACT"),
        Event("board", 3, "board", "[board #3 FACT w3] y", "w3", 0, (), None, "FACT"),
        Event("board", 4, "board", "[board #4 OBSERVED w3] z", "w3", 0, (), None, "OBSERVED"),
    ], {})
    text = render(ib.take("w1", False), mid_turn=False)
    assert text.splitlines() == [
        "--- since your last turn ---",
        "[board #1 FAIL w2] boom",
        "[board] 3 other new entries (2 FACT, 1 OBSERVED); board_read shows them",
    ]
    assert render([], mid_turn=True) == ""


# ------------------------------------------------------------------ TurnClock


def test_idle_nudge_once_per_idle_spell():
    c = TurnClock(idle_nudge_s=600, deadline_s=14400)
    assert c.due(599) == [] and c.next_due_in(599) == 1
    assert [d.kind for d in c.due(600)] == ["nudge"]
    assert c.due(1300) == []  # not again until a turn ends
    c.turn_started(1300)
    assert c.due(5000) == []  # never during a turn
    c.turn_ended(5000, board_writes=1, trigger="nudge", stop_reason="end_turn")
    assert c.due(5599) == [] and [d.kind for d in c.due(5600)] == ["nudge"]


def test_share_findings_after_a_silent_turn_only():
    c = TurnClock(idle_nudge_s=600, deadline_s=14400)
    assert c.turn_ended(10, board_writes=0, trigger="events", stop_reason="end_turn") == ("share_findings", "low", False, 0.0)
    assert c.turn_ended(20, board_writes=2, trigger="events", stop_reason="end_turn") is None
    assert c.turn_ended(30, board_writes=0, trigger="share_findings", stop_reason="end_turn") is None  # no loop
    assert c.turn_ended(40, board_writes=0, trigger="events", stop_reason="cancelled") is None
    off = TurnClock(idle_nudge_s=600, deadline_s=14400, share_findings=False)
    assert off.turn_ended(10, board_writes=0, trigger="events", stop_reason="end_turn") is None


def test_wind_down_notices_once_each_and_late_starters_get_the_latest():
    cfg = RoutingConfig(idle_nudge_s=10**9)
    c = TurnClock.from_config(cfg, deadline_s=14400)
    assert c.due(14400 - 2701) == [] and c.next_due_in(14400 - 2701) == 1
    assert c.due(14400 - 2700) == [("wind_down", "high", False, 45.0)]
    assert c.due(14400 - 1000) == []
    assert c.due(14400 - 300) == [("wind_down", "high", True, 5.0)]
    assert c.due(14400) == [] and c.next_due_in(14400) == 10**9 - 14400  # only the nudge is left
    late = TurnClock.from_config(cfg, deadline_s=14400, now_s=14400 - 100)
    assert late.due(14400 - 100) == [("wind_down", "high", True, 5.0)]
    short = TurnClock.from_config(cfg, deadline_s=1200)  # a 20-minute run has no T-45 notice
    assert short.due(900) == [("wind_down", "high", True, 5.0)]


def test_dm_and_forge_events_name_their_one_worker_broadcasts_none():
    """WorkerHost.deliver wakes `event.worker_id` (DMs, forge); broadcasts wake nobody."""
    fan = Fanout(HOSTS)
    dm = fan.chat([ChatMessage(seq=1, ts=1, sender="w1", to="w5", text="hi")])["h1"][0]
    post = fan.chat([ChatMessage(seq=2, ts=1, sender="w1", text="hi all")])["h1"][0]
    fe = fan.forge([ForgeEvent(seq=3, ts=1, kind="pr_merged", actor="w1", pr=1, notify=["w4", "w5"])])["h1"]
    board = fan.board([entry(4, "w1", "x")])["h1"][0]
    assert (dm.worker_id, post.worker_id, board.worker_id) == ("w5", None, None)
    assert [e.worker_id for e in fe] == ["w4", "w5"]
    ib = HostInbox(HOSTS["h1"])
    assert ib.accept(fe, {"forge": 3}) == 2  # same seq twice in one batch: both kept
    assert ib.accept(fe, {"forge": 3}) == 0  # the replay: both dropped


def test_a_delivery_is_accepted_as_a_one_worker_event():
    ib = HostInbox(["w1", "w2"])
    d = Delivery(event_id="chat:1", worker_id="w1", priority="high", kind="dm", text="x", enqueue_ts=0)
    assert ib.accept([d], {"chat": 1}) == 1 and ib.accept([d], {"chat": 1}) == 0
    assert [(q.event_id, q.priority, q.kind) for q in ib.take("w1", True)] == [("chat:1", "high", "dm")]


def test_take_shared_gives_the_same_values_without_a_copy_per_worker():
    ib = HostInbox(["w1", "w2"])
    ib.accept([Event("board", 1, "board", "x", "w9", 5, None, (), "FACT"),
               Event("board", 2, "board", "y", "w9", 6, (), None, "FACT")], {})
    a, b = ib.take_shared("w1", False), ib.take_shared("w2", False)
    assert a[0] is b[0] and [(s.event_id, s.priority, s.kind) for s in a] == [("board:1", "high", "board"),
                                                                             ("board:2", "low", "summary")]
