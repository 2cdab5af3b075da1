"""The model gateway's plain parts, without a network: prices, the wire formats' usage, retries,
admission under limits (fair across workers), budgets, the coordinator, virtual keys, and what an
agent's environment holds when it goes through the gateway."""

from __future__ import annotations

import json
import random

import pytest

from agensh_ray.agent.harness import get_harness
from agensh_ray.config import BudgetConfig, GatewayConfig, ModelLimit, RetryConfig, RunConfig
from agensh_ray.errors import GatewayError
from agensh_ray.models import GatewayEndpoint
from agensh_ray.services.gateway.budget import Budgets
from agensh_ray.services.gateway.coordinator import GatewayReport, LimitCoordinator
from agensh_ray.services.gateway.keys import VirtualKeys, presented_key
from agensh_ray.services.gateway.limits import Lane, Ticket, TokenBucket, limit_key
from agensh_ray.services.gateway.prices import PriceTable, Usage
from agensh_ray.services.gateway.retry import RetryPolicy, retry_after_s
from agensh_ray.services.gateway.wire import Meter, ask_for_usage, error_body, error_text

# -- prices -------------------------------------------------------------------------------------


def test_prices_come_from_litellms_map_by_the_model_called_and_an_override_wins(tmp_path):
    table = PriceTable()
    u = Usage(input_tokens=1000, output_tokens=100, cached_tokens=500)
    # gpt-4.1: 2e-6 in, 5e-7 cache read, 8e-6 out (LiteLLM's map)
    assert table.cost("openai", "gpt-4.1", u) == pytest.approx(500 * 2e-6 + 500 * 5e-7 + 100 * 8e-6)
    # a dated model name finds its entry; an Anthropic cache write is priced as one
    w = Usage(input_tokens=1000, output_tokens=10, cache_write_tokens=1000)
    assert table.cost("anthropic", "claude-sonnet-4-5-20250929", w) == pytest.approx(1000 * 3.75e-6 + 10 * 1.5e-5)
    assert table.cost("anthropic", "claude-sonnet-4-5-29991231", w) == table.cost("anthropic", "claude-sonnet-4-5", w)
    assert table.cost("openai", "no-such-model-anywhere", u) is None
    override = tmp_path / "prices.json"
    override.write_text(json.dumps({"gpt-4.1": {"input_cost_per_token": 1.0, "output_cost_per_token": 0.0},
                                    "my-local-model": {"input_cost_per_token": 1e-9, "output_cost_per_token": 2e-9}}))
    mine = PriceTable(override=override)
    assert mine.cost("openai", "gpt-4.1", Usage(input_tokens=3)) == 3.0
    assert mine.cost("openai", "my-local-model", Usage(input_tokens=1000, output_tokens=1000)) == pytest.approx(3e-6)
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    with pytest.raises(GatewayError, match="bad.json"):
        PriceTable(override=bad)


def test_long_context_calls_are_priced_at_their_tier(tmp_path):
    f = tmp_path / "p.json"
    f.write_text(json.dumps({"m": {"input_cost_per_token": 1.0, "output_cost_per_token": 1.0,
                                   "input_cost_per_token_above_200k_tokens": 2.0,
                                   "output_cost_per_token_above_200k_tokens": 3.0}}))
    t = PriceTable(override=f)
    assert t.cost("x", "m", Usage(input_tokens=10, output_tokens=1)) == 11.0
    assert t.cost("x", "m", Usage(input_tokens=200_001, output_tokens=1)) == 400_005.0


# -- wire formats -----------------------------------------------------------------------------


def sse(*objs, done: bool = True, event: bool = False) -> bytes:
    out = b""
    for o in objs:
        if event:
            out += f"event: {o['type']}\n".encode()
        out += b"data: " + json.dumps(o).encode() + b"\n\n"
    return out + (b"data: [DONE]\n\n" if done else b"")


CHAT = [{"id": "c", "model": "gpt-4.1-2025", "choices": [{"index": 0, "delta": {"content": "hel"}}]},
        {"id": "c", "model": "gpt-4.1-2025", "choices": [{"index": 0, "delta": {"content": "lo"},
                                                          "finish_reason": "stop"}]}]
USAGE = {"id": "c", "model": "gpt-4.1-2025", "choices": [],
         "usage": {"prompt_tokens": 50, "completion_tokens": 7, "prompt_tokens_details": {"cached_tokens": 20}}}


@pytest.mark.parametrize("size", [1, 7, 64, 10_000])
def test_a_chat_stream_is_read_in_any_chunking_and_an_asked_for_usage_chunk_is_taken_out(size):
    stream = sse(*CHAT, USAGE)
    m = Meter("chat", True, strip_usage=True)
    out = b"".join(m.feed(stream[i : i + size]) for i in range(0, len(stream), size)) + m.close()
    assert out == sse(*CHAT)  # exactly the stream the agent asked for (no usage chunk)
    assert m.finished and m.model == "gpt-4.1-2025"
    assert m.usage() == Usage(input_tokens=50, output_tokens=7, cached_tokens=20)
    # Not stripped: every byte passes as it came.
    m2 = Meter("chat", True)
    assert b"".join(m2.feed(stream[i : i + size]) for i in range(0, len(stream), size)) + m2.close() == stream
    assert m2.usage() == m.usage()


def test_the_gateway_asks_for_usage_only_when_the_agent_did_not():
    body = {"stream": True, "stream_options": {"include_usage": True}}
    assert not ask_for_usage("chat", body)
    body = {"stream": True}
    assert ask_for_usage("chat", body) and body["stream_options"] == {"include_usage": True}
    assert not ask_for_usage("messages", {"stream": True}) and not ask_for_usage("chat", {"stream": False})


def test_anthropic_responses_and_gemini_usage_and_stream_ends():
    msgs = [{"type": "message_start", "message": {"model": "claude-x", "usage": {
                "input_tokens": 10, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 5,
                "output_tokens": 1}}},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}},
            {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 42}},
            {"type": "message_stop"}]
    m = Meter("messages", True)
    m.feed(sse(*msgs, done=False, event=True))
    m.close()
    assert m.finished and m.model == "claude-x"
    assert m.usage() == Usage(input_tokens=115, output_tokens=42, cached_tokens=100, cache_write_tokens=5)
    cut = Meter("messages", True)
    cut.feed(sse(*msgs[:2], done=False, event=True))
    cut.close()
    assert not cut.finished  # no message_stop: the stream did not end properly
    err = Meter("messages", True)
    err.feed(sse(msgs[0], {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
                 done=False, event=True))
    assert err.stream_error == "overloaded_error: Overloaded"
    resp = Meter("responses", True)
    resp.feed(sse({"type": "response.completed", "response": {"model": "gpt-5", "usage": {
        "input_tokens": 9, "output_tokens": 3, "input_tokens_details": {"cached_tokens": 4}}}}, done=False))
    assert resp.finished and resp.usage() == Usage(input_tokens=9, output_tokens=3, cached_tokens=4)
    gem = Meter("generate", True)
    gem.feed(sse({"candidates": [], "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 2,
                                                      "thoughtsTokenCount": 1}, "modelVersion": "gemini-2.5-pro"},
                 done=False))
    gem.close()
    assert gem.finished and gem.model == "gemini-2.5-pro" and gem.usage() == Usage(input_tokens=5, output_tokens=3)
    plain = Meter("chat", False)
    plain.feed(json.dumps({"model": "m", "usage": {"prompt_tokens": 3, "completion_tokens": 4}}).encode())
    plain.close()
    assert plain.usage().total == 7 and plain.model == "m"


def test_errors_are_written_and_read_in_each_providers_shape():
    for provider in ("openai", "anthropic", "gemini"):
        assert error_text(error_body(provider, 403, "budget reached", "permission_error")) == "budget reached"
    assert error_text(b"<html>bad gateway</html>") == "<html>bad gateway</html>"


# -- retries ----------------------------------------------------------------------------------


def test_retry_after_in_every_form_and_the_policy_gives_up():
    assert retry_after_s({"retry-after-ms": "250"}) == 0.25
    assert retry_after_s({"retry-after": "3"}) == 3.0
    assert retry_after_s({"retry-after": "Wed, 21 Oct 2015 07:28:10 GMT"}, now=1445412480.0) == 10.0
    assert retry_after_s({}) is None and retry_after_s({"retry-after": "soon"}) is None
    p = RetryPolicy(RetryConfig(max_attempts=4, give_up_s=30, base_s=1, max_wait_s=20, jitter=0.5), random.Random(1))
    w = p.next_wait(1, 429, 2.0, 0)
    assert 2.0 <= w <= 3.0  # Retry-After plus up to 50% jitter
    assert 0.5 <= p.next_wait(1, 500, None, 0) <= 1 and 2 <= p.next_wait(3, None, None, 0) <= 4
    assert p.next_wait(1, 400, None, 0) is None  # not retryable
    assert p.next_wait(4, 429, 1, 0) is None  # attempts used up
    assert p.next_wait(1, 429, 15.0, 20) is None  # would pass give_up_s
    assert p.next_wait(1, 529, 100.0, 0) <= 30  # capped at max_wait_s (+ jitter)
    # The provider's rate limit used up ("paced" answers in a row): no attempt spent, and no hot loop on a
    # Retry-After of 0: at least 50 ms per such answer, to 1 s; give_up_s still bounds it.
    assert 0.15 <= p.next_wait(4, 429, 0.0, 0, paced=3) <= 0.15 * 1.5
    assert p.next_wait(0, 429, 0.0, 0, paced=100) >= 1.0
    assert p.next_wait(4, 429, 0.0, 29.99, paced=1) is None


# -- admission --------------------------------------------------------------------------------


def test_token_bucket_refills_at_its_rate_up_to_its_burst():
    b = TokenBucket(2.0, 4.0, now=0.0)
    b.take(4)
    assert b.wait(1, 0.0) == 0.5
    assert b.wait(1, 0.5) == 0.0
    b.refill(100.0)
    assert b.level == 4.0
    assert b.wait(10, 100.0) == 0.0  # more than a burst waits for a whole burst only


def lane(limit: ModelLimit, now: float = 0.0) -> Lane:
    return Lane("openai/*", limit, burst_s=1.0, now=now)


def test_queues_are_served_round_robin_so_a_flooding_worker_cannot_starve_another():
    la = lane(ModelLimit(rpm=60))  # one request a second, burst 1
    first = Ticket(la, "w001", 1, 0.0)
    assert la.try_admit(first, 0.0)
    flood = [Ticket(la, "w001", 1, 0.0) for _ in range(5)]
    for t in flood:
        assert not la.try_admit(t, 0.0)
        la.enqueue(t)
    late = Ticket(la, "w002", 1, 0.1)
    assert not la.try_admit(late, 0.1)  # others wait: no jumping the queue
    la.enqueue(late)
    order = []
    now = 0.0
    while la.turns:
        admitted, wait = la.dispatch(now)
        order += [t.worker for t in admitted]
        now += wait or 0.0
    assert order == ["w001", "w002", "w001", "w001", "w001", "w001"]
    assert late.queued_s == pytest.approx(1.9)


def test_streams_tokens_refunds_corrections_pauses_and_shares():
    la = lane(ModelLimit(max_streams=2, tpm=600))  # 10 tokens/s, burst 10
    a, b, c = (Ticket(la, "w", 4, 0.0) for _ in range(3))
    assert la.try_admit(a, 0.0) and la.try_admit(b, 0.0)
    assert la.blocked_for(1, 0.0) is None  # two in flight: wait for one to end
    la.release(a, actual_tokens=None, refund=True)  # refused by the provider: tokens back
    assert la.tokens.level == pytest.approx(6)
    la.release(b, actual_tokens=10, refund=False)  # the provider counted 10, not the 4 estimated
    assert la.tokens.level == pytest.approx(0)
    assert la.blocked_for(4, 0.0) == pytest.approx(0.4)
    la.paused_until = 5.0
    assert la.blocked_for(1, 1.0) == pytest.approx(4.0)
    la.set_share(0.5, 10.0)
    assert la.tokens.rate == pytest.approx(5) and la.max_streams == 1
    assert la.try_admit(c, 10.0)
    assert limit_key({"openai/*": ModelLimit(), "*": ModelLimit()}, "openai", "gpt-4.1") == "openai/*"
    assert limit_key({"*": ModelLimit()}, "anthropic", "c") == "*"
    assert limit_key({}, "anthropic", "c") == "anthropic/c"


# -- budgets and the coordinator -------------------------------------------------------------------


def test_a_worker_at_its_cap_is_refused_others_go_on_and_the_run_cap_refuses_all():
    b = Budgets(BudgetConfig(worker_usd=0.01, run_tokens=1000))
    b.charge("w001", 100, 0.006)
    assert b.refusal("w001") is None
    b.charge("w001", 100, 0.006)  # the call that crosses the cap completes
    assert b.refusal("w001").startswith("budget reached: worker w001 has spent $0.0120 of its $0.01 cap")
    assert b.refusal("w002") is None
    b.charge("w002", 500, None)  # unpriced: its tokens count
    assert b.workers["w002"].unpriced_calls == 1 and b.refusal("w002") is None
    b.set_run_spent(tokens=1200, usd=0.0)  # the coordinator's sum over the cluster
    assert b.refusal("w002").startswith("run budget reached: the run has used 1,200 tokens")


def test_the_coordinator_shares_limits_by_demand_and_sums_spending():
    now = [0.0]
    c = LimitCoordinator(GatewayConfig(budget=BudgetConfig(run_usd=1.0)), clock=lambda: now[0])
    alone = c.sync(GatewayReport(name="a", demand={"openai/*": 3}, usd=0.2))
    assert alone.shares == {"openai/*": 1.0}
    b = c.sync(GatewayReport(name="b", demand={"openai/*": 9}, usd=0.3))
    assert b.shares["openai/*"] == pytest.approx(9.25 / 12.5)
    a = c.sync(GatewayReport(name="a", demand={"openai/*": 3}, usd=0.6))
    assert a.shares["openai/*"] + b.shares["openai/*"] == pytest.approx(1.0)
    assert a.run_usd == pytest.approx(0.9) and c.signal() is None
    c.sync(GatewayReport(name="b", demand={}, usd=0.45))
    assert c.signal().startswith("run budget reached: the run has spent $1.0500 of its $1 cap")
    now[0] = 100.0  # b went silent: a holds the whole limit again
    assert c.sync(GatewayReport(name="a", demand={"openai/*": 1}, usd=0.6)).shares == {"openai/*": 1.0}


# -- keys and the agent's environment ------------------------------------------------------------


def test_virtual_keys_are_checked_without_a_table_and_worthless_when_forged():
    keys = VirtualKeys(b"s" * 32, "run1")
    k = keys.issue("w001")
    assert keys.worker_of(k) == "w001"
    assert keys.worker_of(k.replace("w001", "w002")) is None
    assert VirtualKeys(b"t" * 32, "run1").worker_of(k) is None
    assert VirtualKeys(b"s" * 32, "run2").worker_of(k) is None
    assert keys.worker_of("sk-real-key") is None and keys.worker_of(None) is None
    for bad in (k[:-1] + "é", k[:-2] + "\udcc3\udca9", k.upper(), k + "0", k[:-1], "agensh-" + k[-32:], "agensh--"):
        assert keys.worker_of(bad) is None, bad  # malformed: refused, never raised on (hmac.compare_digest)
    assert presented_key({"authorization": f"Bearer {k}"}) == k
    assert presented_key({"x-api-key": k}) == k
    assert presented_key({}, f"alt=sse&key={k}") == k


def test_through_the_gateway_an_agent_gets_no_real_credential(tmp_path, monkeypatch):
    sentinel = "sk-REAL-sentinel-4f1c9e"
    monkeypatch.setenv("COPILOT_PROVIDER_BASE_URL", "https://models.example/v1")
    monkeypatch.setenv("COPILOT_PROVIDER_API_KEY", sentinel)
    monkeypatch.setenv("COPILOT_GITHUB_TOKEN", sentinel + "-gh")
    monkeypatch.setenv("COPILOT_MODEL", "gpt-4.1")
    h = get_harness("copilot")
    gw = GatewayEndpoint(url="http://127.0.0.1:9/openai", key="agensh-w001-" + "0" * 32)
    env = h.environment(tmp_path / "home", {}, secrets={}, gateway=gw)
    assert sentinel not in json.dumps(env)
    assert env["COPILOT_PROVIDER_BASE_URL"] == gw.url and env["COPILOT_PROVIDER_API_KEY"] == gw.key
    assert env["COPILOT_MODEL"] == "gpt-4.1" and env["COPILOT_OFFLINE"] == "true"
    direct = h.environment(tmp_path / "home", {}, secrets={})
    assert direct["COPILOT_PROVIDER_API_KEY"] == sentinel  # without the gateway: as before
    route = h.model_route
    assert route.applies(dict(COPILOT_PROVIDER_BASE_URL="http://x/v1")) == (True, "")
    assert not route.applies({"COPILOT_GITHUB_TOKEN": "t"})[0]
    assert get_harness("claude").model_route.applies({"ANTHROPIC_API_KEY": "k"})[0]
    off, why = get_harness("claude").model_route.applies({"ANTHROPIC_API_KEY": "k", "CLAUDE_CODE_USE_BEDROCK": "1"})
    assert not off and "CLAUDE_CODE_USE_BEDROCK" in why


# -- the cost question over llm_calls ------------------------------------------------------------


def test_cost_sql_takes_the_gateways_count_when_the_run_has_llm_calls(tmp_path):
    from agensh_ray.analysis.views import connect, run_query
    from agensh_ray.trace import LifecycleRow, LlmCallRow, TraceWriter, UsageRow, write_schema_files

    write_schema_files(tmp_path)
    (tmp_path / "config.json").write_text(RunConfig(harness="copilot", workers=2).model_dump_json())
    t = TraceWriter(tmp_path, "t", "r1", flush_interval_s=0)
    for w in ("w001", "w002"):
        t.write(LifecycleRow(worker_id=w, event="started"))
    t.write(UsageRow(worker_id="w001", turn=1, input_tokens=10**9, output_tokens=10**9))  # the agent's claim: ignored
    for w, i, o, usd in (("w001", 100, 10, 0.25), ("w001", 50, 5, None), ("w002", 7, 3, 0.5)):
        t.write(LlmCallRow(worker_id=w, gateway="n1", provider="openai", api="chat", model="gpt-4.1", status="ok",
                           input_tokens=i, output_tokens=o, cost_usd=usd, latency_ms=1.0))
    t.close()
    cols, rows = run_query(connect(tmp_path), "cost")
    got = {(r[cols.index("level")], r[cols.index("worker_id")]): r for r in rows}
    run = got[("run", None)]
    assert (run[cols.index("input_tokens")], run[cols.index("output_tokens")]) == (157, 18)
    # one call has no price: the cost is unknown (never $0 for it), the known part and the unpriced calls shown
    assert run[cols.index("cost_usd")] is None and run[cols.index("cost_basis")] == "partial"
    assert run[cols.index("known_cost_usd")] == pytest.approx(0.75)
    assert (run[cols.index("calls")], run[cols.index("unpriced_calls")]) == (3, 1)
    w1 = got[("worker", "w001")]
    assert (w1[cols.index("input_tokens")], w1[cols.index("cost_usd")]) == (150, None)
    assert w1[cols.index("known_cost_usd")] == pytest.approx(0.25)
    w2 = got[("worker", "w002")]
    assert (w2[cols.index("cost_usd")], w2[cols.index("cost_basis")]) == (pytest.approx(0.5), "gateway")
