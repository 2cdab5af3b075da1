"""How a sandboxed agent reaches each endpoint it needs (the forge, its MCP
server, its model) from its own network namespace, where nothing but
loopback exists: one `Route` per host and port, served inside by relay.py on
a loopback address and outside by `Egress` (egress.py).

- a loopback endpoint keeps its address (the same port is free inside);
- a named host on a port >= 1024 keeps its URL: the name resolves to
  127.0.0.1 in the sandbox's /etc/hosts, so TLS still checks the right name;
- plain HTTP to a remote IP or a low port is rewritten to a loopback port;
- HTTPS on a low port of a remote host cannot keep its name on loopback
  without privileges: `plan_routes` says so, and the worker shares the host's
  network instead (sandbox.py).
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict

FIRST_REWRITE_PORT = 20000
"""Loopback ports handed to rewritten endpoints inside a sandbox (its own network namespace: all are free)."""


class Route(BaseModel):
    """One endpoint the sandboxed agent may reach, and how."""

    model_config = ConfigDict(frozen=True)
    host: str
    """The real endpoint, as the worker's host connects to it."""
    port: int
    listen: tuple[str, ...]
    """Addresses the relay inside listens on ("127.0.0.1:8080", "[::1]:8080")."""
    socket: str
    """The unix socket's file name in the relay folder."""
    alias: str | None = None
    """A host name that resolves to 127.0.0.1 inside (its /etc/hosts): the URL stays as it is."""
    rewrite: str | None = None
    """"127.0.0.1:PORT": URLs to this endpoint take this address inside (plain HTTP only)."""


def default_port(scheme: str) -> int:
    return 443 if scheme == "https" else 80


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return False


def _is_loopback(host: str) -> bool:
    return host == "localhost" or (_is_ip(host) and ipaddress.ip_address(host).is_loopback)


def no_credentials(url: str) -> str:
    """scheme://host:port of `url`: no user, password or path (an MCP URL's path holds its token)."""
    u = urlsplit(url)
    return f"{u.scheme}://{u.netloc.rpartition('@')[2]}"


def url_prefix(url: str) -> str:
    u = urlsplit(url)
    return f"{u.scheme}://{u.netloc}/"


def plan_routes(endpoints: dict[str, str]) -> tuple[list[Route], dict[str, str]]:
    """How each endpoint is reached from inside, and the endpoints that cannot be (name -> why)."""
    routes: list[Route] = []
    refused: dict[str, str] = {}
    planned: dict[tuple[str, int], Route] = {}
    parsed = {}
    for name, url in endpoints.items():
        u = urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            refused[name] = f"{no_credentials(url)} is not an http(s) URL"
            continue
        parsed[name] = (u.scheme, u.hostname, u.port or default_port(u.scheme))
    used = {port for _, host, port in parsed.values() if _is_loopback(host)}
    next_port = FIRST_REWRITE_PORT
    for name, (scheme, host, port) in parsed.items():
        if (host, port) in planned:
            continue
        sock = f"{len(routes)}.sock"
        if _is_loopback(host):
            listen = ("127.0.0.1", "[::1]") if host == "localhost" else (f"[{host}]" if ":" in host else host,)
            route = Route(host=host, port=port, listen=tuple(f"{a}:{port}" for a in listen), socket=sock)
        elif not _is_ip(host) and port >= 1024 and port not in used:
            used.add(port)
            route = Route(host=host, port=port, listen=(f"127.0.0.1:{port}",), socket=sock, alias=host)
        elif scheme == "http":
            while next_port in used:
                next_port += 1
            used.add(next_port)
            route = Route(host=host, port=port, listen=(f"127.0.0.1:{next_port}",), socket=sock,
                          rewrite=f"127.0.0.1:{next_port}")
        else:
            refused[name] = (f"{no_credentials(endpoints[name])} is HTTPS on {host}:{port}; a loopback relay "
                             "cannot keep its name on a port below 1024")
            continue
        planned[(host, port)] = route
        routes.append(route)
    return routes, refused
