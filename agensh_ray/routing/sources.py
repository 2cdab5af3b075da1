"""The durable sources as a router reads them (`RouterSources`, agensh_ray/seams.py): the board and
the chat by long poll, the forge by polling.

The forge has no long poll, so an empty forge read waits a little before it returns: the pump's
forge loop then polls at most every `forge_poll_s`, not in a busy loop. Plain: the services come in
as awaitable objects (in a run, the Ray actors' facades; in tests, in-process objects).
"""

from __future__ import annotations

import asyncio
from typing import Any

from agensh_ray.models import BoardEntry

FORGE_POLL_S = 0.5
"""An empty forge read waits this long (at most the poll timeout) before it returns."""


class ServiceSources:
    """board: a `BoardClient` (await_since, asince, ainfo, acursor_at); chat: `await chat.wait_since(cursor,
    timeout_s)`; forge: `await forge.events_since(cursor)`."""

    def __init__(self, board: Any, chat: Any, forge: Any, poll_timeout_s: float, forge_poll_s: float = FORGE_POLL_S):
        self.board, self.chat, self.forge = board, chat, forge
        self.poll_timeout_s = poll_timeout_s
        self.forge_poll_s = forge_poll_s

    async def read(self, source: str, cursor: int) -> list[Any]:
        if source == "board":
            return await self.board.await_since(cursor, self.poll_timeout_s)
        if source == "chat":
            return await self.chat.wait_since(cursor, self.poll_timeout_s)
        events = await self.forge.events_since(cursor)
        if not events:
            await asyncio.sleep(min(self.forge_poll_s, self.poll_timeout_s))
        return events

    async def board_info(self) -> dict[str, Any]:
        return await self.board.ainfo()

    async def board_cursor_at(self, ts: int) -> int:
        return await self.board.acursor_at(ts)

    async def board_claims(self) -> list[Any]:
        return await self.board.aclaims(None)

    async def board_since(self, cursor: int, limit: int) -> list[BoardEntry]:
        return await self.board.asince(cursor, limit)
