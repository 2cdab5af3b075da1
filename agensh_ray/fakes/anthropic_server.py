"""A deterministic stand-in for the Anthropic Messages API (what Claude Code,
through its ACP adapter `claude-code-acp`, talks to with ``ANTHROPIC_BASE_URL``).

``POST /v1/messages`` (streaming events and plain JSON) answers from a
`Script`; ``POST /v1/messages/count_tokens`` gives a rough count; ``GET
/v1/models`` lists the model. Claude Code also asks the model small side
questions without tools (titles, topic checks): those get the script's
`side` text. Every request is recorded.

    python -m agensh_ray.fakes.anthropic_server --script script.json --port 8556
    ANTHROPIC_BASE_URL=http://127.0.0.1:8556 ANTHROPIC_API_KEY=sk-ant-fake ...
"""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any

from agensh_ray.fakes.endpoint import FakeEndpoint, Recorded, run_cli
from agensh_ray.fakes.replies import estimate_tokens, send_json
from agensh_ray.fakes.faults import split_text
from agensh_ray.fakes.script import Call, Message, Reply

MODEL = "claude-sonnet-4-5-20250929"


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for b in content:
            if isinstance(b, dict) and b.get("type") == "text":
                parts.append(b.get("text", ""))
            elif isinstance(b, dict) and b.get("type") == "tool_result":
                parts.append(_text(b.get("content")))
        return "\n".join(parts)
    return str(content)


class FakeAnthropic(FakeEndpoint):
    """Fake Anthropic Messages endpoint driven by a script."""

    name = "anthropic"
    base_path = ""
    call_prefix = "toolu"

    def handles(self, path: str) -> bool:
        return path.rstrip("/").endswith("/messages")

    def handle_get(self, h: BaseHTTPRequestHandler) -> None:
        if h.path.split("?")[0].rstrip("/").endswith("/models"):
            send_json(h, 200, {"data": [{"type": "model", "id": MODEL, "display_name": "Fake Sonnet",
                                         "created_at": "2025-09-29T00:00:00Z"}], "has_more": False,
                               "first_id": MODEL, "last_id": MODEL})
        else:
            super().handle_get(h)

    def handle_post(self, h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        if h.path.split("?")[0].rstrip("/").endswith("/count_tokens"):
            send_json(h, 200, {"input_tokens": estimate_tokens(body.get("messages", []))})
            return
        super().handle_post(h, body)

    def conversation(self, body: dict[str, Any]) -> list[Message]:
        out: list[Message] = []
        system = body.get("system")
        if system:
            out.append(Message("system", _text(system)))
        for m in body.get("messages", []):
            content = m.get("content")
            blocks = content if isinstance(content, list) else [{"type": "text", "text": content or ""}]
            if m.get("role") == "assistant":
                calls = [Call(b.get("id", ""), b.get("name", ""), b.get("input") or {})
                         for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use"]
                text = "\n".join(b.get("text", "") for b in blocks if isinstance(b, dict) and b.get("type") == "text")
                out.append(Message("assistant", text, calls))
                continue
            results = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
            if results:
                out.extend(Message("result", _text(b.get("content"))) for b in results)
            else:
                out.append(Message("prompt", _text(blocks)))
        return out

    def tools(self, body: dict[str, Any]) -> list[str]:
        return [t.get("name", "") for t in body.get("tools") or [] if t.get("name")]

    def error(self, h: BaseHTTPRequestHandler, status: int, message: str, retry_after: float | None,
              limited: bool) -> None:
        kind = {429: "rate_limit_error", 401: "authentication_error", 529: "overloaded_error"}.get(status, "api_error")
        data = json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()
        h.send_response(status)
        h.send_header("content-type", "application/json")
        h.send_header("content-length", str(len(data)))
        if retry_after is not None:
            h.send_header("retry-after", str(max(1, round(retry_after))))
        if limited:
            h.send_header("anthropic-ratelimit-requests-remaining", "0")
        h.end_headers()
        h.wfile.write(data)

    def respond(self, h: BaseHTTPRequestHandler, body: dict[str, Any], reply: Reply, rec: Recorded) -> None:
        model = body.get("model") or MODEL
        mid = f"msg_{reply.worker or 'x'}_{reply.turn}_{reply.step}"
        content: list[dict[str, Any]] = []
        if reply.text:
            content.append({"type": "text", "text": reply.text})
        for c in reply.calls:
            content.append({"type": "tool_use", "id": c.id, "name": c.name, "input": c.args})
        stop = "tool_use" if reply.calls else "end_turn"
        usage = {"input_tokens": estimate_tokens(body.get("messages", [])),
                 "output_tokens": estimate_tokens(json.dumps(content)),
                 "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
        rec.usage = {"input": usage["input_tokens"], "output": usage["output_tokens"]}
        if not body.get("stream"):
            send_json(h, 200, {"id": mid, "type": "message", "role": "assistant", "model": model, "content": content,
                               "stop_reason": stop, "stop_sequence": None, "usage": usage})
            return
        pieces = {i: split_text(b["text"], self.pieces) for i, b in enumerate(content) if b["type"] == "text"}
        events = 3 + sum(2 + len(p) for p in pieces.values()) + 3 * (len(content) - len(pieces))
        sse = self.stream(h, reply, events)
        sse.send({"type": "message_start", "message": {
            "id": mid, "type": "message", "role": "assistant", "model": model, "content": [], "stop_reason": None,
            "stop_sequence": None, "usage": {**usage, "output_tokens": 1}}}, event="message_start")
        for i, block in enumerate(content):
            if block["type"] == "text":
                sse.send({"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}},
                         event="content_block_start")
                for piece in pieces[i]:
                    sse.send({"type": "content_block_delta", "index": i,
                              "delta": {"type": "text_delta", "text": piece}}, event="content_block_delta")
            else:
                sse.send({"type": "content_block_start", "index": i, "content_block": {
                    "type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}},
                         event="content_block_start")
                sse.send({"type": "content_block_delta", "index": i,
                          "delta": {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}},
                         event="content_block_delta")
            sse.send({"type": "content_block_stop", "index": i}, event="content_block_stop")
        sse.send({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                  "usage": {"output_tokens": usage["output_tokens"]}}, event="message_delta")
        sse.send({"type": "message_stop"}, event="message_stop")
        sse.end()


if __name__ == "__main__":
    run_cli(FakeAnthropic, default_port=8556)
