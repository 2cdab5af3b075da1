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
import re
from urllib.parse import parse_qs

PREFIX = "agensh-"
MAC_HEX = 32
"""Hex digits of a key's MAC."""
_KEY = re.compile(rf"{PREFIX}([\x21-\x7e]{{1,128}})-([0-9a-f]{{{MAC_HEX}}})")
"""The shape of every key `issue` makes: a worker id in visible ASCII, then 32 hex digits. Anything else is
refused before any MAC is computed (`hmac.compare_digest` raises on a non-ASCII string: the agent got a 500)."""
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
        m = _KEY.fullmatch(key) if isinstance(key, str) else None
        if m is None:  # not a key of ours in shape: not ASCII, not hex, the wrong length, no worker
            return None
        worker, mac = m.groups()
        if not hmac.compare_digest(mac.encode(), self._mac(worker).encode()):
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
