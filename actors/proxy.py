"""The facade over an actor handle: callers await plain method calls and
never see `.remote()` (the pattern of ray.util.queue.Queue)."""

from __future__ import annotations

from typing import Any


class AsyncProxy:
    """`await proxy.method(*args)` runs `handle.method.remote(*args)`."""

    def __init__(self, handle: Any):
        self.handle = handle

    def __getattr__(self, name: str):
        method = getattr(self.handle, name)

        async def call(*args, **kwargs):
            return await method.remote(*args, **kwargs)

        call.__name__ = name
        return call

    def __reduce__(self):
        return (AsyncProxy, (self.handle,))


class SyncProxy:
    """`proxy.method(*args)` runs `ray.get(handle.method.remote(*args))`."""

    def __init__(self, handle: Any):
        self.handle = handle

    def __getattr__(self, name: str):
        import ray

        method = getattr(self.handle, name)

        def call(*args, **kwargs):
            return ray.get(method.remote(*args, **kwargs))

        call.__name__ = name
        return call
