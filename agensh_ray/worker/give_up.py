"""A turn whose model the gateway gave up on ends within a bound, whatever the agent CLI does.

Some CLIs retry on their own after the gateway's give-up (Gemini CLI and Codex ignore `x-should-retry: false`).
From the give-up until the turn ends, the gateway refuses the worker's further calls at once (403, counted:
services/gateway/core.py). While a turn runs, `watch` asks the gateway every `POLL_S` whether it gave up; once it
has, the CLI gets `give_up_grace_s` (GatewayConfig, 10 s) to end the turn itself (it may, on the refusals),
then the turn is cancelled (ACP session/cancel), and a CLI still in its turn as long again later is stopped (the worker restarts it with a
hand-off, as after any crash). The turn then ends as a model error (`after_turn`'s turn report says the gateway
gave up). Bound: the gateway's own give-up (its `retry` settings) + POLL_S + 2 x give_up_grace_s + the agent's stop.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agensh_ray.worker.turns import Worker

log = logging.getLogger(__name__)

POLL_S = 2.0
"""How often a turn asks its gateway (wall seconds; a local actor call)."""


async def watch(w: Worker, since_us: int, poll_s: float = POLL_S) -> None:
    """Runs beside a turn (cancelled when it ends): ends it once the gateway has given up on its model."""
    gateway = w.host.gateway
    grace_s = w.host.cfg.gateway.give_up_grace_s
    while True:
        await asyncio.sleep(poll_s)
        try:
            report = await gateway.turn_report(w.id, since_us)
        except Exception as exc:  # the gateway away: the turn goes on, asked again next time
            log.info("no give-up report for %s: %s", w.id, exc)
            continue
        if report.gave_up:
            break
    await asyncio.sleep(grace_s)
    session = w.session
    if session is None:
        return
    log.warning("%s: the gateway gave up on its model %.0f s ago and the agent is still in its turn: cancelling it",
                w.id, grace_s)
    w.ended_after_give_up = "cancelled"
    await session.cancel()
    await asyncio.sleep(grace_s)
    if w.session is session and session.process is not None:
        log.warning("%s: the agent ignored the cancel: stopping it (restarted with a hand-off)", w.id)
        w.ended_after_give_up = "stopped"
        await session.process.stop()
