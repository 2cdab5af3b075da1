"""The MCP infra tools through a real WorkerHost and its streamable-HTTP
server, called with the official MCP client exactly as an agent would."""

from __future__ import annotations

import httpx
import pyarrow.parquet as pq
import pytest
from mcp import Client

from agensh_ray.models import Delivery, now_us
from tests.support import LocalServices

WORKERS = ["w001", "w002"]


@pytest.fixture
async def host(tmp_path, git_env):
    services = LocalServices(tmp_path / "svc", WORKERS)
    h = services.host(tmp_path / "run", WORKERS)
    await h.start()
    yield h
    await h.stop()
    services.close()


def url(h, w="w001"):
    return h.tools.url(w, h.workers[w].token)


async def call(h, tool, w="w001", **args) -> str:
    async with Client(url(h, w)) as c:
        res = await c.call_tool(tool, args)
        return "".join(getattr(b, "text", "") for b in res.content)


async def test_every_infra_tool_is_listed(host):
    async with Client(url(host)) as c:
        names = {t.name for t in (await c.list_tools()).tools}
    assert names == {
        "board_write", "board_read", "board_unfold", "board_grep", "board_claims", "send_dm", "channel_post",
        "read_messages",
        "pr_create", "pr_list", "pr_view", "pr_review", "pr_comment", "pr_merge", "issue_view",
    }


async def test_bad_board_entries_get_clear_errors_and_nothing_else_is_lost(host):
    ok = await call(host, "board_write", type="FACT", text="upper keeps the trailing newline")
    assert ok.startswith("written: #1 FACT w001")
    long = await call(host, "board_write", type="CLAIM", text="x" * 143)
    assert long.startswith("ERROR:") and "143" in long and "100" in long
    typo = await call(host, "board_write", type="CLAIMS", text="claim upper")
    assert typo.startswith("ERROR:") and "CLAIMS" in typo and "PATCH_SUMMARY" in typo
    big = await call(host, "board_write", type="OBSERVED", text="ok", detail="d" * 100_000)
    assert big.startswith("ERROR:") and "detail" in big
    after = await call(host, "board_write", type="CLAIM", text="claim lower")
    assert after.startswith("written: #2 CLAIM")
    board = await call(host, "board_read")
    assert board.splitlines() == ['#1 FACT w001: "upper keeps the trailing newline"', '#2 CLAIM w001: "claim lower"']
    grep = await call(host, "board_grep", pattern="(")
    assert grep.startswith("ERROR:") and "invalid pattern" in grep


async def test_dm_is_delivered_mid_turn_inside_a_tool_result(host, tmp_path):
    sent = await call(host, "send_dm", w="w002", to="w001", text="I take lower, you keep upper")
    assert sent.startswith("sent:")
    # What the router would push for that DM.
    host.deliver(
        [Delivery(event_id="chat:1", worker_id="w001", priority="high", kind="dm",
                  text="[DM from w002] I take lower, you keep upper", enqueue_ts=now_us())],
        {"chat": 1},
    )
    res = await call(host, "board_read")
    assert "--- new for you while you work ---" in res and "[DM from w002] I take lower" in res
    # Delivered once: the next result no longer carries it, and a replay of the batch is dropped.
    assert "DM from w002" not in await call(host, "board_read")
    assert host.deliver([Delivery(event_id="chat:1", worker_id="w001", priority="high", kind="dm", text="again",
                                  enqueue_ts=now_us())], {"chat": 1}) == 0
    host.trace.flush()
    rows = pq.read_table(tmp_path / "run" / "trace" / "deliveries").to_pylist()
    assert [(r["event_id"], r["via"], r["worker_id"]) for r in rows] == [("chat:1", "mid_turn", "w001")]


async def test_low_priority_events_wait_for_the_next_turn(host):
    host.deliver([Delivery(event_id="chat:3", worker_id="w001", priority="low", kind="channel",
                           text="[#task w002] main is green", enqueue_ts=now_us())], {"chat": 3})
    assert "main is green" not in await call(host, "board_read")
    prompt = host.workers["w001"].prompt_text("events")
    assert "--- since your last turn ---" in prompt and "main is green" in prompt


async def test_forge_tools_and_protected_main(host):
    issue = await call(host, "issue_view", number=1)
    assert issue.startswith("Issue #1") and "textkit" in issue
    assert (await call(host, "pr_list")) == "(no open pull requests)"
    missing = await call(host, "pr_create", head="w001/nothing", title="x")
    assert missing.startswith("ERROR:") and "push it first" in missing
    bad = await call(host, "pr_review", number=2, verdict="lgtm")
    assert bad.startswith("ERROR:") and "approve" in bad


async def test_unknown_worker_or_wrong_token_is_refused(host):
    base = url(host).rsplit("/w/", 1)[0]
    async with httpx.AsyncClient() as c:
        r = await c.post(f"{base}/w/w001/not-the-token/mcp", json={})
        assert r.status_code == 404
        r = await c.post(f"{base}/w/w999/{host.workers['w001'].token}/mcp", json={})
        assert r.status_code == 404


async def test_an_idle_connection_outlives_the_agents_http_clients(host):
    """The server never closes an idle keep-alive connection before the agent's client would (httpx: 5 s,
    reqwest: 90 s): with uvicorn's 5 s both closed at once, and through a sandbox's relay a request sent into
    the just-closed connection failed ("Server disconnected without sending a response")."""
    import asyncio

    from agensh_ray.tools import KEEP_ALIVE_S

    assert KEEP_ALIVE_S > 90
    base = url(host).rsplit("/w/", 1)[0].removeprefix("http://")
    h, _, port = base.partition(":")
    reader, writer = await asyncio.open_connection(h, int(port))
    request = f"GET /w/w001/not-the-token/mcp HTTP/1.1\r\nHost: {base}\r\n\r\n".encode()

    async def answer() -> bytes:
        head = await reader.readuntil(b"\r\n\r\n")
        fields = dict(line.split(b": ", 1) for line in head.lower().split(b"\r\n")[1:] if b": " in line)
        assert b"connection" not in fields or fields[b"connection"] != b"close"
        await reader.readexactly(int(fields[b"content-length"]))
        return head

    try:
        writer.write(request)
        assert (await answer()).startswith(b"HTTP/1.1 404")
        with pytest.raises(TimeoutError):  # 6.5 s idle (past uvicorn's default 5 s): neither data nor EOF
            await asyncio.wait_for(reader.read(1), 6.5)
        writer.write(request)  # and the same connection still answers
        assert (await answer()).startswith(b"HTTP/1.1 404")
    finally:
        writer.close()
