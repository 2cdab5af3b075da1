"""What the fake LLM endpoints share: a loopback HTTP server in a thread,
the record of every request, the gates tests synchronise on, and the CLI.

A wire format (OpenAI chat completions, Anthropic messages) subclasses
`FakeEndpoint` with three methods: turn a request into a conversation, list
its tools, and write a `Reply` (plain JSON or server-sent events).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from agensh_ray.fakes.script import Message, Player, Reply, Script

log = logging.getLogger(__name__)

GATE_TIMEOUT_S = 300.0


@dataclass
class Recorded:
    """One request the endpoint received."""

    n: int
    ts: float
    path: str
    body: dict[str, Any]
    messages: list[Message]
    worker: str | None = None
    turn: int = -1
    step: int = -1
    reply: Reply | None = None

    def results(self) -> list[str]:
        """The tool results this request carries."""
        return [m.text for m in self.messages if m.kind == "result"]


class FakeEndpoint:
    """Base of the fake endpoints. ``start()`` returns the base URL; ``close()`` stops it."""

    name = "fake"
    base_path = ""
    """Path prefix the CLIs are pointed at (``/v1`` for OpenAI)."""

    def __init__(self, script: Script, host: str = "127.0.0.1", port: int = 0, record: Path | None = None):
        self.player = Player(script)
        self.script = script
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._gates: dict[str, threading.Event] = {}
        self._held: dict[str, threading.Event] = {}
        self._record = open(record, "a", encoding="utf-8") if record else None
        self._server = _Server((host, port), _handler(self))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    # -- life ------------------------------------------------------------------------
    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}{self.base_path}"

    def start(self) -> str:
        self._thread = threading.Thread(target=self._server.serve_forever, name=f"{self.name}-endpoint", daemon=True)
        self._thread.start()
        return self.url

    def close(self) -> None:
        for g in self._gates.values():
            g.set()
        if self._thread is not None:
            self._server.shutdown()
            self._thread = None
        self._server.server_close()
        if self._record is not None:
            self._record.close()
            self._record = None

    def __enter__(self) -> "FakeEndpoint":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- gates (tests) -----------------------------------------------------------------
    def _gate(self, name: str) -> threading.Event:
        with self._lock:
            return self._gates.setdefault(name, threading.Event())

    def _held_event(self, name: str) -> threading.Event:
        with self._lock:
            return self._held.setdefault(name, threading.Event())

    def open_gate(self, name: str) -> None:
        self._gate(name).set()

    def wait_held(self, name: str, timeout: float) -> bool:
        """Block until a request is held at gate `name` (call it with asyncio.to_thread from async code)."""
        return self._held_event(name).wait(timeout)

    def wait_for(self, predicate, timeout: float) -> Recorded | None:
        """Block until a recorded request satisfies `predicate`; returns it (None on timeout)."""
        deadline = time.monotonic() + timeout
        seen = 0
        with self._cond:
            while True:
                for r in self.requests[seen:]:
                    if predicate(r):
                        return r
                seen = len(self.requests)
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)

    # -- the wire format (subclasses) ----------------------------------------------------
    def conversation(self, body: dict[str, Any]) -> list[Message]:
        raise NotImplementedError

    def tools(self, body: dict[str, Any]) -> list[str]:
        raise NotImplementedError

    def respond(self, h: BaseHTTPRequestHandler, body: dict[str, Any], reply: Reply) -> None:
        raise NotImplementedError

    def handle_get(self, h: BaseHTTPRequestHandler) -> None:
        send_json(h, 404, {"error": {"message": f"no route {h.path}", "type": "not_found"}})

    def handles(self, path: str) -> bool:
        raise NotImplementedError

    # -- one request ---------------------------------------------------------------------
    def handle_post(self, h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        if not self.handles(h.path.split("?")[0]):
            send_json(h, 404, {"error": {"message": f"no route {h.path}", "type": "not_found"}})
            return
        messages = self.conversation(body)
        try:
            reply = self.player.reply(messages, self.tools(body), call_prefix=self.call_prefix)
        except KeyError as exc:  # the script names a tool the CLI did not offer: say so in the answer
            reply = Reply(text=f"(fake model) {exc.args[0]}")
        rec = Recorded(
            n=0, ts=time.time(), path=h.path, body=body, messages=messages, worker=reply.worker, turn=reply.turn,
            step=reply.step, reply=reply,
        )
        with self._cond:
            rec.n = len(self.requests) + 1
            self.requests.append(rec)
            if self._record is not None:
                self._record.write(json.dumps(_jsonable(rec)) + "\n")
                self._record.flush()
            self._cond.notify_all()
        if reply.gate:
            self._held_event(reply.gate).set()
            if not self._gate(reply.gate).wait(GATE_TIMEOUT_S):
                log.warning("gate %s was never opened; answering anyway", reply.gate)
        self.respond(h, body, reply)

    call_prefix = "call"

    # -- CLI -------------------------------------------------------------------------------
    @classmethod
    def main(cls, argv: list[str] | None = None, default_port: int = 0) -> int:
        p = argparse.ArgumentParser(prog=f"python -m {cls.__module__}", description=cls.__doc__)
        p.add_argument(
            "--script",
            required=True,
            help="a script JSON file, or 'textkit' for the built-in script (worker N claims the Nth textkit feature)",
        )
        p.add_argument("--workers", type=int, default=16, help="with --script textkit: how many workers to script")
        p.add_argument("--host", default="127.0.0.1")
        p.add_argument("--port", type=int, default=default_port)
        p.add_argument("--record", type=Path, default=None, help="append every request as a JSON line to this file")
        a = p.parse_args(argv)
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
        if a.script == "textkit":
            from agensh_ray.fakes.textkit import textkit_script

            script = textkit_script(a.workers)
        else:
            script = Script.load(a.script)
        ep = cls(script, host=a.host, port=a.port, record=a.record)
        print(f"{cls.name} fake endpoint listening on {ep.url}", flush=True)
        try:
            ep._server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            ep._server.server_close()
        return 0


def _jsonable(rec: Recorded) -> dict[str, Any]:
    reply = rec.reply
    return {
        "n": rec.n,
        "ts": rec.ts,
        "path": rec.path,
        "worker": rec.worker,
        "turn": rec.turn,
        "step": rec.step,
        "reply": None
        if reply is None
        else {"text": reply.text, "calls": [{"id": c.id, "name": c.name, "args": c.args} for c in reply.calls]},
        "body": rec.body,
    }


def send_json(h: BaseHTTPRequestHandler, status: int, obj: Any) -> None:
    data = json.dumps(obj).encode()
    h.send_response(status)
    h.send_header("content-type", "application/json")
    h.send_header("content-length", str(len(data)))
    h.end_headers()
    h.wfile.write(data)


class SSE:
    """Server-sent events over a chunked HTTP/1.1 response."""

    def __init__(self, h: BaseHTTPRequestHandler):
        self.h = h
        h.send_response(200)
        h.send_header("content-type", "text/event-stream")
        h.send_header("cache-control", "no-cache")
        h.send_header("transfer-encoding", "chunked")
        h.end_headers()

    def _chunk(self, data: bytes) -> None:
        self.h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.h.wfile.flush()

    def send(self, data: Any, event: str | None = None) -> None:
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


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):
            return  # a CLI killed or closing its keep-alive connection: not our error
        super().handle_error(request, client_address)


def _handler(ep: FakeEndpoint) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt: str, *args: Any) -> None:
            log.debug("%s " + fmt, ep.name, *args)

        def do_GET(self) -> None:  # noqa: N802
            try:
                ep.handle_get(self)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def do_POST(self) -> None:  # noqa: N802
            n = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(n) if n else b""
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                send_json(self, 400, {"error": {"message": "body is not JSON", "type": "invalid_request_error"}})
                return
            try:
                ep.handle_post(self, body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the CLI went away (killed mid-request in the crash tests)
            except Exception as exc:  # a fake must answer, not hang the CLI
                log.exception("%s endpoint failed on %s", ep.name, self.path)
                try:
                    send_json(self, 500, {"error": {"message": f"fake endpoint error: {exc}", "type": "api_error"}})
                except OSError:
                    pass

    return Handler


def run_cli(cls: type[FakeEndpoint], default_port: int) -> None:
    sys.exit(cls.main(default_port=default_port))
