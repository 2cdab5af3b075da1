"""What tests share: the one polling helper (`wait_for` / `await_for`: wait on a
condition with a timeout, never a fixed sleep), and in-process services for tests
that drive a WorkerHost without Ray (the board client over the real BoardService,
the real EmbeddedChat and EmbeddedForge, awaited like their actors)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from agensh_ray.board import BoardClient, BoardLimits, BoardService
from agensh_ray.config import RunConfig
from agensh_ray.services.chat.embedded import EmbeddedChat
from agensh_ray.services.forge.embedded import EmbeddedForge
from agensh_ray.task import Task
from agensh_ray.worker import WorkerHost

T = TypeVar("T")


def wait_for(cond: Callable[[], T], timeout: float, what: str, step: float = 0.05) -> T:
    """Poll `cond` until it returns something truthy and return that; AssertionError naming `what` after
    `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(step)


async def await_for(cond: Callable[[], Any], timeout: float, what: str, step: float = 0.05) -> Any:
    """`wait_for` for coroutines: polls without blocking the event loop (`cond` may be async)."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        await asyncio.sleep(step)


class Awaited:
    """`await x.method(...)` calls the plain object's method."""

    def __init__(self, obj):
        self.obj = obj

    def __getattr__(self, name):
        fn = getattr(self.obj, name)

        async def call(*args, **kwargs):
            return fn(*args, **kwargs)

        return call


class LocalServices:
    def __init__(self, root: Path, workers: list[str], task: str = "textkit", board_limits: BoardLimits | None = None):
        self.task = Task.load(task)
        starter = root / "starter"
        self.task.materialize_starter(starter)
        self.board_service = BoardService(str(root / "board.jsonl"), board_limits)
        self.board_plain = self.board_service.board
        self.chat_plain = EmbeddedChat(root / "chat")
        self.forge_plain = EmbeddedForge(root / "forge")
        self.forge_plain.start()
        self.forge_plain.init_repo(starter, self.task.title, self.task.text())
        for w in workers:
            self.chat_plain.add_user(w)
            self.forge_plain.add_user(w)
        self.board = BoardClient(self.board_service)  # the host's real client, over the service in-process
        self.chat = Awaited(self.chat_plain)
        self.forge = Awaited(self.forge_plain)
        self.clone_urls = {w: self.forge_plain.clone_url(w) for w in workers}

    def host(self, run_dir: Path, workers: list[str], **cfg) -> WorkerHost:
        config = RunConfig(workers=len(workers), **cfg)
        return WorkerHost(
            "h000", workers, config, run_dir, "test-run", self, self.clone_urls, time.time(), self.task.root
        )

    def close(self) -> None:
        self.board_service.close()
        self.forge_plain.close()
        self.chat_plain.close()
