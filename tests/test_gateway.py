"""The model gateway over real loopback HTTP, in-process: agents' requests (httpx, as a CLI would
send them) through `GatewayServer` to the bundled fake providers, with their failure modes; the
`llm_calls` rows checked against the fake's own record of what it received and answered."""

from __future__ import annotations

import asyncio
import json

import httpx
import pyarrow.parquet as pq
import pytest

from agensh_ray.agent.harness import get_harness
from agensh_ray.config import BudgetConfig, GatewayConfig, ModelLimit, RetryConfig
from agensh_ray.fakes.anthropic_server import FakeAnthropic
from agensh_ray.fakes.faults import FaultSchedule
from agensh_ray.fakes.openai_server import FakeOpenAI
from agensh_ray.fakes.script import Script, Step, Turn
from agensh_ray.models import now_us
from agensh_ray.services.gateway import Gateway, GatewayServer, PriceTable, VirtualKeys, upstream_of
from agensh_ray.trace import TraceWriter
from tests.support import await_for

REAL = "sk-REAL-sentinel-9c1e77d0"
FAST = RetryConfig(max_attempts=5, give_up_s=30, base_s=0.01, max_wait_s=0.5, jitter=0.1)
TOOLS = [{"type": "function", "function": {"name": "agensh-board_read", "parameters": {}}}]


def chat(worker: str, stream: bool = True, usage: bool = True) -> dict:
    body = {"model": "gpt-4.1", "stream": stream, "tools": TOOLS,
            "messages": [{"role": "user", "content": f"worker id: {worker}\ngo"}]}
    if stream and usage:
        body["stream_options"] = {"include_usage": True}
    return body


def events(text: str) -> list[dict]:
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ") and "[DONE]" not in line]


class Rig:
    """A fake provider behind a gateway; `post` sends as worker w's agent would."""

    def __init__(self, tmp_path, fake, cfg: GatewayConfig, harness: str = "copilot"):
        self.fake = fake
        self.tmp = tmp_path
        route = get_harness(harness).model_route
        src = {route.url_var: fake.url, route.key_vars[0][0]: REAL}
        self.trace = TraceWriter(tmp_path, "gw", "test-run", flush_interval_s=0)
        self.keys = VirtualKeys(b"k" * 32, "test-run")
        self.gw = Gateway(cfg, self.keys, {route.provider: upstream_of(route, src)}, PriceTable(), route=route,
                          trace=self.trace, name="n1")
        self.server = GatewayServer(self.gw)
        self.route = route

    async def __aenter__(self):
        await self.server.start()
        self.base = self.gw.endpoint(["w001"])["w001"].url
        self.http = httpx.AsyncClient(timeout=30)
        return self

    async def __aexit__(self, *exc):
        await self.http.aclose()
        await self.server.close()
        self.trace.close()

    def headers(self, worker: str) -> dict:
        key = self.keys.issue(worker)
        if self.route.provider == "anthropic":
            return {"x-api-key": key, "anthropic-version": "2023-06-01"}
        return {"authorization": f"Bearer {key}"}

    async def post(self, worker: str, body: dict, path: str = "/chat/completions") -> httpx.Response:
        return await self.http.post(self.base + path, json=body, headers=self.headers(worker))

    def rows(self) -> list[dict]:
        self.trace.flush()
        out = []
        for f in sorted((self.tmp / "trace" / "llm_calls").glob("*.parquet")):
            out += pq.read_table(f).to_pylist()
        return out


@pytest.fixture
def openai_fake():
    made = []

    def make(script: Script, **kw) -> FakeOpenAI:
        f = FakeOpenAI(script, api_key=REAL, **kw)
        f.start()
        made.append(f)
        return f

    yield make
    for f in made:
        f.close()


SAY = Script(workers={"*": [Turn(steps=[Step(say="hello from the fake model, streamed in pieces")])]})


async def test_a_stream_passes_through_unchanged_and_is_counted_as_the_provider_counted_it(openai_fake, tmp_path):
    fake = openai_fake(SAY, faults=FaultSchedule(chunks=4))
    direct = httpx.post(fake.url + "/chat/completions", json=chat("w001"), headers={"authorization": f"Bearer {REAL}"})
    async with Rig(tmp_path, fake, GatewayConfig(retry=FAST)) as rig:
        via = await rig.post("w001", chat("w001"))
        plain = await rig.post("w001", chat("w001", stream=False))
        no_usage = await rig.post("w001", chat("w001", usage=False))
        models = await rig.http.get(rig.base + "/models", headers=rig.headers("w001"))
    assert via.status_code == 200 and via.headers["content-type"] == "text/event-stream"
    assert [e["choices"] for e in events(via.text)] == [e["choices"] for e in events(direct.text)]
    assert "".join(e["choices"][0]["delta"].get("content") or "" for e in events(via.text) if e["choices"]) == \
        "hello from the fake model, streamed in pieces"
    assert plain.json()["choices"][0]["message"]["content"] == "hello from the fake model, streamed in pieces"
    # The agent did not ask for usage: the gateway did, and took the usage chunk out again.
    assert not any("usage" in e for e in events(no_usage.text)) and no_usage.text.endswith("data: [DONE]\n\n")
    assert fake.requests[-1].body["stream_options"] == {"include_usage": True}
    assert models.json()["data"][0]["id"] == "gpt-4.1"  # a side route passes through, uncounted
    rows = rig.rows()
    assert [r["status"] for r in rows] == ["ok", "ok", "ok"] and all(r["worker_id"] == "w001" for r in rows)
    answered = [r for r in fake.requests if r.status == 200][1:]  # the first was the direct call
    assert [(r["input_tokens"], r["output_tokens"]) for r in rows] == \
        [(f.usage["input"], f.usage["output"]) for f in answered]
    price = PriceTable()
    assert rows[0]["cost_usd"] == pytest.approx(
        rows[0]["input_tokens"] * 2e-6 + rows[0]["output_tokens"] * 8e-6)  # gpt-4.1 in LiteLLM's map
    assert price.entry("openai", rows[0]["model_used"]) is not None
    assert all(f.key == REAL for f in fake.requests)  # the provider only ever saw the real key
    assert [r["stream"] for r in rows] == [True, False, True] and rows[0]["ttfb_ms"] > 0


async def test_a_429_storm_is_retried_after_retry_after_and_the_agent_sees_no_error(openai_fake, tmp_path):
    script = Script(workers={"*": [Turn(steps=[Step(say="made it", fail=[429, 429, 529, 500], retry_after=0.05)])]})
    fake = openai_fake(script)
    async with Rig(tmp_path, fake, GatewayConfig(retry=FAST)) as rig:
        resp = await rig.post("w001", chat("w001"))
        report = rig.gw.turn_report("w001", 0)
    assert resp.status_code == 200 and "made it" in resp.text
    (row,) = rig.rows()
    assert (row["status"], row["retries"], row["retry_statuses"]) == ("ok", 4, "429,429,529,500")
    assert [r.status for r in fake.requests] == [429, 429, 529, 500, 200]
    assert row["latency_ms"] >= 100  # two Retry-After waits of 50 ms at least
    assert report.calls == 1 and report.failed == 0 and report.budget is None


async def test_the_providers_rate_limit_paces_calls_without_spending_their_attempts(openai_fake, tmp_path):
    """Twelve calls at once against a provider that takes 2 a second (no limit told to the gateway): each
    429 saying the limit is used up pauses the lane for the provider's Retry-After; the calls it sends
    back spend no attempt, so the last of them, refused more often than max_attempts (5), still gets
    its answer."""
    fake = openai_fake(SAY, faults=FaultSchedule(rate_limit_rpm=120))
    async with Rig(tmp_path, fake, GatewayConfig(retry=FAST)) as rig:
        answers = await asyncio.gather(*(rig.post(f"w{i:03d}", chat(f"w{i:03d}")) for i in range(1, 13)))
    assert [a.status_code for a in answers] == [200] * 12
    rows = rig.rows()
    assert len(rows) == 12 and {r["status"] for r in rows} == {"ok"}, rows
    assert sum(r.status == 429 for r in fake.requests) >= 6  # the limit refused the early arrivals
    assert max(r["retries"] for r in rows) >= FAST.max_attempts, [r["retries"] for r in rows]


async def test_a_dead_provider_is_given_up_on_with_its_own_error_and_the_turn_report_says_so(openai_fake, tmp_path):
    fake = openai_fake(SAY, faults=FaultSchedule(error_rate=1.0, error_status=500))
    async with Rig(tmp_path, fake, GatewayConfig(retry=FAST)) as rig:
        resp = await rig.post("w001", chat("w001"))
        report = rig.gw.turn_report("w001", 0)
    assert resp.status_code == 500 and resp.json()["error"]["message"] == "injected failure 500"
    (row,) = rig.rows()
    assert (row["status"], row["http_status"], row["retries"]) == ("gave_up", 500, 4)
    assert len(fake.requests) == 5
    assert report.failed == 1 and report.last_failed
    assert "answered 500: injected failure 500 (gave up after 5 attempts)" in report.error


async def test_after_a_give_up_the_workers_calls_are_refused_at_once_until_its_turn_ends(openai_fake, tmp_path):
    """A CLI that retries on its own after the give-up (ignoring x-should-retry) is refused at once, without
    reaching the provider, and counted; another worker is not; the final turn report lifts it."""
    fake = openai_fake(SAY, faults=FaultSchedule(error_rate=1.0, error_status=500))
    async with Rig(tmp_path, fake, GatewayConfig(retry=RetryConfig(max_attempts=2, base_s=0.01))) as rig:
        first = await rig.post("w001", chat("w001"))
        again = [await rig.post("w001", chat("w001")) for _ in range(3)]
        other = await rig.post("w002", chat("w002"))
        mid = rig.gw.turn_report("w001", 0)
        final = rig.gw.turn_report("w001", 0, final=True)
        after = await rig.post("w001", chat("w001"))  # its next turn: the provider again
    assert first.status_code == 500 and first.headers["x-should-retry"] == "false"
    assert {r.status_code for r in again} == {403} and {r.headers["x-should-retry"] for r in again} == {"false"}
    assert again[0].json()["error"]["message"].startswith("agensh gateway: refused at once: the gateway gave up")
    assert other.status_code == 500 and after.status_code == 500
    assert len(fake.requests) == 2 + 2 + 2  # w001's first call, w002's, w001's next turn: 2 attempts each
    assert (mid.gave_up is not None, mid.refused_after_give_up, mid.failed, mid.calls) == (True, 3, 4, 4)
    assert "(gave up after 2 attempts)" in mid.gave_up and final.refused_after_give_up == 3
    assert rig.gw.turn_report("w001", 0).gave_up is not None  # `after` gave up again: a new give-up
    statuses = [r["status"] for r in rig.rows()]
    assert statuses == ["gave_up", "refused", "refused", "refused", "gave_up", "gave_up"]
    assert rig.gw.status()["refused_after_give_up"] == 3


async def test_a_give_up_whose_final_report_never_came_does_not_refuse_the_next_turn(openai_fake, tmp_path):
    """The turn that met the give-up ended without its final report reaching the gateway (the host died, the call
    failed): the next turn's report at its start (agensh_ray/worker/turns.py asks with the turn's start time) drops
    the older give-up, and that turn's first call reaches the provider instead of a 403."""
    fake = openai_fake(SAY, faults=FaultSchedule(error_rate=1.0, error_status=500))
    async with Rig(tmp_path, fake, GatewayConfig(retry=RetryConfig(max_attempts=2, base_s=0.01))) as rig:
        first = await rig.post("w001", chat("w001"))
        assert rig.gw.turn_report("w001", 0).gave_up is not None
        start = rig.gw.turn_report("w001", now_us() + 1)  # the next turn begins
        after = await rig.post("w001", chat("w001"))
    assert first.status_code == 500 and start.gave_up is None
    assert after.status_code == 500 and len(fake.requests) == 2 + 2  # the provider again, not refused at once


async def test_a_stream_cut_mid_way_is_cut_for_the_agent_too_and_recorded(openai_fake, tmp_path):
    script = Script(workers={"*": [Turn(steps=[Step(say="a long answer that breaks", cut=1)])]})
    fake = openai_fake(script, faults=FaultSchedule(chunks=6))
    async with Rig(tmp_path, fake, GatewayConfig(retry=FAST)) as rig:
        with pytest.raises(httpx.RemoteProtocolError):
            await rig.post("w001", chat("w001"))
        again = await rig.post("w001", chat("w001"))  # the agent's own retry
    assert again.status_code == 200
    rows = rig.rows()
    assert [r["status"] for r in rows] == ["cut", "ok"] and "cut mid-way" in rows[0]["error"]
    assert [r.cut for r in fake.requests] == [True, False]


async def test_a_worker_at_its_budget_is_refused_while_the_others_go_on(openai_fake, tmp_path):
    fake = openai_fake(SAY)
    cfg = GatewayConfig(retry=FAST, budget=BudgetConfig(worker_tokens=10))
    async with Rig(tmp_path, fake, cfg) as rig:
        first = await rig.post("w001", chat("w001"))  # crosses the cap: completes
        refused = await rig.post("w001", chat("w001"))
        other = await rig.post("w002", chat("w002"))
        report = rig.gw.turn_report("w001", 0)
    assert first.status_code == 200 and other.status_code == 200
    assert refused.status_code == 403
    assert refused.json()["error"]["message"].startswith("agensh gateway: budget reached: worker w001 has used")
    assert report.budget and report.budget.startswith("budget reached: worker w001")
    assert [r["status"] for r in rig.rows()] == ["ok", "refused", "ok"]
    assert len(fake.requests) == 2  # the refused call never reached the provider


async def test_unknown_keys_are_refused_and_the_agents_key_never_reaches_the_provider(openai_fake, tmp_path):
    fake = openai_fake(SAY)
    async with Rig(tmp_path, fake, GatewayConfig(retry=FAST)) as rig:
        for key in (REAL, "agensh-w001-" + "0" * 32, None):
            r = await rig.http.post(rig.base + "/chat/completions", json=chat("w001"),
                                    headers={"authorization": f"Bearer {key}"} if key else {})
            assert r.status_code == 401 and "unknown key" in r.text
        ok = await rig.post("w001", chat("w001"))
    assert ok.status_code == 200 and [f.key for f in fake.requests] == [REAL]
    assert rig.rows()[0]["status"] == "ok"


MAC = "0" * 31  # a virtual key's MAC is 32 hex digits; each malformed key below has one that is not


@pytest.mark.security
async def test_every_malformed_key_gets_401_never_a_500(openai_fake, tmp_path):
    """Keys as a hostile agent may send them, in a header (raw bytes: not ASCII, not UTF-8; a control character
    there is aiohttp's 400 before the gateway sees it) or in `?key=` (percent-encoded, controls too): a non-ASCII
    MAC made `hmac.compare_digest` raise, and the agent got a 500."""
    fake = openai_fake(SAY)
    headers = [b"agensh-w001-" + MAC.encode() + b"\xc3\xa9", b"agensh-w001-\xe9" * 3,
               b"agensh-w001-\xff\xfe" + b"0" * 30, b"agensh-w\xc3\xa9-" + MAC.encode() + b"0", b"agensh-w001-",
               b"agensh--", b"agensh-", b"agensh-w001", b"agensh-w001-" + b"0" * 4000,
               "agensh-w001-".encode() + "é".encode() * 32]
    queries = ["agensh-w001-" + MAC + "%C3%A9", "agensh-w001-%FF%FE" + "0" * 30, "agensh-w001-%00" + MAC,
               "agensh-%01-" + "0" * 32, "agensh-%E2%80%AE-" + "0" * 32, "agensh-w001-" + "%C3%A9" * 32]
    async with Rig(tmp_path, fake, GatewayConfig(retry=FAST)) as rig:
        got = []
        for key in headers:
            for name in ("authorization", "x-api-key", "api-key"):
                value = b"Bearer " + key if name == "authorization" else key
                r = await rig.http.post(rig.base + "/chat/completions", json=chat("w001"), headers={name: value})
                got.append((name, key, r.status_code, "unknown key" in r.text))
        for key in queries:
            r = await rig.http.post(rig.base + "/chat/completions?key=" + key, json=chat("w001"))
            got.append(("?key=", key, r.status_code, "unknown key" in r.text))
        ok = await rig.post("w001", chat("w001"))
    assert [g for g in got if g[2:] != (401, True)] == []
    assert ok.status_code == 200 and len(fake.requests) == 1  # no malformed key reached the provider


async def test_a_call_waiting_for_room_is_cancelled_when_its_agent_hangs_up(openai_fake, tmp_path):
    script = Script(workers={"*": [Turn(steps=[Step(say="held", gate="hold")])]})
    fake = openai_fake(script)
    cfg = GatewayConfig(retry=FAST, limits={"openai/*": ModelLimit(max_streams=1)})
    async with Rig(tmp_path, fake, cfg) as rig:
        first = asyncio.create_task(rig.post("w001", chat("w001")))
        assert await asyncio.to_thread(fake.wait_held, "hold", 10)
        with pytest.raises(httpx.ReadTimeout):
            await rig.http.post(rig.base + "/chat/completions", json=chat("w002"), headers=rig.headers("w002"),
                                timeout=0.3)
        await await_for(lambda: rig.gw.counts["client_gone"] == 1, 10, "the queued call to be cancelled")
        assert rig.gw.status()["waiting"] == 0
        fake.open_gate("hold")
        assert (await first).status_code == 200
    rows = rig.rows()
    assert sorted((r["worker_id"], r["status"]) for r in rows) == [("w001", "ok"), ("w002", "client_gone")]
    assert len(fake.requests) == 1


async def test_anthropic_messages_stream_through_with_cache_tokens_and_an_overload_retried(tmp_path):
    script = Script(workers={"*": [Turn(steps=[Step(say="bonjour", fail=[529], retry_after=0.05)])]})
    fake = FakeAnthropic(script, api_key=REAL)
    fake.start()
    body = {"model": "claude-sonnet-4-5-20250929", "max_tokens": 100, "stream": True,
            "tools": [{"name": "agensh-board_read", "input_schema": {"type": "object"}}],
            "messages": [{"role": "user", "content": "worker id: w001\ngo"}]}
    try:
        async with Rig(tmp_path, fake, GatewayConfig(retry=FAST), harness="claude") as rig:
            resp = await rig.post("w001", body, path="/v1/messages")
    finally:
        fake.close()
    assert resp.status_code == 200
    kinds = [e["type"] for e in events(resp.text)]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    (row,) = rig.rows()
    assert (row["status"], row["retry_statuses"], row["provider"], row["api"]) == ("ok", "529", "anthropic", "messages")
    assert (row["input_tokens"], row["output_tokens"]) == (fake.requests[-1].usage["input"],
                                                            fake.requests[-1].usage["output"])
    assert row["cost_usd"] == pytest.approx(row["input_tokens"] * 3e-6 + row["output_tokens"] * 1.5e-5)


async def test_an_unpriced_model_costs_unknown_on_the_progress_line_and_in_the_summary_never_zero(openai_fake,
                                                                                                   tmp_path):
    from agensh_ray.driver.health import gateway_cost_summary, gateway_cost_text
    from agensh_ray.driver.summary import gateway_cost_line

    fake = openai_fake(SAY)
    async with Rig(tmp_path, fake, GatewayConfig(retry=FAST)) as rig:
        priced = await rig.post("w001", chat("w001"))
        unpriced = await rig.post("w001", {**chat("w001"), "model": "house-model-without-a-price"})
        both = rig.gw.status()
    assert priced.status_code == unpriced.status_code == 200
    rows = rig.rows()
    assert [r["status"] for r in rows] == ["ok", "ok"] and rows[1]["input_tokens"] > 0 and rows[1]["cost_usd"] is None
    assert both["cost_unknown"] == 1 and both["usd"] == pytest.approx(rows[0]["cost_usd"])
    assert gateway_cost_text(both) == f"${rows[0]['cost_usd']:.2f} + unknown (1 calls unpriced)"
    s = {"model_calls": 2, **gateway_cost_summary(both)}
    assert s["model_cost_usd"] is None and s["model_cost_usd_known"] == pytest.approx(rows[0]["cost_usd"])
    assert gateway_cost_line(s).startswith(f"${rows[0]['cost_usd']:.4f} + unknown (1 calls unpriced")
    only = {"calls": 1, "ok": 1, "usd": 0.0, "cost_unknown": 1}  # a run whose only model has no price
    assert gateway_cost_text(only) == "cost unknown (1 calls unpriced)"
    assert gateway_cost_summary(only)["model_cost_usd"] is None
    assert gateway_cost_text({"calls": 1, "ok": 1, "usd": 0.0}) == "$0.00"  # priced, and free: that is $0


def test_a_dollar_budget_for_a_model_with_no_price_is_refused_at_start(tmp_path):
    from agensh_ray.config import RunConfig
    from agensh_ray.services.gateway import unpriced_budget

    def cfg(model, **kw):
        return RunConfig(harness="copilot", model=model, gateway=GatewayConfig(**kw))

    problem = unpriced_budget(cfg("house-model", budget=BudgetConfig(run_usd=5)))
    assert problem.startswith("--budget-run-usd 5: the model 'house-model' (openai) has no price in LiteLLM's "
                              "price map")
    assert "--prices FILE" in problem and "--budget-run-tokens" in problem
    assert unpriced_budget(cfg("house-model", budget=BudgetConfig(run_tokens=5000))) is None  # tokens count anyway
    assert unpriced_budget(cfg("gpt-4.1", budget=BudgetConfig(worker_usd=1))) is None
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"house-model": {"input_cost_per_token": 1e-6, "output_cost_per_token": 2e-6}}))
    assert unpriced_budget(cfg("house-model", budget=BudgetConfig(worker_usd=1), prices=prices)) is None


async def hang_up_after(rig: Rig, body: dict, path: str, marker: str) -> list[str]:
    """Read the streamed answer as a client that stops at `marker` (the lines it read, then it closes the
    connection), and wait for the call's row."""
    seen: list[str] = []
    async with rig.http.stream("POST", rig.base + path, json=body, headers=rig.headers("w001")) as r:
        assert r.status_code == 200
        async for line in r.aiter_lines():
            seen.append(line)
            if marker in line:
                break
    await await_for(lambda: rig.gw.counts["calls"] >= 1, 10, "the call's row")
    return seen


async def test_a_client_that_hangs_up_once_its_answer_is_whole_was_answered(openai_fake, tmp_path):
    """As the CLIs' SDKs do: they close after the answer's last event, before the usage chunk, `[DONE]`,
    `message_stop` or the body's end. The gateway judges by what the client received, per protocol."""
    slow = FaultSchedule(chunk_delay_s=0.5)  # the fake pauses before each event: the hang-up falls in a pause
    fake = openai_fake(SAY, faults=slow)
    async with Rig(tmp_path / "chat", fake, GatewayConfig(retry=FAST)) as rig:
        seen = await hang_up_after(rig, chat("w001"), "/chat/completions", '"finish_reason": "stop"')
    assert not any("[DONE]" in line for line in seen)
    (row,) = rig.rows()
    assert (row["status"], row["error"]) == ("ok", None)  # not client_gone: the agent had its answer

    async with Rig(tmp_path / "early", fake, GatewayConfig(retry=FAST)) as rig:  # mid-answer: it did not
        await hang_up_after(rig, chat("w001"), "/chat/completions", '"content"')
    (row,) = rig.rows()
    assert row["status"] == "client_gone" and row["error"].startswith("the agent hung up before the answer")

    anthropic = FakeAnthropic(Script(workers={"*": [Turn(steps=[Step(say="bonjour")])]}), api_key=REAL,
                              faults=slow)
    anthropic.start()
    body = {"model": "claude-sonnet-4-5-20250929", "max_tokens": 100, "stream": True,
            "messages": [{"role": "user", "content": "worker id: w001\ngo"}]}
    try:
        async with Rig(tmp_path / "messages", anthropic, GatewayConfig(retry=FAST), harness="claude") as rig:
            seen = await hang_up_after(rig, body, "/v1/messages", '"stop_reason": "end_turn"')
    finally:
        anthropic.close()
    assert not any("message_stop" in line for line in seen)
    (row,) = rig.rows()
    assert (row["status"], row["output_tokens"]) == ("ok", anthropic.requests[-1].usage["output"])
