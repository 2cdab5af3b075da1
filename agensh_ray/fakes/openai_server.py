"""A deterministic stand-in for an OpenAI-compatible chat-completions
endpoint (what Copilot CLI talks to with ``COPILOT_PROVIDER_BASE_URL``, and
what vLLM, Ollama or a gateway would serve in production), and for the
Responses API (what Codex talks to; responses.py).

``POST /v1/chat/completions`` (streaming with ``stream_options.include_usage``
and non-streaming) and ``POST /v1/responses`` answer from a `Script`;
``GET /v1/models`` lists the model.
Every request is recorded, so a test can assert what the agent sent back
(e.g. that a DM reached the model inside a tool result).

    python -m agensh_ray.fakes.openai_server --script textkit --port 8555
    COPILOT_PROVIDER_BASE_URL=http://127.0.0.1:8555/v1 COPILOT_MODEL=gpt-4.1 COPILOT_OFFLINE=true ...
"""

from __future__ import annotations

import json
import time
from http.server import BaseHTTPRequestHandler
from typing import Any

from agensh_ray.fakes import responses
from agensh_ray.fakes.endpoint import FakeEndpoint, Recorded, run_cli
from agensh_ray.fakes.replies import estimate_tokens, send_json
from agensh_ray.fakes.faults import split_text
from agensh_ray.fakes.script import Call, Message, Reply

MODEL = "gpt-4.1"


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content)


class FakeOpenAI(FakeEndpoint):
    """Fake OpenAI chat-completions endpoint driven by a script."""

    name = "openai"
    base_path = "/v1"
    call_prefix = "call"

    def handles(self, path: str) -> bool:
        return path.rstrip("/").endswith(("/chat/completions", "/responses"))

    def handle_get(self, h: BaseHTTPRequestHandler) -> None:
        if h.path.rstrip("/").endswith("/models"):
            send_json(h, 200, {"object": "list", "data": [{"id": MODEL, "object": "model", "created": 0,
                                                            "owned_by": "agensh-fake"}]})
        else:
            super().handle_get(h)

    def conversation(self, body: dict[str, Any]) -> list[Message]:
        if "input" in body and "messages" not in body:
            return responses.conversation(body)
        out: list[Message] = []
        for m in body.get("messages", []):
            role = m.get("role")
            if role in ("system", "developer"):
                out.append(Message("system", _text(m.get("content"))))
            elif role == "user":
                out.append(Message("prompt", _text(m.get("content"))))
            elif role == "assistant":
                calls = []
                for tc in m.get("tool_calls") or []:
                    fn = tc.get("function", {})
                    try:
                        args = json.loads(fn.get("arguments") or "{}")
                    except ValueError:
                        args = {}
                    calls.append(Call(tc.get("id", ""), fn.get("name", ""), args))
                out.append(Message("assistant", _text(m.get("content")), calls))
            elif role == "tool":
                out.append(Message("result", _text(m.get("content"))))
        return out

    def tools(self, body: dict[str, Any]) -> list[str]:
        if "input" in body and "messages" not in body:
            return responses.tools(body)
        return [t.get("function", {}).get("name", "") for t in body.get("tools") or []]

    def error(self, h: BaseHTTPRequestHandler, status: int, message: str, retry_after: float | None,
              limited: bool) -> None:
        kind = {429: "rate_limit_exceeded", 401: "invalid_api_key"}.get(status, "server_error")
        data = json.dumps({"error": {"message": message, "type": kind, "code": kind}}).encode()
        h.send_response(status)
        h.send_header("content-type", "application/json")
        h.send_header("content-length", str(len(data)))
        if retry_after is not None:
            h.send_header("retry-after-ms", str(int(retry_after * 1000)))
            h.send_header("retry-after", str(max(1, round(retry_after))))
        if limited:
            h.send_header("x-ratelimit-remaining-requests", "0")
        h.end_headers()
        h.wfile.write(data)

    def respond(self, h: BaseHTTPRequestHandler, body: dict[str, Any], reply: Reply, rec: Recorded) -> None:
        if "input" in body and "messages" not in body:
            rec.usage = responses.respond(h, body, reply, self.stream, self.pieces, MODEL)
            return
        model = body.get("model") or MODEL
        created = int(time.time())
        cid = f"chatcmpl-{reply.worker or 'x'}-{reply.turn}-{reply.step}"
        finish = "tool_calls" if reply.calls else "stop"
        usage = {
            "prompt_tokens": estimate_tokens(body.get("messages", [])),
            "completion_tokens": estimate_tokens(reply.text + "".join(json.dumps(c.args) for c in reply.calls)),
        }
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        rec.usage = {"input": usage["prompt_tokens"], "output": usage["completion_tokens"]}
        tool_calls = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.args)}}
            for c in reply.calls
        ]
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
            if tool_calls:
                message["tool_calls"] = tool_calls
            send_json(h, 200, {
                "id": cid, "object": "chat.completion", "created": created, "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage,
            })
            return
        pieces = split_text(reply.text, self.pieces) if reply.text else []
        with_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        sse = self.stream(h, reply, 3 + len(pieces) + 2 * len(tool_calls) + with_usage)
        base = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model}

        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> None:
            sse.send({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]})

        chunk({"role": "assistant", "content": ""})
        for piece in pieces:
            chunk({"content": piece})
        for i, tc in enumerate(tool_calls):
            fn = tc["function"]
            chunk({"tool_calls": [{"index": i, "id": tc["id"], "type": "function",
                                   "function": {"name": fn["name"], "arguments": ""}}]})
            chunk({"tool_calls": [{"index": i, "function": {"arguments": fn["arguments"]}}]})
        chunk({}, finish)
        if with_usage:
            sse.send({**base, "choices": [], "usage": usage})
        sse.send("[DONE]")
        sse.end()


if __name__ == "__main__":
    run_cli(FakeOpenAI, default_port=8555)
