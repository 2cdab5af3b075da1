"""A real S3-compatible server for the tests: `moto_server` (moto's server mode, from PyPI) on a free
127.0.0.1 port, stopped by its pid; and `Gate`, a TCP forwarder in front of it that the tests close and
reopen, so the store is unreachable (connections refused, open ones cut) for a while without moto losing
its objects (a restarted moto server starts empty)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

from agensh_ray.services.fakes import free_port
from tests.support import wait_for


def answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class MotoServer:
    def __init__(self, log: Path):
        self.port = free_port()
        exe = Path(sys.executable).with_name("moto_server")
        self._log = open(log, "wb")
        self.proc = subprocess.Popen([str(exe), "-H", "127.0.0.1", "-p", str(self.port)],
                                     stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_for(lambda: answers(self.port) or self.proc.poll() is not None, 30, "moto_server to listen")
            assert self.proc.poll() is None, log.read_text()
        except BaseException:
            self.stop()  # a server that did not come up is not left behind
            raise

    def stop(self) -> None:
        self._log.close()
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


class Gate:
    """127.0.0.1:`port` forwarded to `target`; `close()` makes the store unreachable, `open()` brings it back."""

    def __init__(self, target: int):
        self.target = target
        self.port = free_port()
        self._server: socket.socket | None = None
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self.open()

    def open(self) -> None:
        self._server = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, args=(self._server,), daemon=True).start()

    def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        with self._lock:
            conns, self._conns = self._conns, set()
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns.update((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
                with self._lock:
                    self._conns.discard(s)
