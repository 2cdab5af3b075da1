"""The Gitea REST API v1 over plain httpx: JSON in and out, the token per call,
errors as GiteaAPIError. (giteapy is generated from a 2019 API and lacks
branch protection, reviews and token scopes.) Used by the adapter and by the
provisioning."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import httpx

from agensh_ray.errors import ForgeError, GiteaAPIError

API = "/api/v1"
PAGE = 50


def gitea_ts(iso: str | None) -> int | None:
    """A Gitea timestamp (ISO 8601) in microseconds since the epoch; None if absent or unreadable."""
    if not iso:
        return None
    try:
        return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1_000_000)
    except ValueError:
        return None


class GiteaClient:
    """Thin REST client: JSON in and out, the token per call, errors as GiteaAPIError."""

    def __init__(self, url: str, timeout: float = 30.0):
        self.url = url.rstrip("/")
        self.http = httpx.Client(base_url=self.url + API, timeout=timeout, follow_redirects=False)

    def call(self, method: str, path: str, token: str | None = None, json_body: Any = None,
             params: dict | None = None, basic: tuple[str, str] | None = None, ok: tuple[int, ...] = (),
             text: bool = False) -> Any:
        headers = {"Accept": "application/json"}
        if token:
            headers["Authorization"] = f"token {token}"
        try:
            resp = self.http.request(method, path, json=json_body, params=params, headers=headers,
                                     auth=basic)
        except httpx.HTTPError as exc:
            raise ForgeError(f"cannot reach Gitea at {self.url}: {exc}. Try again in a moment.") from None
        if resp.status_code >= 400 and resp.status_code not in ok:
            try:
                message = resp.json().get("message", "")
            except ValueError:
                message = resp.text[:300]
            raise GiteaAPIError(resp.status_code, message, method, path)
        if resp.status_code in ok and resp.status_code >= 400:
            return None
        if text:
            return resp.text
        if not resp.content:
            return None
        return resp.json()

    def paged(self, path: str, token: str, params: dict | None = None, limit: int = 10_000) -> list:
        out: list = []
        page = 1
        while len(out) < limit:
            batch = self.call("GET", path, token, params={**(params or {}), "page": page, "limit": PAGE})
            out.extend(batch or [])
            if not batch or len(batch) < PAGE:
                break
            page += 1
        return out

    def close(self) -> None:
        self.http.close()
