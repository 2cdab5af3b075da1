"""The real agent CLIs through the model gateway: a real WorkerHost whose agents get the gateway's
URL and a virtual key, the gateway (the plain class and its HTTP front, in-process) holding the
"real" key of the bundled fake provider, which insists on it. A sentinel value stands for the
real key: it must reach the provider and nothing an agent can see.

Each test skips, saying how to install, when its CLI is missing.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

import pytest

from agensh_ray.agent.harness import get_harness
from agensh_ray.config import BudgetConfig, GatewayConfig, RetryConfig, RunConfig
from agensh_ray.fakes.anthropic_server import FakeAnthropic
from agensh_ray.fakes.faults import FaultSchedule
from agensh_ray.fakes.gemini_server import FakeGemini
from agensh_ray.fakes.openai_server import FakeOpenAI
from agensh_ray.fakes.script import Script, Step, Turn
from agensh_ray.services.gateway import GatewayServer, make_gateway
from tests.support import Awaited, LocalServices, await_for
from tests.test_real_agents import need, table

pytestmark = [pytest.mark.real_agent, pytest.mark.timeout(300)]

WORKERS = ["w001", "w002"]
SENTINEL = "sk-REAL-provider-key-sentinel-5e0f2b9a"
FAST = RetryConfig(max_attempts=6, give_up_s=60, base_s=0.05, max_wait_s=1.0, jitter=0.2)


@pytest.fixture
def services(tmp_path, git_env):
    s = LocalServices(tmp_path / "svc", WORKERS)
    yield s
    s.close()


class Rig:
    """The fake provider, the gateway in front of it, and a host whose agents go through the gateway."""

    def __init__(self, services, tmp_path, harness: str, fake, gateway: GatewayConfig):
        self.services, self.fake = services, fake
        self.run_dir = tmp_path / "run"
        cfg = RunConfig(workers=len(WORKERS), harness=harness, gateway=gateway.model_copy(update={"enabled": True}))
        self.gateway = make_gateway(cfg, self.run_dir, "test-run", secrets.token_bytes(32), "n1")
        self.server = GatewayServer(self.gateway)
        services.gateway = Awaited(self.gateway)
        self.host = services.host(self.run_dir, WORKERS, harness=harness, gateway=cfg.gateway)

    async def __aenter__(self):
        await self.server.start()
        await self.host.start()
        return self

    async def __aexit__(self, *exc):
        try:
            await self.host.stop()
        finally:
            await self.server.close()
            self.gateway.trace.close()
            self.fake.close()

    def calls(self) -> list[dict]:
        return table(self.run_dir, "llm_calls")


def no_sentinel_anywhere(rig: Rig, pid: int | None) -> None:
    """The real key is in none of what an agent could read or leave: its process environment, its HOME,
    its clone, the logs, the trace."""
    if pid is not None:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
        assert SENTINEL.encode() not in environ and b"agensh-w0" in environ  # the virtual key is what it holds
    for w in rig.host.workers.values():
        assert SENTINEL not in json.dumps(w.session.env if w.session else {})
        for root in (w.home, w.workdir):
            for f in root.rglob("*"):
                if f.is_file() and not f.is_symlink():
                    assert SENTINEL.encode() not in f.read_bytes(), f
    for f in rig.run_dir.rglob("*"):
        if f.is_file():
            assert SENTINEL.encode() not in f.read_bytes(), f


def rows_match_the_providers_log(rig: Rig) -> None:
    """One llm_calls row per call the agent made; the provider's answered requests are each row's last try,
    with the tokens it reported; every try carried the real key."""
    rows = sorted(rig.calls(), key=lambda r: r["ts"])
    got = rig.fake.requests
    assert all(r.key == SENTINEL for r in got)
    assert sum(1 + r["retries"] for r in rows if r["status"] != "refused") == len(got)
    answered = [r for r in got if r.status == 200]
    ok = [r for r in rows if r["status"] == "ok"]
    assert len(ok) == len(answered)
    assert sorted((r["input_tokens"], r["output_tokens"]) for r in ok) == \
        sorted((a.usage["input"], a.usage["output"]) for a in answered)
    assert all(r["cost_usd"] is not None and r["cost_usd"] > 0 for r in ok)


async def test_copilot_turn_through_the_gateway_absorbs_a_429_storm_and_sees_no_real_key(
    services, tmp_path, monkeypatch
):
    need("copilot")
    script = Script(workers={"w001": [Turn(steps=[
        Step(tool="board_write", args={"type": "FACT", "text": "copilot reached the board through the gateway"},
             fail=[429, 429, 429], retry_after=0.2),
        Step(say="Done."),
    ])]})
    fake = FakeOpenAI(script, api_key=SENTINEL)
    monkeypatch.setenv("COPILOT_PROVIDER_BASE_URL", fake.start())
    monkeypatch.setenv("COPILOT_PROVIDER_API_KEY", SENTINEL)
    monkeypatch.setenv("COPILOT_MODEL", "gpt-4.1")
    monkeypatch.delenv("COPILOT_OFFLINE", raising=False)  # the gateway's route sets it for the agent
    async with Rig(services, tmp_path, "copilot", fake, GatewayConfig(retry=FAST)) as rig:
        w = rig.host.workers["w001"]
        await rig.host.launch("w001")
        await await_for(lambda: w.turn >= 1 and not w.in_turn, 180, "the turn to end")
        no_sentinel_anywhere(rig, w.session.pid)
    assert [(e.type.value, e.text) for e in services.board_plain.recent()] == [
        ("FACT", "copilot reached the board through the gateway")]
    turns = table(rig.run_dir, "turns")
    assert [t["stop_reason"] for t in turns if t["phase"] == "end"] == ["end_turn"]
    assert not [r for r in table(rig.run_dir, "lifecycle") if r["event"] == "turn_error"]
    rows = rig.calls()
    stormed = [r for r in rows if r["retries"]]
    assert len(stormed) == 1 and stormed[0]["retry_statuses"] == "429,429,429" and stormed[0]["status"] == "ok"
    assert all(r["status"] == "ok" and r["worker_id"] == "w001" and r["model"] == "gpt-4.1" for r in rows)
    # The agent never saw the storm: it asked for that step once, the gateway tried it four times.
    step0 = [r for r in fake.requests if r.worker == "w001" and r.turn == 0 and r.step == 0]
    assert [r.status for r in step0] == [429, 429, 429, 200]
    rows_match_the_providers_log(rig)
    no_sentinel_anywhere(rig, None)


async def test_claude_code_turn_through_the_gateway(services, tmp_path, monkeypatch):
    need("claude")
    script = Script(workers={"*": [Turn(steps=[
        Step(tool="board_write", args={"type": "FACT", "text": "claude code reached the board through the gateway"},
             fail=[529], retry_after=0.2),
        Step(say="Done."),
    ])]})
    fake = FakeAnthropic(script, api_key=SENTINEL)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.start())
    monkeypatch.setenv("ANTHROPIC_API_KEY", SENTINEL)
    async with Rig(services, tmp_path, "claude", fake, GatewayConfig(retry=FAST)) as rig:
        w = rig.host.workers["w001"]
        await rig.host.launch("w001")
        await await_for(lambda: w.turn >= 1 and not w.in_turn, 180, "the turn to end")
        no_sentinel_anywhere(rig, w.session.pid)
    assert [(e.type.value, e.text) for e in services.board_plain.recent()] == [
        ("FACT", "claude code reached the board through the gateway")]
    assert w.crashed == 0 and not [r for r in table(rig.run_dir, "lifecycle") if r["event"] == "turn_error"]
    rows = rig.calls()
    assert {(r["provider"], r["api"]) for r in rows} == {("anthropic", "messages")}
    assert [r["retry_statuses"] for r in rows if r["retries"]] == ["529"]
    rows_match_the_providers_log(rig)
    no_sentinel_anywhere(rig, None)


async def test_a_worker_over_its_budget_is_stopped_and_its_claim_released_while_another_goes_on(
    services, tmp_path, monkeypatch
):
    need("copilot")
    long = "I have thought about this at length. " * 110  # ~1,000 output tokens, at $1 a token: over the cap
    script = Script(workers={
        "w001": [Turn(steps=[
            Step(tool="board_write", args={"type": "CLAIM", "text": "claim upper: textkit/commands/upper.py"}),
            # This answer crosses the cap: it completes (its tool call runs); the next call is refused.
            Step(say=long, tool="board_write", args={"type": "OBSERVED", "text": "the call that crossed the cap"}),
            Step(say="unreachable: refused at the cap"),
        ])],
        "w002": [Turn(steps=[
            Step(tool="board_write", args={"type": "FACT", "text": "w002 works on after w001 was stopped"}),
            Step(say="Done."),
        ])],
    })
    prices = tmp_path / "prices.json"  # output tokens at $1 each, input free: the cap falls on the long answer
    prices.write_text(json.dumps({"gpt-4.1": {"input_cost_per_token": 0.0, "output_cost_per_token": 1.0}}))
    fake = FakeOpenAI(script, api_key=SENTINEL)
    monkeypatch.setenv("COPILOT_PROVIDER_BASE_URL", fake.start())
    monkeypatch.setenv("COPILOT_PROVIDER_API_KEY", SENTINEL)
    monkeypatch.setenv("COPILOT_MODEL", "gpt-4.1")
    cfg = GatewayConfig(retry=FAST, budget=BudgetConfig(worker_usd=500.0), prices=prices)
    async with Rig(services, tmp_path, "copilot", fake, cfg) as rig:
        w1, w2 = rig.host.workers["w001"], rig.host.workers["w002"]
        await rig.host.launch("w001")
        await await_for(lambda: w1.stopped, 180, "w001 to be stopped at its budget")
        await rig.host.launch("w002")
        await await_for(lambda: w2.turn >= 1 and not w2.in_turn, 180, "w002's turn to end")
        status = rig.host.status()
        assert not w2.stopped  # it goes on
    assert status["budget_stopped"] == 1 and w2.stop_reason is None
    life = [(r["worker_id"], r["event"], r["detail"]) for r in table(rig.run_dir, "lifecycle")]
    stop = [d for wid, e, d in life if wid == "w001" and e == "stopped"]
    assert len(stop) == 1 and stop[0].startswith("budget reached: worker w001 has spent $")
    assert not [1 for wid, e, _ in life if wid == "w002" and e == "stopped" and "budget" in _]
    board = [(e.type.value, e.worker_id, e.text) for e in services.board_plain.recent()]
    assert ("FAIL", "w001", "release upper: textkit/commands/upper.py: w001 stopped") in board
    assert ("FACT", "w002", "w002 works on after w001 was stopped") in board
    assert ("OBSERVED", "w001", "the call that crossed the cap") in board
    assert not [r for r in fake.requests if r.worker == "w001" and r.step == 2]  # refused before the provider
    rows = rig.calls()
    refused = [r for r in rows if r["status"] == "refused"]
    assert refused and all(r["worker_id"] == "w001" for r in refused)
    assert refused[0]["error"].startswith("budget reached: worker w001")
    assert {r["status"] for r in rows if r["worker_id"] == "w002"} == {"ok"}
    rows_match_the_providers_log(rig)


async def test_a_failing_model_is_a_turn_error_with_the_providers_status_and_the_worker_backs_off(
    services, tmp_path, monkeypatch
):
    need("copilot")
    script = Script(workers={"w001": [Turn(steps=[Step(say="never: the provider is down")])]})
    fake = FakeOpenAI(script, api_key=SENTINEL, faults=FaultSchedule(error_rate=1.0, error_status=500))
    monkeypatch.setenv("COPILOT_PROVIDER_BASE_URL", fake.start())
    monkeypatch.setenv("COPILOT_PROVIDER_API_KEY", SENTINEL)
    monkeypatch.setenv("COPILOT_MODEL", "gpt-4.1")
    cfg = GatewayConfig(retry=RetryConfig(max_attempts=2, base_s=0.05, max_wait_s=0.2), failure_backoff_s=600)
    async with Rig(services, tmp_path, "copilot", fake, cfg) as rig:
        w = rig.host.workers["w001"]
        await rig.host.launch("w001")
        await await_for(lambda: w.turn >= 1 and not w.in_turn, 240, "the failing turn to end")
        status = rig.host.status()
        rig.host.push(w, "nudge", "keep working")  # something to do: the worker still waits out its backoff
        assert w.backing_off() and w.turn == 1
    assert status["turn_errors"] == 1 and status["backing_off"] == 1
    errors = [r["detail"] for r in table(rig.run_dir, "lifecycle") if r["event"] == "turn_error"]
    assert len(errors) == 1
    assert "openai gpt-4.1 answered 500: injected failure 500 (gave up after 2 attempts)" in errors[0]
    assert "no new turn for 600 schedule s" in errors[0]
    rows = rig.calls()
    assert rows and {r["status"] for r in rows} == {"gave_up"} and {r["http_status"] for r in rows} == {500}
    # x-should-retry: false on the give-up: the CLI's own retries do not multiply the gateway's.
    assert len(fake.requests) == 2 * len(rows)
    assert os.environ["COPILOT_PROVIDER_API_KEY"] == SENTINEL


HANGING = {  # harness: (fake endpoint, URL variable, key variable)
    "gemini": (FakeGemini, "GOOGLE_GEMINI_BASE_URL", "GEMINI_API_KEY"),
    "codex": (FakeOpenAI, "OPENAI_BASE_URL", "OPENAI_API_KEY"),
}


@pytest.mark.parametrize("name", list(HANGING))
async def test_a_model_the_gateway_gave_up_on_ends_the_turn_whatever_the_cli_does(name, services, tmp_path,
                                                                                  monkeypatch):
    """The provider hangs: the gateway gives up (2 attempts of a 1.5 s read timeout); Gemini CLI and Codex retry on
    their own, ignoring `x-should-retry: false`. Their further calls are refused at once and counted, and the turn
    ends as a model error: by the CLI on the refusals, or by the worker (cancel, then stop) after the grace."""
    need(name)
    fake_cls, url_var, key_var = HANGING[name]
    for var in get_harness(name).env_keys:
        monkeypatch.delenv(var, raising=False)
    script = Script(workers={"*": [Turn(steps=[Step(say="never sent: the provider hangs", gate="never")])]})
    fake = fake_cls(script, api_key=SENTINEL)
    monkeypatch.setenv(url_var, fake.start())
    monkeypatch.setenv(key_var, SENTINEL)
    cfg = GatewayConfig(retry=RetryConfig(max_attempts=2, give_up_s=30, base_s=0.05, max_wait_s=0.2),
                        read_timeout_s=1.5, failure_backoff_s=600, give_up_grace_s=3)
    async with Rig(services, tmp_path, name, fake, cfg) as rig:
        w = rig.host.workers["w001"]
        await rig.host.launch("w001")
        await await_for(lambda: w.turn >= 1 and not w.in_turn, 150, f"{name}'s turn to end")
        fake.open_gate("never")
    assert w.model_errors == 1 and w.turn_errors == 1
    (error,) = [r["detail"] for r in table(rig.run_dir, "lifecycle") if r["event"] == "turn_error"]
    assert error.startswith("model error: model calls failed (") and "; the gateway gave up, " in error, error
    rows = sorted(rig.calls(), key=lambda r: r["ts"])
    gave_up = [r for r in rows if r["status"] == "gave_up"]
    refused = [r for r in rows if r["status"] == "refused"]
    assert len(gave_up) == 1 and gave_up[0]["error"].endswith("(gave up after 2 attempts)"), rows
    assert all(r["error"].startswith("refused at once: the gateway gave up") for r in refused)
    assert f"{len(refused)} calls refused after it" in error
    # Nothing reached the provider after the give-up: its two attempts are all it saw of this turn.
    model_calls = [r for r in fake.requests if r.reply is not None and r.reply.gate == "never"]
    assert len(model_calls) == 2, [(r.path, r.status) for r in fake.requests]
    assert rows.index(gave_up[0]) == len(rows) - 1 - len(refused)  # every refusal came after the give-up
