"""The fake Gitea's core: its state, one port for REST and git, who is asking
and what they may do, and the dispatch of an API call to the resource that
answers it.

Every API call goes through `handle_api`: the request is contract-checked,
the caller identified (`token X`, `Bearer X`, Basic with a password or a
token, `Sudo` for admins), routed under the one state lock, and the response
contract-checked before it leaves. The resources (users.py, orgs.py,
repos.py, ...) add their routes as mixins of `FakeGitea` (see the package
docstring); this module names only the top-level routes.
"""

from __future__ import annotations

import base64
import hmac
import json
import queue
import secrets
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self
from urllib.parse import parse_qs, unquote, urlsplit

from agensh_ray.services.fakes.contract import ContractChecker
from agensh_ray.services.forge.githttp import GitHTTPServer, _GitHandler, git_exec_path

API = "/api/v1"
VERSION = "1.27.1"


def iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def page(items: list, q: dict) -> list:
    """One page of a list endpoint (`page`, `limit` <= 50, as Gitea caps it)."""
    limit = max(1, min(int(q.get("limit", 30)), 50))
    number = max(1, int(q.get("page", 1)))
    return items[(number - 1) * limit: number * limit]


class ApiError(Exception):
    """An API answer other than success: the status, and Gitea's message (none for a bare 404/403).
    Raised by any resource, turned into the response by `handle_api`; it never leaves the fake."""

    def __init__(self, status: int, message: str = ""):
        self.status, self.message = status, message


class GiteaServer:
    """The state every resource reads and writes (under `_lock`), the lifecycle, auth and dispatch.
    Start with `start()`; `url`, `admin_token`, `violations`, `deliveries` for the tests."""

    def __init__(self, root: Path, host: str = "127.0.0.1", port: int = 0, check_delay_s: float = 0.0,
                 contract: bool = True):
        self.root = Path(root).resolve()
        (self.root / "repos").mkdir(parents=True, exist_ok=True)
        self.contract = ContractChecker("gitea") if contract else None
        self.check_delay_s = check_delay_s
        self._lock = threading.RLock()
        self._git = git_exec_path()
        self._ids = iter(range(1, 10**9))
        self.users: dict[str, dict] = {}
        self.tokens: dict[str, dict] = {}
        self.orgs: dict[str, dict] = {}
        self.repos: dict[tuple[str, str], dict] = {}
        self._memo: dict[tuple, object] = {}
        self.deliveries: list[dict] = []
        """Every webhook delivery attempted: event, status (or error), url."""
        self.requests: list[tuple[str, str, int]] = []
        """(method, path, status) of every API call, in order."""
        self.before_merge: Callable[[dict, dict], None] | None = None
        self._checks_open = threading.Event()
        self._checks_open.set()
        self._check_q: queue.Queue = queue.Queue()
        self._hook_q: queue.Queue = queue.Queue()
        self._served = threading.Condition()
        admin = self._new_user("gitea_admin", "admin@fake.invalid", secrets.token_hex(12), is_admin=True)
        self.admin_login = admin["login"]
        self.admin_token = self._new_token(admin["login"], "bootstrap-admin", ["all"])["sha1"]
        self._http = _Server(self)
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> Self:
        self._http.start()
        for name, fn in (("gitea-checker", self._checker), ("gitea-hooks", self._hook_sender)):
            t = threading.Thread(target=fn, name=name, daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def close(self) -> None:
        self._stop.set()
        self._checks_open.set()
        self._check_q.put(None)
        self._hook_q.put(None)
        self._http.close()
        for t in self._threads:
            t.join(timeout=5)

    @property
    def url(self) -> str:
        return self._http.url

    @property
    def violations(self) -> list:
        return list(self.contract.violations) if self.contract else []

    def hold_checks(self) -> None:
        """Keep new mergeability checks pending (PRs stay `checking`) until release_checks()."""
        self._checks_open.clear()

    def release_checks(self) -> None:
        self._checks_open.set()

    def wait_for_request(self, method: str, path_part: str, status: int, timeout: float = 10.0) -> bool:
        """Block until an API call matching (method, path containing path_part, status) was served."""
        def seen():
            return any(m == method and path_part in p and s == status for m, p, s in self.requests)
        with self._served:
            return self._served.wait_for(seen, timeout)

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Wait until queued checks and webhook deliveries are done."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._check_q.unfinished_tasks == 0 and self._hook_q.unfinished_tasks == 0:
                return True
            time.sleep(0.02)
        return False

    # --------------------------------------------------------------------- auth

    def authenticate_git(self, user: str, secret: str) -> bool:
        u = self.users.get(user.lower())
        if u is None:
            return False
        if hmac.compare_digest(u["password"], secret):
            return True
        tok = self.tokens.get(secret)
        return tok is not None and tok["login"].lower() == user.lower()

    def _whoami(self, headers) -> tuple[str | None, str]:
        """(login, how) from Authorization: `token X`, `Bearer X` or Basic user:password|token."""
        auth = headers.get("Authorization", "")
        scheme, _, value = auth.partition(" ")
        scheme = scheme.lower()
        login, how = None, "none"
        if scheme in ("token", "bearer"):
            tok = self.tokens.get(value.strip())
            if tok is None:
                raise ApiError(401, "user does not exist [uid: 0, name: ]")
            login, how = tok["login"], "token"
        elif scheme == "basic":
            try:
                user, _, pw = base64.b64decode(value).decode().partition(":")
            except ValueError:
                raise ApiError(401, "invalid basic authentication") from None
            u = self.users.get(user.lower())
            if u is None or not self.authenticate_git(user, pw):
                raise ApiError(401, "user's password is invalid [uid: 0, name: ]")
            login, how = u["login"], ("basic" if hmac.compare_digest(u["password"], pw) else "token")
        sudo = headers.get("Sudo")
        if sudo and login and self.users[login.lower()]["is_admin"]:
            if sudo.lower() not in self.users:
                raise ApiError(404, f"user does not exist [name: {sudo}]")
            login = self.users[sudo.lower()]["login"]
        return login, how

    def _perm(self, r: dict, login: str | None) -> str | None:
        if login is None:
            return None if r["private"] else "read"
        u = self.users[login.lower()]
        if u["is_admin"] or r["owner"].lower() == login.lower() or login.lower() in r["org_owners"]:
            return "admin"
        return r["collaborators"].get(login.lower(), None if r["private"] else "read")

    def git_may_push(self, path: str, user: str) -> bool:
        parts = path.strip("/").split("/")
        if len(parts) < 2:
            return False
        r = self.repos.get((parts[0].lower(), parts[1].removesuffix(".git").lower()))
        return r is not None and self._perm(r, user) in ("write", "admin")

    # --------------------------------------------------------------------- API

    def handle_api(self, method: str, raw_path: str, headers, body: bytes) -> tuple[int, Any, str]:
        """One API call: (status, JSON-able body or text, content type)."""
        parts = urlsplit(raw_path)
        path = unquote(parts.path)
        query = parse_qs(parts.query, keep_blank_values=True)
        op = self.contract.check_request(method, path, query, body) if self.contract else None
        try:
            me, how = self._whoami(headers)
            data = json.loads(body) if body else None
            status, out = self._route(method, path[len(API):], {k: v[-1] for k, v in query.items()}, data, me, how)
        except ApiError as exc:
            status, out = exc.status, ({"message": exc.message, "url": f"{self.url}/api/swagger"} if exc.message else None)
        except (ValueError, KeyError, TypeError) as exc:
            status, out = 422, {"message": f"invalid request: {exc}", "url": f"{self.url}/api/swagger"}
        ctype = "text/plain; charset=utf-8" if isinstance(out, str) else "application/json;charset=utf-8"
        if self.contract and op is not None:
            self.contract.check_response(op, status, out, raw_text=isinstance(out, str))
        with self._served:
            self.requests.append((method, path, status))
            self._served.notify_all()
        return status, out, ctype

    def _route(self, method: str, path: str, q: dict, data: Any, me: str | None, how: str) -> tuple[int, Any]:
        seg = [s for s in path.split("/") if s]
        with self._lock:
            if seg == ["version"]:
                return 200, {"version": VERSION}
            if me is None:
                raise ApiError(401, "token is required")
            if seg == ["user"] and method == "GET":
                return 200, self._user_json(self.users[me.lower()])
            if seg[:2] == ["admin", "users"]:
                return self._admin_users(method, seg[2:], data, me)
            if seg[:1] == ["users"] and len(seg) >= 2:
                return self._users(method, seg[1], seg[2:], data, me, how)
            if seg[:1] == ["orgs"]:
                return self._orgs(method, seg[1:], data, me)
            if seg[:1] == ["repos"] and len(seg) >= 3:
                r = self.repos.get((seg[1].lower(), seg[2].lower()))
                if r is None or self._perm(r, me) is None:
                    raise ApiError(404, "")
                return self._repo(method, r, seg[3:], q, data, me)
        raise ApiError(404, "")

    def _require_admin(self, me: str) -> None:
        if not self.users[me.lower()]["is_admin"]:
            raise ApiError(403, "reqSiteAdmin")


class _Owners(set):
    """The owners whose repositories git may serve (GitHTTPServer checks `first segment in repos`)."""

    def __getitem__(self, index: int) -> str:
        return "<owner>/<repo>.git"


class _Server(GitHTTPServer):
    """One port for both: /api/v1/... is the REST API, /<owner>/<repo>.git/... is git."""

    def __init__(self, fake: GiteaServer):
        self.owners = _Owners()
        super().__init__(fake.root / "repos", fake.authenticate_git, repos=self.owners, on_receive_pack=fake._on_push)
        self.fake = fake

    def _handler_class(self):
        outer = self

        class Handler(_FakeGiteaHandler):
            server_ref = outer

        return Handler


class _FakeGiteaHandler(_GitHandler):
    server_ref: _Server

    def _dispatch(self) -> None:
        srv = self.server_ref
        path = urlsplit(self.path).path
        if path.startswith(API + "/") or path == API:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            status, out, ctype = srv.fake.handle_api(self.command, self.path, self.headers, body)
            data = b"" if out is None else (out.encode() if isinstance(out, str) else json.dumps(out).encode())
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        is_push = path.endswith("/git-receive-pack") or "service=git-receive-pack" in self.path
        if is_push:
            user = self._user()
            if user is not None and not srv.fake.git_may_push(path, user):
                self._simple(403, f"User permission denied for writing: {user} cannot push to {path.split('/info')[0]}")
                return
        self._handle()

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _dispatch
