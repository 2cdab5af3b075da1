"""When the gateway tries a model call again, and how long it waits first.

A provider's 429 and 5xx (and 529, Anthropic's "overloaded"), a connection that fails, and a
stream cut before its first byte reached the agent are tried again. The wait honours the
provider's ``retry-after-ms`` / ``retry-after`` (seconds or an HTTP date) and adds jitter, so the
calls that failed together do not come back together; without one it backs off exponentially
with full jitter. The gateway gives up after `max_attempts` or when the next wait would pass
`give_up_s` since the call arrived; the agent then gets the provider's last answer, and the
call's `llm_calls` row says `gave_up`. A 429 saying the provider's rate limit is used up spends no
attempt (core.py: the lane waits it out; only `give_up_s` bounds such a call).
"""

from __future__ import annotations

import random
import time
from email.utils import parsedate_to_datetime

from agensh_ray.config import RetryConfig

RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
PACED_STEP_S, PACED_MAX_S = 0.05, 1.0


def retry_after_s(headers: dict[str, str], now: float | None = None) -> float | None:
    """The provider's requested wait in seconds (`retry-after-ms`, `retry-after` seconds or HTTP date)."""
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    ra = headers.get("retry-after")
    if not ra:
        return None
    try:
        return max(0.0, float(ra))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(ra).timestamp()
    except (TypeError, ValueError):
        return None
    return max(0.0, when - (time.time() if now is None else now))


class RetryPolicy:
    """Whether and when to try a call again. `rng` is injected so tests are deterministic."""

    def __init__(self, cfg: RetryConfig, rng: random.Random | None = None):
        self.cfg = cfg
        self.rng = rng or random.Random()

    def retryable(self, status: int | None) -> bool:
        """None: no answer at all (connection failed, stream cut before a byte was passed on)."""
        return status is None or status in RETRY_STATUSES

    def delay(self, attempt: int, after: float | None) -> float:
        """Seconds to wait before attempt `attempt + 1` (attempt counts from 1)."""
        if after is not None:
            return min(after, self.cfg.max_wait_s) * (1 + self.rng.uniform(0, self.cfg.jitter))
        cap = min(self.cfg.max_wait_s, self.cfg.base_s * 2 ** (attempt - 1))
        return self.rng.uniform(cap / 2, cap)

    def next_wait(self, attempt: int, status: int | None, after: float | None, elapsed_s: float,
                  paced: int = 0) -> float | None:
        """The wait before trying again, or None to give up. `attempt`: the attempts that counted so far;
        `paced`: how many answers in a row (this one included) said the provider's rate limit is used up.
        Those spend no attempt, and their wait grows by PACED_STEP_S each, to PACED_MAX_S, so a provider
        answering "used up" with a Retry-After of 0 is not asked again in a hot loop."""
        if not self.retryable(status) or (not paced and attempt >= self.cfg.max_attempts):
            return None
        wait = self.delay(max(1, attempt), after)
        if paced:
            wait = max(wait, min(PACED_MAX_S, PACED_STEP_S * paced))
        if elapsed_s + wait > self.cfg.give_up_s:
            return None
        return wait
