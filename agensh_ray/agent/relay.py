"""The relay inside a worker's sandbox: the only way out of its network namespace.

    python -I -S relay.py 127.0.0.1:8080=/run/agensh/net/0.sock ... -- AGENT ARGV...

For each LISTEN=SOCKET pair it listens on the loopback address LISTEN and
forwards every connection, byte for byte, to the unix socket SOCKET, which
the worker's host bind-mounted into the sandbox (its other end, `Egress` in
egress.py, connects to the real endpoint). Then it runs the agent with its
own stdin, stdout and stderr, and exits as the agent exits (128+N if a
signal N ended it). Signals it gets are passed on to the agent.

Standard library only, run by path with -I -S: it starts in ~20 ms and
imports nothing of the project or of the agent's environment.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading

CHUNK = 65536


def _address(listen: str) -> tuple[int, tuple[str, int]]:
    host, _, port = listen.rpartition(":")
    if host.startswith("["):
        return socket.AF_INET6, (host[1:-1], int(port))
    return socket.AF_INET, (host, int(port))


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(CHUNK):
            dst.sendall(data)
    except OSError:
        pass
    try:
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def _bridge(conn: socket.socket, path: str) -> None:
    out = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        out.connect(path)
    except OSError:
        conn.close()
        out.close()
        return
    back = threading.Thread(target=_pump, args=(out, conn), daemon=True)
    back.start()
    _pump(conn, out)
    back.join()
    conn.close()
    out.close()


def _serve(server: socket.socket, path: str) -> None:
    while True:
        try:
            conn, _ = server.accept()
        except OSError:
            return
        threading.Thread(target=_bridge, args=(conn, path), daemon=True).start()


def main(argv: list[str]) -> int:
    if "--" not in argv:
        print("usage: relay.py LISTEN=SOCKET ... -- ARGV...", file=sys.stderr)
        return 2
    cut = argv.index("--")
    specs, command = argv[:cut], argv[cut + 1:]
    threading.stack_size(256 * 1024)
    for spec in specs:
        listen, _, path = spec.partition("=")
        family, addr = _address(listen)
        server = socket.socket(family, socket.SOCK_STREAM)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            server.bind(addr)
        except OSError as exc:
            if family == socket.AF_INET6:  # no IPv6 loopback here: "localhost" still has 127.0.0.1
                server.close()
                continue
            raise SystemExit(f"relay: cannot listen on {listen}: {exc}") from None
        server.listen(128)
        threading.Thread(target=_serve, args=(server, path), daemon=True).start()
    agent = subprocess.Popen(command)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda n, _f: agent.send_signal(n))
    rc = agent.wait()
    return 128 - rc if rc < 0 else rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
