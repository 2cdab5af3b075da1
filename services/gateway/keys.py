"""Virtual keys: what an agent holds instead of the provider's credential.

A worker's key is ``agensh-<worker>-<HMAC-SHA256(run secret, run id + worker), 32 hex>``: every
node's gateway checks it with the run's secret alone (no table to distribute), and it is worth
nothing anywhere else (no provider knows it; the gateway only listens on the node's loopback).
The run secret is made by the driver and lives in the gateways and the driver.

Agents present it the way their provider's API wants: `Authorization: Bearer`, `x-api-key`
(Anthropic), `x-goog-api-key` or `?key=` (Gemini), `api-key` (Azure).
"""

from __future__ import annotations

import hashlib
import hmac
from urllib.parse import parse_qs

PREFIX = "agensh-"
KEY_HEADERS = ("authorization", "x-api-key", "x-goog-api-key", "api-key")


class VirtualKeys:
    def __init__(self, secret: bytes, run_id: str):
        if len(secret) < 16:
            raise ValueError("the run secret of the virtual keys must be at least 16 bytes")
        self._secret = secret
        self.run_id = run_id

    def _mac(self, worker: str) -> str:
        return hmac.new(self._secret, f"{self.run_id}\0{worker}".encode(), hashlib.sha256).hexdigest()[:32]

    def issue(self, worker: str) -> str:
        return f"{PREFIX}{worker}-{self._mac(worker)}"

    def worker_of(self, key: str | None) -> str | None:
        """The worker a key was issued to, if it is genuine."""
        if not key or not key.startswith(PREFIX):
            return None
        worker, _, mac = key[len(PREFIX):].rpartition("-")
        if not worker or not hmac.compare_digest(mac, self._mac(worker)):
            return None
        return worker


def presented_key(headers: dict[str, str], query: str = "") -> str | None:
    """The key a request carries, wherever its API puts it."""
    for h in KEY_HEADERS:
        v = headers.get(h)
        if v:
            return v[7:].strip() if v[:7].lower() == "bearer " else v.strip()
    if query:
        keys = parse_qs(query).get("key")
        if keys:
            return keys[0]
    return None
