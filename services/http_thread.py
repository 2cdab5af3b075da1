"""A ThreadingHTTPServer on its own daemon thread: the git smart-HTTP server
serves this way (the webhook intake reads its clients on an asyncio loop
instead: services/forge/gitea/intake.py)."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def serve_in_thread(
    host: str, port: int, handler: type[BaseHTTPRequestHandler], name: str, request_queue_size: int = 5
) -> tuple[ThreadingHTTPServer, threading.Thread]:
    """Bind (port 0 picks a free one), start serving on a daemon thread, return both."""
    server = ThreadingHTTPServer((host, port), handler, bind_and_activate=False)
    server.daemon_threads = True
    server.request_queue_size = request_queue_size
    server.allow_reuse_address = True
    try:
        server.server_bind()
        server.server_activate()
    except BaseException:
        server.server_close()
        raise
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, name=name, daemon=True)
    thread.start()
    return server, thread
