"""The providers' wire formats, as far as the gateway needs to read them: which API a path is,
the model asked for, the usage the provider reports (plain JSON or a server-sent-event stream),
whether a stream ended properly, and an error body the agent's CLI understands.

The bytes themselves pass through unchanged. One exception: an OpenAI chat-completions stream
that did not ask for usage (``stream_options.include_usage``) is asked for it upstream, and the
extra usage chunk is taken out of what the agent receives, so the agent sees the stream it asked for
and the gateway still counts the provider's tokens.

What a maintained library offers here (LiteLLM's stream wrappers) turns every chunk into its own
response objects; the gateway only needs the few events that carry usage, so it scans lines for the
word and parses those (bench/gateway.py measures the gateway's CPU per request).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from agensh_ray.services.gateway.prices import Usage

PROVIDERS = ("openai", "anthropic", "gemini")
"""The gateway's routes: /<provider>/<the provider's own path>."""

MODEL_APIS = ("chat", "responses", "messages", "generate")
"""The APIs whose calls are model calls (limited, budgeted, counted, one llm_calls row each)."""


def api_of(provider: str, path: str) -> str | None:
    """The model API a request path calls (None: a side route passed through uncounted, e.g. /models)."""
    p = path.split("?", 1)[0].rstrip("/")
    if provider == "openai":
        if p.endswith("/chat/completions"):
            return "chat"
        if p.endswith("/responses"):
            return "responses"
    elif provider == "anthropic":
        if p.endswith("/messages"):
            return "messages"
    elif provider == "gemini":
        if p.endswith(":generateContent") or p.endswith(":streamGenerateContent"):
            return "generate"
    return None


def model_of(provider: str, path: str, body: dict[str, Any]) -> str:
    """The model a request asks for (Gemini names it in the path: .../models/<model>:generateContent)."""
    if provider == "gemini":
        tail = path.split("?", 1)[0].rsplit("/models/", 1)[-1]
        return tail.split(":", 1)[0]
    model = body.get("model")
    return model if isinstance(model, str) else ""


def is_stream(provider: str, path: str, body: dict[str, Any]) -> bool:
    if provider == "gemini":
        return ":streamGenerateContent" in path
    return bool(body.get("stream"))


def ask_for_usage(api: str, body: dict[str, Any]) -> bool:
    """Make an OpenAI chat stream report usage; True if the request had not asked (strip it on the way back)."""
    if api != "chat" or not body.get("stream"):
        return False
    opts = body.get("stream_options")
    if isinstance(opts, dict) and opts.get("include_usage"):
        return False
    body["stream_options"] = {**(opts if isinstance(opts, dict) else {}), "include_usage": True}
    return True


def usage_of(api: str, obj: Any) -> dict[str, int] | None:
    """The usage fields one JSON object (a whole response or one stream event) carries, normalised."""
    if not isinstance(obj, dict):
        return None
    if api == "chat":
        u = obj.get("usage")
        if isinstance(u, dict):
            details = u.get("prompt_tokens_details") or {}
            return {"input": u.get("prompt_tokens") or 0, "output": u.get("completion_tokens") or 0,
                    "cached": details.get("cached_tokens") or 0}
    elif api == "responses":
        r = obj.get("response") if obj.get("type", "").startswith("response.") else obj
        u = r.get("usage") if isinstance(r, dict) else None
        if isinstance(u, dict):
            details = u.get("input_tokens_details") or {}
            return {"input": u.get("input_tokens") or 0, "output": u.get("output_tokens") or 0,
                    "cached": details.get("cached_tokens") or 0}
    elif api == "messages":
        u = obj.get("usage")
        if u is None and isinstance(obj.get("message"), dict):
            u = obj["message"].get("usage")
        if isinstance(u, dict):
            read = u.get("cache_read_input_tokens") or 0
            write = u.get("cache_creation_input_tokens") or 0
            out = {"output": u.get("output_tokens") or 0, "cached": read, "write": write}
            if "input_tokens" in u:  # Anthropic counts input without the cache parts; we count them in
                out["input"] = (u.get("input_tokens") or 0) + read + write
            return out
    elif api == "generate":
        u = obj.get("usageMetadata")
        if isinstance(u, dict):
            return {"input": u.get("promptTokenCount") or 0,
                    "output": (u.get("candidatesTokenCount") or 0) + (u.get("thoughtsTokenCount") or 0),
                    "cached": u.get("cachedContentTokenCount") or 0}
    return None


def model_in(api: str, obj: Any) -> str | None:
    """The model the provider says answered (it may differ from the one asked for: an alias, a version)."""
    if not isinstance(obj, dict):
        return None
    if api == "messages" and isinstance(obj.get("message"), dict):
        obj = obj["message"]
    if api == "responses" and isinstance(obj.get("response"), dict):
        obj = obj["response"]
    m = obj.get("modelVersion") if api == "generate" else obj.get("model")
    return m if isinstance(m, str) and m else None


TERMINAL = {
    "chat": (b"[DONE]",),
    "responses": (b'"response.completed"', b'"response.incomplete"', b'"response.failed"'),
    "messages": (b'"message_stop"',),
    "generate": (),  # Gemini's stream just ends; its end is the end of the body
}
"""The markers of a stream's end as each protocol defines it."""

ANSWERED = {
    "chat": re.compile(rb'"finish_reason"\s*:\s*"'),
    "responses": None,
    "messages": re.compile(rb'"stop_reason"\s*:\s*"'),
    "generate": re.compile(rb'"finishReason"\s*:\s*"'),
}
"""What says the answer itself is whole before the stream's end marker: an OpenAI chat chunk with a
`finish_reason` (what follows is the usage chunk and `[DONE]`, which a client may not wait for), Anthropic's
`message_delta` with its `stop_reason` (then `message_stop`), a Gemini candidate with its `finishReason` (the last
chunk). The Responses API's answer is whole with `response.completed` (its end marker)."""


@dataclass
class Meter:
    """Reads a response as it passes: usage, the model that answered, whether a stream finished, and
    an error the provider reported inside a stream (Anthropic's `event: error`)."""

    api: str
    stream: bool
    strip_usage: bool = False
    """Drop the usage-only chunk the gateway asked for (see `ask_for_usage`)."""
    fields: dict[str, int] = field(default_factory=dict)
    model: str | None = None
    finished: bool = False
    """The stream's end marker (or a plain body's end) was read."""
    answer_whole: bool = False
    """The answer is whole as the protocol defines it (see ANSWERED): a client that hangs up now has its answer."""
    stream_error: str | None = None
    _tail: bytes = b""
    _skip_blank: bool = False
    _body: list[bytes] = field(default_factory=list)

    def feed(self, chunk: bytes) -> bytes:
        """Take a chunk of the body; returns what to pass on to the agent (the chunk itself, unless the
        usage chunk is being stripped: then whole lines, the usage event left out)."""
        if not self.stream:
            self._body.append(chunk)
            return chunk
        data = self._tail + chunk
        cut = data.rfind(b"\n")
        if cut < 0:
            self._tail = data
            return b"" if self.strip_usage else chunk
        lines, self._tail = data[: cut + 1], data[cut + 1 :]
        term = TERMINAL[self.api]
        if term and not self.finished and any(t in lines for t in term):
            self.finished = self.answer_whole = True
        if not self.answer_whole and (marker := ANSWERED[self.api]) is not None and marker.search(lines):
            self.answer_whole = True
        if b"usage" in lines or b"error" in lines or (self.model is None and b"model" in lines):
            kept = self._events(lines)
            return kept if self.strip_usage else chunk
        if self.strip_usage:
            return self._blank(lines)
        return chunk

    def _events(self, lines: bytes) -> bytes:
        keep: list[bytes] = []
        for line in lines.splitlines(keepends=True):
            if self._skip_blank:
                self._skip_blank = False
                if not line.strip():
                    continue
            if line.startswith(b"data:") and (b"usage" in line or b"error" in line or
                                              (self.model is None and b"model" in line)):
                try:
                    obj = json.loads(line[5:])
                except ValueError:
                    obj = None
                self._take(obj)
                if self.strip_usage and isinstance(obj, dict) and obj.get("choices") == [] and "usage" in obj:
                    self._skip_blank = True  # the blank line that ends the dropped event goes too
                    continue
            keep.append(line)
        return b"".join(keep)

    def _blank(self, lines: bytes) -> bytes:
        if self._skip_blank:
            self._skip_blank = False
            first, sep, rest = lines.partition(b"\n")
            if not first.strip():
                return rest
        return lines

    def _take(self, obj: Any) -> None:
        u = usage_of(self.api, obj)
        if u:
            for k, v in u.items():
                self.fields[k] = max(self.fields.get(k, 0), int(v))
        if self.model is None:
            self.model = model_in(self.api, obj)
        if isinstance(obj, dict) and obj.get("type") == "error" and self.stream_error is None:
            err = obj.get("error") or {}
            self.stream_error = f"{err.get('type', 'error')}: {err.get('message', '')}".strip()

    def answered(self) -> bool:
        """Whether the client has received a whole answer by the provider's protocol: a stream's last content
        event (ANSWERED) or end marker, or a plain body that parses whole. Read when the client hung up."""
        if self.stream:
            return self.answer_whole or self.finished
        if not self.finished:
            try:
                obj = json.loads(b"".join(self._body))
            except ValueError:
                return False
            self._take(obj)
            self.finished = True
        return True

    def close(self) -> bytes:
        """The body ended: read a plain response whole (streams were read as they passed). Returns what
        is still to pass on (a last line without a newline, held back while stripping)."""
        if not self.stream:
            try:
                self._take(json.loads(b"".join(self._body) or b"null"))
            except ValueError:
                pass
            self.finished = True
            return b""
        if self.api == "generate":
            self.finished = True
        rest, self._tail = self._tail, b""
        if rest.startswith(b"data:"):
            try:
                self._take(json.loads(rest[5:]))
            except ValueError:
                pass
        return rest if self.strip_usage else b""

    def usage(self) -> Usage:
        f = self.fields
        return Usage(input_tokens=f.get("input", 0), output_tokens=f.get("output", 0),
                     cached_tokens=f.get("cached", 0), cache_write_tokens=f.get("write", 0))


def error_body(provider: str, status: int, message: str, kind: str) -> bytes:
    """An error in the provider's own shape, so the agent's CLI shows `message` as the provider's."""
    if provider == "anthropic":
        return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()
    if provider == "gemini":
        names = {401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 429: "RESOURCE_EXHAUSTED", 502: "UNAVAILABLE"}
        return json.dumps({"error": {"code": status, "message": message,
                                     "status": names.get(status, "INTERNAL")}}).encode()
    return json.dumps({"error": {"message": message, "type": kind, "code": kind}}).encode()


def error_text(body: bytes, limit: int = 300) -> str:
    """The message of a provider's error body (any of the three shapes), else its first characters."""
    try:
        obj = json.loads(body)
    except ValueError:
        return body[:limit].decode(errors="replace").strip()
    if isinstance(obj, dict):
        err = obj.get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:limit]
        if isinstance(err, str):
            return err[:limit]
    return body[:limit].decode(errors="replace").strip()
