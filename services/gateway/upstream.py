"""The real provider behind the gateway: its URL and credential, read in the gateway's own
process (from its environment or the secrets file), never handed to an agent, a log or a trace.

The user configures the provider as for the CLI itself (`COPILOT_PROVIDER_BASE_URL` +
`COPILOT_PROVIDER_API_KEY`, `ANTHROPIC_BASE_URL` + `ANTHROPIC_API_KEY`, ...: the harness's
`ModelRoute` names them); the gateway then stands in for that endpoint, and the agent gets the
gateway's URL and a virtual key in those same variables.

Requests go out with the agent's own headers (API versions, betas, the CLI's user agent) minus
its key and the hop-by-hop ones, plus the real credential, and ask for an uncompressed body (the
gateway reads the usage in it).
"""

from __future__ import annotations

import os
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field

import aiohttp

from agensh_ray.agent.harness import ModelRoute, read_secrets
from agensh_ray.config import GatewayConfig
from agensh_ray.errors import GatewayError

DROP_REQUEST = frozenset({
    "host", "authorization", "x-api-key", "x-goog-api-key", "api-key", "content-length", "accept-encoding",
    "connection", "keep-alive", "transfer-encoding", "te", "upgrade", "proxy-authorization", "proxy-connection",
    "cookie",
})
DROP_RESPONSE = frozenset({
    "content-length", "content-encoding", "transfer-encoding", "connection", "keep-alive", "set-cookie", "date",
    "server",
})
AUTH_HEADERS = {"bearer": "authorization", "x-api-key": "x-api-key", "x-goog-api-key": "x-goog-api-key"}


@dataclass(frozen=True)
class Upstream:
    provider: str
    base_url: str
    auth_header: str | None = None
    auth_value: str | None = field(default=None, repr=False)
    proxy: str | None = None
    """The HTTP(S)_PROXY that applies to `base_url` (NO_PROXY honoured), found once: aiohttp looks it up
    in a thread on every request otherwise."""

    def url(self, rest: str, query: str) -> str:
        return self.base_url.rstrip("/") + rest + (f"?{_strip_key(query)}" if query else "")

    def headers(self, agent: dict[str, str]) -> dict[str, str]:
        out = {k: v for k, v in agent.items() if k not in DROP_REQUEST}
        out["accept-encoding"] = "identity"
        if self.auth_header and self.auth_value:
            out[self.auth_header] = (f"Bearer {self.auth_value}" if self.auth_header == "authorization"
                                     else self.auth_value)
        return out


def _strip_key(query: str) -> str:
    """Gemini may carry its key in ?key=: the agent's virtual key never goes upstream."""
    return "&".join(p for p in query.split("&") if not p.startswith("key="))


def upstream_of(route: ModelRoute, src: dict[str, str] | None = None) -> Upstream:
    """The provider endpoint a harness's route names in `src` (default: this process's environment and the
    secrets file), with the first credential variable that is set."""
    if src is None:
        src = {**os.environ, **read_secrets()}
    url = src.get(route.url_var) or route.default_url
    if not url.startswith(("http://", "https://")):
        raise GatewayError(f"{route.url_var}={url!r} is not an http(s) URL")
    proxy = _proxy_for(url)
    for var, style in route.key_vars:
        if src.get(var):
            return Upstream(route.provider, url, AUTH_HEADERS[style], src[var], proxy)
    return Upstream(route.provider, url, proxy=proxy)  # a keyless endpoint (a local vLLM or Ollama)


def _proxy_for(url: str) -> str | None:
    host = urllib.parse.urlsplit(url).hostname or ""
    if urllib.request.proxy_bypass(host):
        return None
    return urllib.request.getproxies().get(urllib.parse.urlsplit(url).scheme)


def response_headers(headers: Mapping[str, str]) -> list[tuple[str, str]]:
    return [(k, v) for k, v in headers.items() if k.lower() not in DROP_RESPONSE]


def client(cfg: GatewayConfig) -> aiohttp.ClientSession:
    """One connection pool per gateway, as wide as the calls it may hold open at once (make it in the
    gateway's event loop). aiohttp, not httpx: it took less of the gateway's CPU per streamed call in
    trials (bench/gateway.py measures the gateway's CPU per call as it is)."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=30.0),
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=cfg.connect_timeout_s, sock_read=cfg.read_timeout_s),
        auto_decompress=False, trust_env=False,  # the proxy is the Upstream's, found once
    )
