"""The Mattermost chat adapter through real HTTP and a real websocket against
the fake Mattermost, every body checked against services/fakes/specs/mattermost-openapi-v4-2023.yaml."""

from __future__ import annotations

import asyncio
import time

import httpx
import pyarrow.parquet as pq
import pytest

from agensh_ray.config import RunConfig
from agensh_ray.errors import ChatError
from agensh_ray.routing import Fanout
from agensh_ray.services.chat.feed import ChatFeed
from agensh_ray.services.fakes.contract import missing_specs
from agensh_ray.trace import TraceWriter
from agensh_ray.worker import WorkerHost
from tests.support import await_for, wait_for

SKIP = missing_specs("mattermost")
pytestmark = [
    pytest.mark.contract,
    pytest.mark.skipif(SKIP is not None, reason=SKIP or ""),
]
WORKERS = ["w001", "w002", "w003"]


@pytest.fixture(scope="module")
def mm_env(tmp_path_factory):
    from agensh_ray.services.fakes.mattermost import FakeMattermost
    from agensh_ray.services.provision import MattermostSettings, provision_mattermost, write_secrets

    root = tmp_path_factory.mktemp("mm")
    fake = FakeMattermost().start()
    settings = MattermostSettings(url=fake.url, admin_token=fake.admin_token, team="agensh", channel="task")
    secrets = root / "secrets.json"
    write_secrets(secrets, {"mattermost": provision_mattermost(settings, WORKERS, {})})
    yield fake, secrets
    fake.close()


@pytest.fixture
def chat(mm_env, tmp_path):
    from agensh_ray.services.chat.mattermost import MattermostChat

    fake, secrets = mm_env
    c = MattermostChat.from_secrets(secrets, tmp_path / "chat")
    c.start()
    assert all(c.wait_connected(u) for u in c.users), "every socket should authenticate"
    yield c
    c.close()


def raw_dm(fake, chat, sender: str, to: str, text: str) -> dict:
    """A DM sent by someone else's client (a person in the Mattermost UI): not through this adapter."""
    tok = chat.users[sender]["token"]
    h = {"Authorization": f"Bearer {tok}"}
    ch = httpx.post(f"{fake.url}/api/v4/channels/direct", json=[chat.users[sender]["id"], chat.users[to]["id"]],
                    headers=h).json()
    return httpx.post(f"{fake.url}/api/v4/posts", json={"channel_id": ch["id"], "message": text}, headers=h).json()


def test_post_dm_history_and_refusals(chat, mm_env):
    fake, _ = mm_env
    p = chat.post("w001", "claiming upper")
    d = chat.dm("w002", "w001", "I am on lower, not upper")
    assert (p.seq, p.sender, p.to) == (1, "w001", None)
    assert (d.seq, d.sender, d.to, d.text) == (2, "w002", "w001", "I am on lower, not upper")
    wait_for(lambda: chat.last_seq == 2, 10, "both messages in the log")
    # The websocket copies of both posts (sent before the REST answers returned) must not be logged again.
    wait_for(fake.websockets_flushed, 10, "the websocket copies of both posts to be sent")
    assert [m.seq for m in chat.messages_since(0)] == [1, 2]
    assert [m.text for m in chat.history("w003")] == ["claiming upper"]
    assert len(chat.history("w001")) == 2
    with pytest.raises(ChatError, match="unknown recipient 'w999'"):
        chat.dm("w001", "w999", "hi")
    with pytest.raises(ChatError, match="DM to yourself"):
        chat.dm("w001", "w001", "hi")
    with pytest.raises(ChatError, match="empty"):
        chat.post("w001", "  ")
    assert not fake.violations, "\n".join(map(str, fake.violations))


def test_dm_over_the_websocket_is_delivered_mid_turn(chat, mm_env, tmp_path):
    """A DM posted by another client reaches the log through the websocket, and from there the
    routers' fan-out puts it in the worker's urgent queue: the next infra tool result carries it."""
    fake, _ = mm_env
    seen = []
    chat.add_listener(seen.append)
    start = chat.last_seq
    raw_dm(fake, chat, "w003", "w001", "stop: upper is already merged")
    wait_for(lambda: chat.last_seq > start, 10, "the websocket to deliver the DM")
    [msg] = chat.messages_since(start)
    assert (msg.sender, msg.to, msg.text) == ("w003", "w001", "stop: upper is already merged")
    wait_for(lambda: seen, 10, "the listener")  # called after the log's lock is released, on the websocket thread
    assert seen == [msg]

    cfg = RunConfig(workers=3)
    host = WorkerHost("h000", WORKERS, cfg, tmp_path / "run", "r1", None, {}, time.time(), tmp_path)
    try:
        fan = Fanout({"h000": WORKERS})
        host.deliver(fan.split("chat", [msg])["h000"], {"chat": msg.seq})
        assert host.backend.pending_urgent("w002") == ""
        urgent = host.backend.pending_urgent("w001")
        assert '[DM from w003] "stop: upper is already merged"' in urgent
        assert host.backend.pending_urgent("w001") == "", "delivered once"
    finally:
        host.trace.close()
    assert not fake.violations, "\n".join(map(str, fake.violations))


async def test_chat_feed_wakes_on_a_websocket_dm_and_traces_each_message_once(chat, mm_env, tmp_path):
    """The ChatActor's logic on Mattermost: a DM that arrives on the websocket (not through the feed)
    is traced by the listener and wakes the routers' long poll; the feed's own DM is traced once."""
    fake, _ = mm_env
    feed = ChatFeed(chat, TraceWriter(tmp_path / "run", "chat", "r1", flush_interval_s=0))
    start = feed.last_seq()
    waiting = asyncio.create_task(feed.wait_since(start, timeout_s=30))
    await await_for(lambda: feed.polls_waiting == 1, 5, "the long poll to park")
    await asyncio.to_thread(raw_dm, fake, chat, "w003", "w001", "stop: upper is already merged")
    [got] = await asyncio.wait_for(waiting, 10)
    assert (got.sender, got.to, got.text) == ("w003", "w001", "stop: upper is already merged")
    mine = await feed.dm("w001", "w003", "ok, moving to lower")
    assert await feed.wait_since(got.seq, timeout_s=5) == [mine]
    feed.trace.close()
    rows = sorted(pq.read_table(tmp_path / "run" / "trace" / "messages").to_pylist(), key=lambda r: r["seq"])
    assert [(r["sender"], r["recipient"], r["text"]) for r in rows] == [
        ("w003", "w001", "stop: upper is already merged"), ("w001", "w003", "ok, moving to lower")]
    assert not fake.violations, "\n".join(map(str, fake.violations))


def test_reconnect_with_backoff_catches_up(chat, mm_env):
    fake, _ = mm_env
    start = chat.last_seq
    before = dict(chat.connected)
    fake.drop_websockets()
    raw_dm(fake, chat, "w002", "w003", "sent while the sockets were down")
    assert all(chat.wait_connected(u, before[u] + 1) for u in chat.users), "sockets should reconnect"
    wait_for(lambda: chat.last_seq > start, 10, "the catch-up to log the DM")
    # The catch-up has run on every socket (wait_connected); any websocket copy must not be logged again.
    wait_for(fake.websockets_flushed, 10, "the websockets to send what was queued")
    new = chat.messages_since(start)
    assert [(m.sender, m.to, m.text) for m in new] == [("w002", "w003", "sent while the sockets were down")]
    assert not fake.violations, "\n".join(map(str, fake.violations))


def test_restart_keeps_the_log(chat, mm_env, tmp_path):
    from agensh_ray.services.chat.mattermost import MattermostChat

    _, secrets = mm_env
    chat.post("w001", "before restart")
    n = chat.last_seq
    chat.close()
    again = MattermostChat.from_secrets(secrets, tmp_path / "chat", stream=False)
    try:
        assert again.last_seq == n and again.messages_since(n - 1)[0].text == "before restart"
    finally:
        again.close()
