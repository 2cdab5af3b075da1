"""ChatFeed without Ray, on the test's event loop over a real EmbeddedChat: the
routers' long poll wakes on a new message, and every message is traced once.
(The Mattermost path, where messages also arrive on the websocket, is in
test_mattermost.py.)"""

from __future__ import annotations

import asyncio

import pyarrow.parquet as pq
import pytest

from agensh_ray.errors import ChatError
from agensh_ray.services.chat.embedded import EmbeddedChat
from agensh_ray.services.chat.feed import ChatFeed
from agensh_ray.trace import TraceWriter
from tests.support import await_for


@pytest.fixture
def feed(tmp_path):
    f = ChatFeed(EmbeddedChat(tmp_path / "chat"), TraceWriter(tmp_path / "run", "chat", "r1", flush_interval_s=0))
    for w in ("w001", "w002", "w003"):
        f.add_user(w)
    yield f
    f.close()


async def test_a_long_poll_wakes_on_a_dm(feed):
    waiting = asyncio.create_task(feed.wait_since(0, timeout_s=30))
    await await_for(lambda: feed.polls_waiting == 1, 5, "the long poll to park")
    assert not waiting.done()
    sent = await feed.dm("w001", "w002", "I take upper")
    got = await asyncio.wait_for(waiting, 5)  # woken, long before its 30 s
    assert got == [sent] and (sent.seq, sent.to) == (1, "w002") and feed.polls_waiting == 0


async def test_a_long_poll_returns_at_once_or_empty_after_its_timeout(feed):
    first = await feed.post("w001", "claiming upper")
    assert await feed.wait_since(0, timeout_s=30) == [first]
    assert await feed.wait_since(feed.last_seq(), timeout_s=0.05) == []


async def test_every_message_is_traced_once_and_refusals_are_not(feed, tmp_path):
    await feed.post("w001", "claiming upper")
    await feed.dm("w002", "w001", "lower is mine")
    with pytest.raises(ChatError, match="unknown recipient 'w999'"):
        await feed.dm("w001", "w999", "hi")
    assert [m.text for m in feed.history("w003")] == ["claiming upper"]
    assert [m.seq for m in feed.messages_since(0)] == [1, 2] and feed.last_seq() == 2
    feed.trace.flush()
    rows = sorted(pq.read_table(tmp_path / "run" / "trace" / "messages").to_pylist(), key=lambda r: r["seq"])
    assert [(r["seq"], r["kind"], r["worker_id"], r["sender"], r["recipient"], r["text"]) for r in rows] == [
        (1, "channel", "w001", "w001", None, "claiming upper"),
        (2, "dm", "w002", "w002", "w001", "lower is mine"),
    ]
