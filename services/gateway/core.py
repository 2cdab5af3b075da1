"""The model gateway's logic, as a plain class: one call from an agent to its provider.

    the agent's request -> its virtual key says which worker -> budget check (refused: 403 in the
    provider's words) -> wait for room under the limits (fair across workers) -> the provider,
    with the real credential -> a 429/5xx/no answer is retried after Retry-After + jitter (the
    agent sees nothing of it) until the call succeeds or the policy gives up -> the answer streams
    back unchanged while its usage is read -> tokens, cost, budgets, one `llm_calls` row.

No call ends without a row saying how it ended, and none is dropped: every request gets the
provider's answer, the provider's last error when the gateway gives up, or a refusal saying why.

The HTTP front (server.py) hands each request here with a `Responder`; the actor
(actors/gateway.py) adds the cluster: shares of the limits and the run's spending from the
`LimitCoordinator`. `turn_report` tells a worker's host what its agent's last turn met: failed
calls (a turn whose model failed is a `turn_error`) and a budget cap (the worker is stopped).
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Protocol

import aiohttp

from agensh_ray.agent.harness import ModelRoute
from agensh_ray.config import GatewayConfig
from agensh_ray.models import GatewayEndpoint, TurnReport, now_us
from agensh_ray.services.gateway.budget import Budgets
from agensh_ray.services.gateway.coordinator import GatewayReport, GatewayShares
from agensh_ray.services.gateway.keys import VirtualKeys, presented_key
from agensh_ray.services.gateway.limits import Admission, Ticket
from agensh_ray.services.gateway.prices import PriceTable
from agensh_ray.services.gateway.retry import RetryPolicy, retry_after_s
from agensh_ray.services.gateway.upstream import Upstream, client, response_headers
from agensh_ray.services.gateway.wire import (
    Meter,
    api_of,
    ask_for_usage,
    error_body,
    error_text,
    is_stream,
    model_of,
)
from agensh_ray.trace import LlmCallRow, TraceWriter

log = logging.getLogger(__name__)

RECENT_CALLS = 200
"""Outcomes kept per worker for turn reports."""
ERROR_BODY_MAX = 65536
EXHAUSTED = ("x-ratelimit-remaining-requests", "x-ratelimit-remaining-tokens",
             "anthropic-ratelimit-requests-remaining", "anthropic-ratelimit-tokens-remaining")
"""A 429 with one of these at 0 means the provider's limit is used up: the whole lane waits."""
JSON = [("content-type", "application/json")]
UPSTREAM_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError, OSError)
"""No answer, a broken connection, a stream cut, a provider silent for longer than the read timeout."""


def exhausted(headers: list[tuple[str, str]]) -> bool:
    """Whether a 429's headers say the provider's rate limit is used up (rather than, say, an overload)."""
    return any(k.lower() in EXHAUSTED and v.strip() == "0" for k, v in headers)


@dataclass
class Request:
    method: str
    path: str
    """Starting with /<provider>/."""
    query: str
    headers: dict[str, str]
    """Lower-case names."""
    body: bytes


class Responder(Protocol):
    async def start(self, status: int, headers: list[tuple[str, str]]) -> None: ...

    async def send(self, chunk: bytes, more: bool) -> None: ...

    async def abort(self) -> None:
        """Break the connection (a stream that broke upstream must break for the agent too)."""


class StreamCut(Exception):
    """The provider's stream broke after part of it reached the agent (the agent's connection is cut)."""


@dataclass
class Outcome:
    ts: int
    ok: bool
    refused: str | None = None
    error: str | None = None


@dataclass
class GaveUp:
    """The gateway gave up on a call of this worker's turn: its next calls are refused at once until the turn ends
    (a CLI that retries on its own, ignoring `x-should-retry: false`, cannot keep the turn going)."""

    ts: int
    error: str
    refused: int = 0


@dataclass
class Call:
    """One call on its way: what becomes its llm_calls row."""

    worker: str
    provider: str
    api: str
    model: str
    stream: bool
    t0: float
    status: str = "error"
    http_status: int | None = None
    ttfb: float | None = None
    queued_s: float = 0.0
    retries: list[str] = field(default_factory=list)
    error: str | None = None
    meter: Meter | None = None
    sending: bool = False
    """A chunk is on its way to the agent (a hang-up now may have cut it: what it received ends before it)."""


class Gateway:
    def __init__(self, cfg: GatewayConfig, keys: VirtualKeys, upstreams: dict[str, Upstream],
                 prices: PriceTable, route: ModelRoute | None = None, trace: TraceWriter | None = None,
                 name: str = "gateway", rng=None):
        self.cfg = cfg
        self.keys = keys
        self.upstreams = upstreams
        self.prices = prices
        self.route = route
        self.trace = trace
        self.name = name
        self._http: aiohttp.ClientSession | None = None
        self.admission = Admission(cfg.limits, cfg.burst_s)
        self.budgets = Budgets(cfg.budget)
        self.retry = RetryPolicy(cfg.retry, rng)
        self.url: str | None = None
        """The gateway's base URL (set by its server)."""
        self.recent: dict[str, deque[Outcome]] = {}
        self.counts: Counter = Counter()
        self._n = 0
        self._warned_unpriced = False
        self.given_up: dict[str, GaveUp] = {}
        """Workers whose turn met a give-up (cleared by the final turn report)."""
        self.life = secrets.token_hex(6)
        """This gateway object's own random id: its calls' event ids are `<name>:<life>:<n>`, so a gateway
        started again on the same node (a resumed driver, a restarted actor) never repeats one (docs/trace.md)."""

    # -- what hosts and the cluster ask ------------------------------------------------------
    def endpoint(self, workers: list[str]) -> dict[str, GatewayEndpoint]:
        """Each worker's URL and virtual key for its harness's route."""
        if self.url is None or self.route is None:
            raise RuntimeError("the gateway has no URL or route yet")
        url = f"{self.url}/{self.route.provider}"
        return {w: GatewayEndpoint(url=url, key=self.keys.issue(w)) for w in workers}

    def turn_report(self, worker: str, since_us: int, final: bool = False) -> TurnReport:
        """What `worker`'s calls since `since_us` met. `final`: its turn has ended (a give-up stops applying)."""
        calls = [o for o in self.recent.get(worker, ()) if o.ts >= since_us]
        failed = [o for o in calls if not o.ok]
        last = failed[-1] if failed else None
        gave = self.given_up.pop(worker, None) if final else self.given_up.get(worker)
        if gave is not None and gave.ts < since_us:  # a give-up of an earlier turn (its final report never came)
            if not final:
                del self.given_up[worker]
            gave = None
        return TurnReport(calls=len(calls), failed=len(failed), last_failed=bool(calls) and not calls[-1].ok,
                          error=(gave.error if gave else None) or ((last.refused or last.error) if last else None),
                          budget=self.budgets.refusal(worker), gave_up=gave.error if gave else None,
                          refused_after_give_up=gave.refused if gave else 0)

    def report(self) -> GatewayReport:
        """What the coordinator shares the limits and sums the run's spending by."""
        return GatewayReport(name=self.name, demand=self.admission.demand(), tokens=self.budgets.local.tokens,
                             usd=self.budgets.local.usd)

    def apply(self, shares: GatewayShares) -> None:
        self.admission.set_shares(shares.shares)
        self.budgets.set_run_spent(shares.run_tokens, shares.run_usd, shares.run_refusal)

    def status(self) -> dict:
        return {**self.counts, "active": sum(la.active for la in self.admission.lanes.values()),
                "waiting": sum(la.waiting() for la in self.admission.lanes.values()),
                "tokens": self.budgets.local.tokens, "usd": self.budgets.local.usd,
                "unpriced": self.budgets.local.unpriced_calls, "cost_unknown": self.counts["cost_unknown"]}

    @property
    def http(self) -> aiohttp.ClientSession:
        """The connection pool to the providers (made on first use, in the gateway's event loop)."""
        if self._http is None:
            self._http = client(self.cfg)
        return self._http

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
        if self.trace is not None:
            self.trace.flush()

    # -- one request -------------------------------------------------------------------------
    async def handle(self, req: Request, out: Responder) -> None:
        provider, _, rest = req.path.lstrip("/").partition("/")
        rest = "/" + rest
        up = self.upstreams.get(provider)
        if up is None:
            known = ", ".join(f"/{p}" for p in self.upstreams) or "none"
            return await _reply(out, 404, error_body("openai", 404, f"no route {req.path} (routes: {known})",
                                                     "not_found"))
        worker = self.keys.worker_of(presented_key(req.headers, req.query))
        if worker is None:
            return await _reply(out, 401, error_body(
                provider, 401, "unknown key: this gateway serves the run's workers only", "authentication_error"))
        api = api_of(provider, rest)
        if api is None or req.method != "POST":
            return await self._side(up, req, rest, out)
        try:
            body = json.loads(req.body or b"{}")
        except ValueError:
            return await _reply(out, 400, error_body(provider, 400, "the request body is not JSON",
                                                     "invalid_request_error"))
        call = Call(worker, provider, api, model_of(provider, rest, body), is_stream(provider, rest, body),
                    time.perf_counter())
        try:
            if (gave := self.given_up.get(worker)) is not None:
                gave.refused += 1
                self.counts["refused_after_give_up"] += 1
                call.status, call.http_status = "refused", 403
                call.error = f"refused at once: the gateway gave up on this turn's model call ({gave.error})"
                await _reply(out, 403, error_body(provider, 403, f"agensh gateway: {call.error}", "permission_error"),
                             [*JSON, ("x-should-retry", "false")])
                return
            refusal = self.budgets.refusal(worker)
            if refusal:
                call.status, call.http_status, call.error = "refused", 403, refusal
                await _reply(out, 403, error_body(provider, 403, f"agensh gateway: {refusal}", "permission_error"))
                return
            strip = ask_for_usage(api, body)
            await self._forward(call, up, req, rest, json.dumps(body).encode() if strip else req.body, strip, out)
        except (asyncio.CancelledError, ConnectionError):
            # The agent hung up. Whether it had its answer is what it received, by the provider's protocol: a
            # client that has read the answer's last event may close at once, before the usage chunk or the end
            # marker (`[DONE]`) or the body's last bytes: that call was answered, and the agent used it.
            m = call.meter
            if call.status in ("ok", "cut"):
                pass
            elif m is not None and call.ttfb is not None and m.stream_error:
                call.status, call.error = "error", f"{call.provider} error inside the stream: {m.stream_error}"
            elif m is not None and call.ttfb is not None and not call.sending and m.answered():
                call.status, call.error = "ok", None
            else:
                call.status, call.error = "client_gone", "the agent hung up before the answer" + (
                    f" (last upstream error: {call.error})" if call.error else "")
            raise
        finally:
            self._finish(call)

    async def _forward(self, call: Call, up: Upstream, req: Request, rest: str, body: bytes, strip: bool,
                       out: Responder) -> None:
        url, headers = up.url(rest, req.query), up.headers(req.headers)
        estimate = len(req.body) / 4
        attempts = tries = paced = 0
        while True:
            tries += 1
            ticket = await self.admission.acquire(call.provider, call.model, call.worker, estimate, front=tries > 1)
            call.queued_s += ticket.queued_s
            status, after, fail_body, fail_headers = await self._attempt(call, ticket, up, url, headers, body,
                                                                         strip, req.method, out)
            if status == 0:
                return  # answered (or cut after bytes reached the agent)
            # A 429 saying the provider's rate limit is used up: this call arrived a moment early. Pacing, not a
            # failure: the lane waits out the Retry-After, the call goes again at the front of its worker's
            # queue, and it spends no attempt (retry.py; give_up_s still bounds it).
            paced = paced + 1 if status == 429 and exhausted(fail_headers) else 0
            attempts += not paced
            wait = self.retry.next_wait(attempts, status, after, time.perf_counter() - call.t0, paced)
            if wait is None:
                call.status = "gave_up" if self.retry.retryable(status) else "error"
                call.http_status = status or 502
                if call.status == "gave_up":
                    counted = "" if tries == attempts else f", {attempts} of them counted (the rest met the rate limit)"
                    call.error = f"{call.error} (gave up after {tries} attempts{counted})"
                    # Until this turn ends, the worker's further calls are refused at once (turn_report).
                    self.given_up[call.worker] = GaveUp(now_us(), call.error)
                if status is None:
                    fail_body = error_body(call.provider, 502, f"agensh gateway: {call.error}", "api_error")
                    fail_headers = JSON
                # The gateway has retried already: the SDKs the CLIs use (OpenAI's, Anthropic's) honour this
                # header, so the agent does not hammer a dead endpoint once more on its own.
                fail_headers = [h for h in fail_headers if h[0].lower() != "x-should-retry"] + [("x-should-retry", "false")]
                await _reply(out, call.http_status, fail_body, fail_headers)
                return
            call.retries.append(str(status) if status else "conn")
            self.counts["retries"] += 1
            await asyncio.sleep(wait)

    async def _attempt(self, call: Call, ticket: Ticket, up: Upstream, url: str, headers: dict[str, str],
                       body: bytes, strip: bool, method: str, out: Responder):
        """One try. Returns (0, ...) when the agent got its answer, else (status or None, retry-after, the
        provider's error body and headers) for the retry loop."""
        refund, actual = True, None
        try:
            try:
                resp = await self.http.request(method, url, data=body, headers=headers, allow_redirects=False,
                                               proxy=up.proxy)
            except UPSTREAM_ERRORS as exc:
                call.error = f"{call.provider} unreachable: {type(exc).__name__}: {exc}"[:500]
                return None, None, b"", []
            try:
                if resp.status >= 400:
                    data = await resp.content.read(ERROR_BODY_MAX)
                    call.error = f"{call.provider} {call.model} answered {resp.status}: {error_text(data)}"
                    after, kept = retry_after_s(resp.headers), response_headers(resp.headers)
                    if resp.status == 429 and exhausted(kept):
                        self.admission.pause(ticket, after if after is not None else 1.0)
                    # The provider counted nothing of a refused call: neither does the limit.
                    return resp.status, after, data, kept
                meter = call.meter = Meter(call.api, call.stream, strip)
                try:
                    first = await resp.content.readany()
                except UPSTREAM_ERRORS as exc:
                    call.error = f"{call.provider} stream cut before its first byte: {type(exc).__name__}"
                    return None, None, b"", []
                refund = False
                call.http_status = resp.status
                await out.start(resp.status, response_headers(resp.headers))
                call.ttfb = time.perf_counter()
                if passed := meter.feed(first):
                    await _send(call, out, passed)
                while True:
                    try:
                        chunk = await resp.content.readany()
                    except UPSTREAM_ERRORS as exc:
                        call.status = "cut"
                        call.error = f"{call.provider} stream cut mid-way: {type(exc).__name__}: {exc}"[:500]
                        actual = meter.usage().total
                        await out.abort()
                        return 0, None, b"", []
                    if not chunk:
                        break
                    if passed := meter.feed(chunk):
                        await _send(call, out, passed)  # the agent hanging up raises here (ConnectionError)
                await out.send(meter.close(), False)
                actual = meter.usage().total
                if meter.stream_error:
                    call.status, call.error = "error", f"{call.provider} error inside the stream: {meter.stream_error}"
                elif not meter.finished:
                    call.status, call.error = "cut", f"{call.provider} stream ended without its final event"
                else:
                    call.status = "ok"
                return 0, None, b"", []
            finally:
                resp.release()
        finally:
            self.admission.release(ticket, actual, refund)

    async def _side(self, up: Upstream, req: Request, rest: str, out: Responder) -> None:
        """A side route (model list, token count): passed through once, not limited or counted."""
        try:
            async with self.http.request(req.method, up.url(rest, req.query), headers=up.headers(req.headers),
                                         data=req.body or None, allow_redirects=False, proxy=up.proxy) as resp:
                data = await resp.read()
        except UPSTREAM_ERRORS as exc:
            await _reply(out, 502, error_body(up.provider, 502, f"agensh gateway: {up.provider} unreachable: "
                                              f"{type(exc).__name__}", "api_error"))
            return
        await _reply(out, resp.status, data, response_headers(resp.headers))

    # -- accounting ----------------------------------------------------------------------------
    def _finish(self, call: Call) -> None:
        usage = call.meter.usage() if call.meter else None
        used = (call.meter.model if call.meter else None) or call.model
        if usage is not None and usage.total:
            cost = self.prices.cost(call.provider, used, usage)
            self.budgets.charge(call.worker, usage.total, cost)
        else:  # nothing counted: free if it failed, unknown if the provider answered without usage
            cost = None if call.status == "ok" else 0.0
        ok = call.status == "ok"
        if cost is None:  # answered, but no dollars: the model has no price, or the provider reported no usage
            self.counts["cost_unknown"] += 1
            if self.cfg.budget.worker_usd is not None or self.cfg.budget.run_usd is not None:
                if not self._warned_unpriced:
                    self._warned_unpriced = True
                    log.warning("%s %s: no price for this call, so the dollar budgets cannot count it (add the "
                                "model to --prices)", call.provider, used)
        self.counts[call.status] += 1
        self.counts["calls"] += 1
        self.recent.setdefault(call.worker, deque(maxlen=RECENT_CALLS)).append(
            Outcome(now_us(), ok, refused=call.error if call.status == "refused" else None,
                    error=None if ok else call.error))
        if self.trace is None:
            return
        self._n += 1
        end = time.perf_counter()
        self.trace.write(LlmCallRow(
            worker_id=call.worker, event_id=f"{self.name}:{self.life}:{self._n}", gateway=self.name, provider=call.provider,
            api=call.api, model=call.model, model_used=call.meter.model if call.meter else None, stream=call.stream,
            status=call.status, http_status=call.http_status,
            input_tokens=usage.input_tokens if usage else 0, cached_tokens=usage.cached_tokens if usage else 0,
            cache_write_tokens=usage.cache_write_tokens if usage else 0,
            output_tokens=usage.output_tokens if usage else 0, cost_usd=cost,
            latency_ms=(end - call.t0) * 1000, ttfb_ms=(call.ttfb - call.t0) * 1000 if call.ttfb else None,
            queued_ms=call.queued_s * 1000, retries=len(call.retries), retry_statuses=",".join(call.retries),
            error=None if ok else call.error,
        ))


async def _send(call: Call, out: Responder, chunk: bytes) -> None:
    call.sending = True
    await out.send(chunk, True)
    call.sending = False


async def _reply(out: Responder, status: int, body: bytes, headers: list[tuple[str, str]] | None = None) -> None:
    await out.start(status, headers if headers is not None else JSON)
    await out.send(body, False)
