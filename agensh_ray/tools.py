"""The infra tools an agent sees: board, chat and forge over MCP (streamable
HTTP, the official `mcp` SDK).

One server per WorkerActor serves all of its workers; a worker is identified
by its URL path ``/w/<worker_id>/<token>/mcp`` (every ACP agent can be given a
URL, not every one can be given headers), or by ``/w/<worker_id>/mcp`` and the
token in a header (CLIs that keep the URL in their logs: Claude Code). Results
are plain text, and pending urgent events for the caller (DMs, new board
entries, FAILs) are appended to every result: that is how a message reaches an
agent mid-turn.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import uvicorn
from mcp.server import MCPServer
from mcp.server.mcpserver import Context

from agensh_ray.errors import ToolFailure
from agensh_ray.render import MARKERS, fmt_claims, fmt_entry, fmt_error, fmt_message, fmt_pr, fmt_unfold
from agensh_ray.seams import Infra

log = logging.getLogger(__name__)


def build_server(infra: Infra, without: frozenset[str] = frozenset()) -> MCPServer:
    """The MCP server with every infra tool but those named in `without` (a run without the board or chat
    tools: the baseline, an ablation); the worker comes from the request scope."""
    server = MCPServer("agensh-infra",
                       instructions=f"Board, chat and forge tools shared by every worker of the run. {MARKERS}")

    def tool(fn: Callable[..., Awaitable[str]] | None = None, *, shows_workers_text: bool = False):
        """Register `fn` as a tool; `shows_workers_text`: its description also says how a worker's text
        is marked in its result."""
        if fn is None:
            return lambda f: tool(f, shows_workers_text=shows_workers_text)
        name = fn.__name__
        if name in without:
            return fn
        description = f"{fn.__doc__} {MARKERS}" if shows_workers_text else fn.__doc__

        async def wrapper(ctx: Context, **kwargs) -> str:
            worker = _worker_of(ctx)
            t0 = time.perf_counter()
            error = None
            try:
                text = await fn(worker, **kwargs)
            except ToolFailure as exc:
                error = str(exc)
                text = fmt_error(exc)
            except Exception as exc:  # an infra fault must not look like success, nor kill the server
                log.exception("tool %s failed for %s", name, worker)
                error = f"{type(exc).__name__}: {exc}"
                text = f"ERROR: {name} failed: {error}. Try again in a moment."
            infra.record_tool_call(worker, name, (time.perf_counter() - t0) * 1000, error is None, error)
            urgent = infra.pending_urgent(worker)
            if urgent:
                text += "\n\n" + urgent
            return text

        # Expose the original signature (minus the worker) to the SDK for the input schema.
        import inspect

        sig = inspect.signature(fn)
        params = [p for p in sig.parameters.values() if p.name != "worker"]
        ctx_param = inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=Context)
        wrapper.__signature__ = sig.replace(parameters=[*params, ctx_param], return_annotation=str)
        wrapper.__name__ = name
        wrapper.__doc__ = fn.__doc__
        wrapper.__annotations__ = {**{p.name: p.annotation for p in params}, "ctx": Context, "return": str}
        server.add_tool(wrapper, name=name, description=description, structured_output=False)

    @tool
    async def board_write(worker: str, type: str, text: str, detail: str | None = None) -> str:
        """Add an entry to the shared board. type: OBSERVED (something you noticed), FACT (verified), FAIL
        (something that failed, so nobody repeats it), CLAIM (the sub-task you take, <= 100 chars),
        PATCH_SUMMARY (what your merged PR did, <= 300 chars). Other types: text <= 100 chars. text is one
        line (no line breaks or control characters); put longer material, on as many lines as you like,
        in detail."""
        e = await infra.board_write(worker, type, text, detail)
        return f"written: {fmt_entry(e)}"

    @tool(shows_workers_text=True)
    async def board_read(worker: str, limit: int = 200) -> str:
        """The recent board (newest last): claims, facts, failures and patch summaries of every worker.
        limit: 1 to 2000 entries."""
        entries = await infra.board_read(worker, limit)
        return "\n".join(fmt_entry(e) for e in entries) or "(the board is empty)"

    @tool(shows_workers_text=True)
    async def board_unfold(worker: str, seq: int) -> str:
        """The full entry with its detail (seq: the entry's number, #seq on the board)."""
        return fmt_unfold(await infra.board_unfold(worker, seq))

    @tool(shows_workers_text=True)
    async def board_grep(worker: str, pattern: str, regex: bool = True, limit: int = 50) -> str:
        """Search the full board history (text and detail, case-insensitive), newest first. pattern: a
        regular expression in RE2 syntax (no lookarounds or backreferences), or a plain substring with
        regex=false. limit: 1 to 500 entries."""
        entries = await infra.board_grep(worker, pattern, regex, limit)
        return "\n".join(fmt_entry(e) for e in entries) or f"(no entry matches {pattern!r})"

    @tool(shows_workers_text=True)
    async def board_claims(worker: str, key: str = "") -> str:
        """The open claims, oldest first, from the board's claim index (whatever the board's size). key: what a
        CLAIM names before its colon (`claim tac: textkit/commands/tac.py` has key tac); empty: every open claim.
        The first claim on a key holds it; a later claimant backs off and DMs the holder. A claim stays open while
        its holder works (any board entry or PR action renews it) until released (FAIL `release KEY: why`),
        summarised (PATCH_SUMMARY `KEY: ...`) or replaced by the holder's next CLAIM."""
        return fmt_claims(await infra.board_claims(worker, key), key.strip() or None)

    @tool
    async def send_dm(worker: str, to: str, text: str) -> str:
        """Direct message to one worker (e.g. w003). Only when the two of you would change the same thing."""
        m = await infra.send_dm(worker, to, text)
        return f"sent: {fmt_message(m)}"

    @tool
    async def channel_post(worker: str, text: str) -> str:
        """Post on the task channel that every worker reads at its next turn."""
        m = await infra.channel_post(worker, text)
        return f"posted: {fmt_message(m)}"

    @tool(shows_workers_text=True)
    async def read_messages(worker: str, limit: int = 30) -> str:
        """Recent channel posts and your direct messages (limit: 1 to 1000 messages)."""
        msgs = await infra.read_messages(worker, limit)
        return "\n".join(fmt_message(m) for m in msgs) or "(no messages)"

    @tool
    async def pr_create(worker: str, head: str, title: str, body: str = "") -> str:
        """Open a pull request from a branch you pushed (head) into main."""
        pr = await infra.pr_create(worker, head, title, body)
        return f"opened: {fmt_pr(pr)}"

    @tool(shows_workers_text=True)
    async def pr_list(worker: str, state: str = "open") -> str:
        """Pull requests by state: open, merged, closed or all."""
        prs = await infra.pr_list(worker, state)
        return "\n".join(fmt_pr(p) for p in prs) or f"(no {state} pull requests)"

    @tool(shows_workers_text=True)
    async def pr_view(worker: str, number: int) -> str:
        """One pull request with its reviews, comments, files and diff."""
        return fmt_pr(await infra.pr_view(worker, number), long=True)

    @tool
    async def pr_review(worker: str, number: int, verdict: str, body: str = "") -> str:
        """Review a pull request: verdict approve, comment or request_changes."""
        pr = await infra.pr_review(worker, number, verdict, body)
        return f"reviewed: {fmt_pr(pr)}"

    @tool
    async def pr_comment(worker: str, number: int, body: str) -> str:
        """Comment on a pull request (mention a worker with @w003 to notify it)."""
        pr = await infra.pr_comment(worker, number, body)
        return f"commented: {fmt_pr(pr)}"

    @tool
    async def pr_merge(worker: str, number: int) -> str:
        """Merge a pull request into main. On a conflict you get the files: merge main into the branch,
        resolve, push, and merge again."""
        pr = await infra.pr_merge(worker, number)
        return f"merged: {fmt_pr(pr)} as {pr.merge_commit}"

    @tool
    async def issue_view(worker: str, number: int = 1) -> str:
        """An issue of the forge; issue #1 is the task."""
        return await infra.issue_view(worker, number)

    server._agensh_infra = infra  # type: ignore[attr-defined]
    return server


def _worker_of(ctx: Context) -> str:
    req = ctx.request_context.request
    worker = req.scope.get("agensh_worker") if req is not None else None
    if not worker:
        raise ToolFailure("this MCP endpoint is not bound to a worker; use the URL given in session/new")
    return worker


KEEP_ALIVE_S = 300
"""How long the tool server keeps an idle HTTP connection open. Longer than any agent's HTTP client keeps one
(httpx, the Python MCP SDK's: 5 s; Node's undici: 4 s; Rust's reqwest: 90 s), so the client always closes an
idle connection first. With uvicorn's default (5 s, the same as httpx's) both ends closed at once: a client
could send its next request into a connection the server had just closed, and through a sandbox's relay
(agensh_ray/agent/relay.py), where the close reaches the agent only after both relay hops have seen it, that
window lasted as long as the host's loop lagged. The request then failed with "Server disconnected without
sending a response" (an MCP "Connection closed"): 1,024 sandboxed sim workers lost 224 tool calls so."""

TOKEN_HEADER = "authorization"
"""The header that carries a worker's token (``Bearer <token>``) when its URL does not (``/w/<worker>/mcp``): the
standard one, which Claude Code keeps out of its MCP logs ("[REDACTED]")."""


class ToolServer:
    """Serves the infra tools on loopback inside the host's event loop.

    URL of a worker: ``http://127.0.0.1:<port>/w/<worker>/<token>/mcp``, or
    ``/w/<worker>/mcp`` with ``Authorization: Bearer <token>``. A path
    with an unknown worker or a wrong token gets 404.
    """

    def __init__(self, infra: Infra, host: str = "127.0.0.1", port: int = 0, without: frozenset[str] = frozenset()):
        self.infra = infra
        self.host = host
        self._port = port
        self._inner = build_server(infra, without).streamable_http_app(streamable_http_path="/mcp")
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task | None = None
        self.hits: dict[str, int] = {}
        """HTTP requests per worker (MCP initialize, list, calls): shows whether an agent connected at all."""

    async def _app(self, scope, receive, send):
        if scope["type"] == "http":
            parts = scope["path"].split("/")
            # ['', 'w', worker, token, 'mcp', ...], or ['', 'w', worker, 'mcp', ...] with the token in a header
            if len(parts) >= 4 and parts[3] == "mcp":
                value = dict(scope.get("headers") or []).get(TOKEN_HEADER.encode(), b"").decode("latin-1")
                token = value[7:].strip() if value[:7].lower() == "bearer " else ""
                parts.insert(3, token if token.isascii() else "")
            if len(parts) < 5 or parts[1] != "w" or not parts[3] or not self.infra.check_token(parts[2], parts[3]):
                await _not_found(send)
                return
            self.hits[parts[2]] = self.hits.get(parts[2], 0) + 1
            scope = dict(scope, path="/" + "/".join(parts[4:]), agensh_worker=parts[2])
        await self._inner(scope, receive, send)

    async def start(self) -> None:
        import socket

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self._port))
        self._port = sock.getsockname()[1]
        config = uvicorn.Config(self._app, log_level="warning", lifespan="on", access_log=False, interface="asgi3",
                                timeout_keep_alive=KEEP_ALIVE_S)
        self._server = uvicorn.Server(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]), name="mcp-tool-server")
        while not self._server.started:
            if self._task.done():
                self._task.result()
            await asyncio.sleep(0.01)

    def url(self, worker: str, token: str) -> str:
        return f"http://{self.host}:{self._port}/w/{worker}/{token}/mcp"

    async def close(self) -> None:
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            try:
                await asyncio.wait_for(self._task, timeout=5)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                self._task.cancel()
            self._server = None


async def _not_found(send) -> None:
    body = b"unknown worker endpoint"
    await send({"type": "http.response.start", "status": 404,
                "headers": [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
