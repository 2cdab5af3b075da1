"""Git smart HTTP for the embedded forge (and the fake Gitea): `git http-backend`
behind a threaded HTTP server with Basic auth.

Only the repositories under `project_root` whose names are listed in `repos`
are served (the embedded forge has one: `/repo.git`). Every request needs
credentials, clone and fetch included: username = user name, password = the
token `EmbeddedForge.add_user` returned.

What the server does for git that a bare CGI runner would not:

* chunked request bodies (pushes over `http.postBuffer`) are de-chunked and
  gzip ones (large fetch negotiations) inflated: `git http-backend` always
  sees a plain body with an exact CONTENT_LENGTH (http_body.py);
* a connection idle for IDLE_TIMEOUT_S (no byte read or written) is closed:
  a client cannot hold a thread by sending nothing;
* the backend's output is streamed back; when the backend does not give a
  Content-Length the response is sent chunked, so HTTP/1.1 keep-alive and
  `Expect: 100-continue` both work;
* at most `max_backends` backend processes run at once (many workers cloning
  at the same moment queue instead of forking hundreds of processes);
* after each push (`POST .../git-receive-pack`), before its response ends
  (so before `git push` returns), `on_receive_pack(user)` is called: the
  forge picks up what the repository's hooks recorded, as Gitea's hooks do;
* a push whose body is over `max_push_bytes` is read to its end, dropped,
  and answered in git's own framing (pktline.py), so the pusher sees the
  limit named on its terminal; a push git refused before any hook ran
  (fsck, `receive.maxInputSize`: "unpack" failed) is recognised in git's
  answer, before the response ends. Both go to `on_push_refused(user,
  [(old, new, ref)], reason)`; the hooks record their own refusals.
"""

from __future__ import annotations

import base64
import logging
import os
import shutil
import subprocess
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Callable
from urllib.parse import unquote, urlsplit

from agensh_ray.services.forge import pktline
from agensh_ray.services.forge.http_body import COPY, HEAD_BYTES, MAX_BODY, BadRequest, TooLarge, read_body
from agensh_ray.services.http_thread import serve_in_thread

log = logging.getLogger(__name__)

REALM = "agensh"
IDLE_TIMEOUT_S = 300.0
CAPTURE_BYTES = 256 * 1024
"""How much of receive-pack's answer is kept to read its result (the report and messages are small)."""
Refused = Callable[[str, list[tuple[str, str, str]], str], None]


def git_exec_path() -> str:
    """The `git` executable to run (`git http-backend` is a git subcommand)."""
    git = shutil.which("git")
    if git is None:
        raise RuntimeError("git is not installed (need git >= 2.38 on PATH: merges use "
                           "`git merge-tree --write-tree`)")
    return git


class GitHTTPServer:
    """Serve bare repositories under `project_root` over git smart HTTP."""

    def __init__(
        self,
        project_root: Path,
        authenticate: Callable[[str, str], bool],
        host: str = "127.0.0.1",
        port: int = 0,
        repos: tuple[str, ...] = ("repo.git",),
        on_receive_pack: Callable[[str], None] | None = None,
        max_backends: int = 32,
        extra_env: dict[str, str] | None = None,
        max_push_bytes: int | None = None,
        on_push_refused: Refused | None = None,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
    ):
        self.project_root = Path(project_root).resolve()
        self.authenticate = authenticate
        self.host = host
        self.repos = repos
        self.on_receive_pack = on_receive_pack
        self.max_push_bytes = max_push_bytes or MAX_BODY
        self.on_push_refused = on_push_refused
        self.idle_timeout_s = idle_timeout_s
        self._requested_port = port
        self._slots = threading.BoundedSemaphore(max_backends)
        self._git = git_exec_path()
        self._base_env = self._make_env(extra_env or {})
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @staticmethod
    def _make_env(extra: dict[str, str]) -> dict[str, str]:
        """A CGI environment that does not depend on the caller's git setup."""
        env = {"PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/"),
               "LANG": "C", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_TERMINAL_PROMPT": "0",
               "GIT_HTTP_EXPORT_ALL": "1", "GATEWAY_INTERFACE": "CGI/1.1", "SERVER_PROTOCOL": "HTTP/1.1",
               "SERVER_SOFTWARE": "agensh-forge"}
        env.update(extra)
        return env

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> None:
        with self._lock:
            if self._server is not None:
                return
            # many workers may clone at once: a deep listen queue
            self._server, self._thread = serve_in_thread(
                self.host, self._requested_port, self._handler_class(), "agensh-forge-http", request_queue_size=256
            )

    def close(self) -> None:
        with self._lock:
            server, thread = self._server, self._thread
            self._server = self._thread = None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(timeout=5)

    @property
    def running(self) -> bool:
        return self._server is not None

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the git HTTP server is not running: call start() first")
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # ------------------------------------------------------------------ handler

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class Handler(_GitHandler):
            server_ref = outer
            timeout = outer.idle_timeout_s  # per socket operation (socketserver sets it on the connection)

        return Handler


class _GitHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "agensh-forge"
    server_ref: GitHTTPServer

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - stdlib name
        log.debug("%s %s", self.address_string(), format % args)

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    # ---------------------------------------------------------------- helpers

    def _simple(self, code: int, message: str, headers: dict[str, str] | None = None) -> None:
        body = (message.rstrip("\n") + "\n").encode()
        self.send_response(code)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        # The request body (if any) was not read: the connection cannot be reused.
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True

    def _user(self) -> str | None:
        header = self.headers.get("Authorization", "")
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "basic" or not value:
            return None
        try:
            decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            return None
        user, sep, token = decoded.partition(":")
        if not sep or not user:
            return None
        try:
            ok = self.server_ref.authenticate(user, token)
        except Exception:  # never let an auth bug look like success
            log.exception("authenticate() failed")
            ok = False
        return user if ok else None

    # ------------------------------------------------------------------- main

    def _handle(self) -> None:
        srv = self.server_ref
        parts = urlsplit(self.path)
        path = unquote(parts.path)
        repo = path.lstrip("/").split("/", 1)[0]
        if repo not in srv.repos or ".." in path.split("/"):
            self._simple(404, f"not found: {path} (the repository is /{srv.repos[0]})")
            return
        user = self._user()
        if user is None:
            self._simple(
                401,
                "authentication required: use the clone URL the forge gave you "
                "(http://USER:TOKEN@host:port/repo.git)",
                {"WWW-Authenticate": f'Basic realm="{REALM}"'},
            )
            return
        is_push = self.command == "POST" and path.endswith("/git-receive-pack")
        try:
            body, length = read_body(self.headers, self.rfile, srv.max_push_bytes if is_push else MAX_BODY)
        except TooLarge as exc:
            if is_push:
                self._refuse_push(user, exc)
            else:
                self._simple(413, f"request body too large: {exc}")
            return
        except BadRequest as exc:
            self._simple(400, f"bad request: {exc}")
            return
        except TimeoutError:  # the client stopped sending its body
            self.close_connection = True
            return
        try:
            env = dict(srv._base_env)
            env.update(
                {
                    "GIT_PROJECT_ROOT": str(srv.project_root),
                    "PATH_INFO": path,
                    "REQUEST_METHOD": self.command,
                    "QUERY_STRING": parts.query,
                    "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                    "REMOTE_USER": user,
                    "REMOTE_ADDR": self.client_address[0],
                    "AUTH_TYPE": "Basic",
                    "SERVER_NAME": srv.host,
                    "SERVER_PORT": str(srv._server.server_address[1]) if srv._server else "0",
                }
            )
            if body is not None:
                env["CONTENT_LENGTH"] = str(length)
            proto = self.headers.get("Git-Protocol")
            if proto:
                env["GIT_PROTOCOL"] = proto
            head, answer, done = b"", None, []

            def after_push() -> None:  # once, before the response ends: `git push` returns after it
                if is_push and not done:
                    done.append(True)
                    if answer is not None:
                        self._after_push(user, head, bytes(answer))
                    if srv.on_receive_pack is not None:
                        try:
                            srv.on_receive_pack(user)
                        except Exception:
                            log.exception("on_receive_pack callback failed")

            if is_push and body is not None:
                head = body.read(HEAD_BYTES)
                body.seek(0)
                answer = bytearray()
            with srv._slots:
                self._run_backend(env, body, answer, after_push)
            after_push()  # if the client went away before the end
        finally:
            if body is not None:
                body.close()

    def _refused(self, user: str, updates: list[tuple[str, str, str]], reason: str) -> None:
        if self.server_ref.on_push_refused is not None and updates:
            try:
                self.server_ref.on_push_refused(user, updates, reason)
            except Exception:
                log.exception("on_push_refused callback failed")

    def _refuse_push(self, user: str, exc: TooLarge) -> None:
        """A push over the size limit: git's answer, written here (git never saw the push)."""
        updates, caps = pktline.push_commands(exc.head)
        reason, message = pktline.size_refusal(exc.size, exc.limit)
        self._refused(user, updates, reason)
        if not updates or not caps & {"report-status", "report-status-v2"}:
            self._simple(413, message)
            return
        data = pktline.refusal(updates, caps, message, f"push over the {pktline.mib(exc.limit)} limit")
        self.send_response(200)
        self.send_header("Content-Type", "application/x-git-receive-pack-result")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _after_push(self, user: str, head: bytes, answer: bytes) -> None:
        """Report a push git refused before the hooks ran (its objects failed to unpack or check)."""
        reason = pktline.unpack_failure(answer)
        if reason:
            self._refused(user, pktline.push_commands(head)[0], reason)

    def _run_backend(self, env: dict[str, str], body: IO[bytes] | None, answer: bytearray | None = None,
                     before_end: Callable[[], None] | None = None) -> None:
        srv = self.server_ref
        with tempfile.TemporaryFile() as err:
            proc = subprocess.Popen(
                [srv._git, "http-backend"],
                stdin=body if body is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=err,
                env=env,
                cwd=srv.project_root,
            )
            try:
                self._relay(proc, answer, before_end)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True
            finally:
                if proc.poll() is None:
                    try:
                        proc.wait(timeout=600)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait()
                proc.stdout.close()
            err.seek(0)
            stderr = err.read().decode("utf-8", "replace").strip()
            if stderr:
                log.debug("git http-backend: %s", stderr)

    def _relay(self, proc: subprocess.Popen, answer: bytearray | None = None,
               before_end: Callable[[], None] | None = None) -> None:
        """Turn the CGI response on the backend's stdout into an HTTP response (its body's first
        CAPTURE_BYTES also into `answer`). `before_end()` runs once the backend's body is copied and before
        the last chunk is sent (receive-pack's answer has no Content-Length, so it is chunked): what it
        records is there when the client sees the response end."""
        out = proc.stdout
        status = 200
        reason = "OK"
        headers: list[tuple[str, str]] = []
        while True:
            line = out.readline(65536)
            if not line:  # the backend died before finishing its headers
                if not headers:
                    status, reason = 502, "Bad Gateway"
                break
            line = line.rstrip(b"\r\n")
            if not line:
                break
            name, _, value = line.decode("latin-1").partition(":")
            name, value = name.strip(), value.strip()
            if name.lower() == "status":
                code, _, reason = value.partition(" ")
                try:
                    status = int(code)
                except ValueError:
                    status = 500
            else:
                headers.append((name, value))
        self.send_response(status, reason or None)
        has_length = False
        for name, value in headers:
            if name.lower() in ("connection", "transfer-encoding"):
                continue
            if name.lower() == "content-length":
                has_length = True
            self.send_header(name, value)
        chunked = not has_length
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        while True:
            data = out.read1(COPY) if hasattr(out, "read1") else out.read(COPY)
            if not data:
                break
            if answer is not None and len(answer) < CAPTURE_BYTES:
                answer += data[: CAPTURE_BYTES - len(answer)]
            if chunked:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            else:
                self.wfile.write(data)
        if before_end is not None:
            before_end()
        if chunked:
            self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
