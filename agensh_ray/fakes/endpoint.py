"""What the fake LLM endpoints share: a loopback HTTP server in a thread,
the record of every request, the gates tests synchronise on, the provider's
failures (faults.py: rate limit, 429 storms, 5xx, 529, slow and cut streams;
and a script step's own `fail` / `cut`), an optional API key it insists on,
and the CLI.

A wire format (OpenAI chat completions, Anthropic messages) subclasses
`FakeEndpoint` with four methods: turn a request into a conversation, list
its tools, write a `Reply` (plain JSON or server-sent events) and write an
error in its own shape.
"""

from __future__ import annotations

import argparse
import json
import logging
import socket
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from agensh_ray.fakes.faults import Faults, FaultSchedule
from agensh_ray.fakes.replies import SSE, StreamCut, send_json
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
    status: int = 200
    """What the endpoint answered (a fault's status, 401 for a wrong key)."""
    usage: dict[str, int] | None = None
    """The usage it reported (answered requests)."""
    cut: bool = False
    """Its stream was cut mid-way."""
    key: str | None = None
    """The credential the request presented."""

    def results(self) -> list[str]:
        """The tool results this request carries."""
        return [m.text for m in self.messages if m.kind == "result"]


class FakeEndpoint:
    """Base of the fake endpoints. ``start()`` returns the base URL; ``close()`` stops it."""

    name = "fake"
    base_path = ""
    """Path prefix the CLIs are pointed at (``/v1`` for OpenAI)."""

    def __init__(self, script: Script, host: str = "127.0.0.1", port: int = 0, record: Path | None = None,
                 faults: FaultSchedule | None = None, api_key: str | None = None):
        self.player = Player(script)
        self.faults = Faults(faults)
        self.api_key = api_key
        """If set, a request presenting another key gets 401."""
        self._step_seen: dict[tuple, int] = {}
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

    def respond(self, h: BaseHTTPRequestHandler, body: dict[str, Any], reply: Reply, rec: Recorded) -> None:
        """Write the answer (setting `rec.usage` to the usage it reports)."""
        raise NotImplementedError

    def handle_get(self, h: BaseHTTPRequestHandler) -> None:
        send_json(h, 404, {"error": {"message": f"no route {h.path}", "type": "not_found"}})

    def handles(self, path: str) -> bool:
        raise NotImplementedError

    # -- one request ---------------------------------------------------------------------
    def error(self, h: BaseHTTPRequestHandler, status: int, message: str, retry_after: float | None,
              limited: bool) -> None:
        """An error in this wire format's shape (`limited`: a rate limit, with its remaining header at 0)."""
        raise NotImplementedError

    def presented_key(self, h: BaseHTTPRequestHandler) -> str | None:
        auth = h.headers.get("authorization") or ""
        if auth.lower().startswith("bearer "):
            return auth[7:].strip()
        return h.headers.get("x-api-key") or h.headers.get("x-goog-api-key") or None

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
            step=reply.step, reply=reply, key=self.presented_key(h),
        )
        fault = self._fault(rec, reply)
        with self._cond:
            rec.n = len(self.requests) + 1
            self.requests.append(rec)
            self._cond.notify_all()
        try:
            if fault is not None:
                status, message, retry_after, limited = fault
                rec.status = status
                self.error(h, status, message, retry_after, limited)
                return
            if reply.gate:
                self._held_event(reply.gate).set()
                if not self._gate(reply.gate).wait(GATE_TIMEOUT_S):
                    log.warning("gate %s was never opened; answering anyway", reply.gate)
            self.respond(h, body, reply, rec)
        except StreamCut:
            rec.cut = True
            h.close_connection = True  # the server closes the socket: no end of the chunked body
        finally:
            if self._record is not None:
                with self._lock:
                    self._record.write(json.dumps(_jsonable(rec)) + "\n")
                    self._record.flush()

    def _fault(self, rec: Recorded, reply: Reply) -> tuple[int, str, float | None, bool] | None:
        """The failure this request gets, if any: a wrong key, the script step's, the rate limit, a storm."""
        if self.api_key is not None and rec.key != self.api_key:
            return 401, "invalid API key", None, False
        if reply.fail or reply.cut:
            key = (reply.worker, reply.turn, reply.step)
            with self._lock:
                seen = self._step_seen.get(key, 0)
                self._step_seen[key] = seen + 1
            if seen < len(reply.fail):
                status = reply.fail[seen]
                return status, f"scripted failure {status}", reply.retry_after if status in (429, 503, 529) else None, False
            reply.cut = 1 if seen - len(reply.fail) < reply.cut else 0
        # A storm sheds load before the rate limit counts the call (an overloaded provider refuses first).
        hit = self.faults.injected()
        if hit is not None:
            status, after = hit
            return status, ("overloaded" if status == 529 else f"injected failure {status}"), after, False
        wait = self.faults.rate_limited()
        if wait is not None:
            return 429, "rate limit reached for requests", max(0.001, wait), True
        return None

    def stream(self, h: BaseHTTPRequestHandler, reply: Reply, events: int) -> SSE:
        """The SSE writer of an answer of `events` events: slow and cut as the schedule or the step says."""
        cut = max(1, events // 2) if reply.cut else self.faults.cut_after(events)
        return SSE(h, self.faults.s.chunk_delay_s, cut)

    @property
    def pieces(self) -> int:
        return self.faults.s.chunks

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
        p.add_argument("--faults", type=Path, default=None,
                       help="a fault schedule JSON file (rate limit, 429 storms, 5xx, slow and cut streams; see "
                       "agensh_ray/fakes/faults.py)")
        p.add_argument("--api-key", default=None, help="answer 401 to requests that do not present this key")
        a = p.parse_args(argv)
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
        if a.script == "textkit":
            from agensh_ray.fakes.textkit import textkit_script

            script = textkit_script(a.workers)
        else:
            script = Script.load(a.script)
        faults = FaultSchedule.load(a.faults) if a.faults else None
        ep = cls(script, host=a.host, port=a.port, record=a.record, faults=faults, api_key=a.api_key)
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
        "status": rec.status,
        "usage": rec.usage,
        "cut": rec.cut,
        "body": rec.body,
    }


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

        def setup(self) -> None:
            super().setup()
            # As a provider's server does: each SSE event leaves at once (no Nagle wait on the last small write).
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

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
