"""The HTTP answers a fake provider writes: a JSON body, server-sent events (slowed or cut off mid-stream,
as a provider's failing stream is), and the rough token count a fake reports as usage."""

from __future__ import annotations

import json
import time
from http.server import BaseHTTPRequestHandler
from typing import Any


def send_json(h: BaseHTTPRequestHandler, status: int, obj: Any) -> None:
    data = json.dumps(obj).encode()
    h.send_response(status)
    h.send_header("content-type", "application/json")
    h.send_header("content-length", str(len(data)))
    h.end_headers()
    h.wfile.write(data)


class StreamCut(Exception):
    """The fake cuts this stream here (a provider's connection dropping mid-answer)."""


class SSE:
    """Server-sent events over a chunked HTTP/1.1 response; `delay_s` before each event after the first, and
    cut (StreamCut) before event number `cut_after`."""

    def __init__(self, h: BaseHTTPRequestHandler, delay_s: float = 0.0, cut_after: int | None = None):
        self.h = h
        self.delay_s = delay_s
        self.cut_after = cut_after
        self.n = 0
        h.send_response(200)
        h.send_header("content-type", "text/event-stream")
        h.send_header("cache-control", "no-cache")
        h.send_header("transfer-encoding", "chunked")
        h.end_headers()

    def _chunk(self, data: bytes) -> None:
        self.h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.h.wfile.flush()

    def send(self, data: Any, event: str | None = None) -> None:
        if self.cut_after is not None and self.n >= self.cut_after:
            raise StreamCut()
        if self.n and self.delay_s:
            time.sleep(self.delay_s)
        self.n += 1
        payload = data if isinstance(data, str) else json.dumps(data)
        head = f"event: {event}\n" if event else ""
        self._chunk(f"{head}data: {payload}\n\n".encode())

    def end(self) -> None:
        self.h.wfile.write(b"0\r\n\r\n")
        self.h.wfile.flush()


def estimate_tokens(obj: Any) -> int:
    """A rough, deterministic token count (4 characters a token) for usage fields."""
    text = obj if isinstance(obj, str) else json.dumps(obj)
    return max(1, len(text) // 4)
