"""A deterministic stand-in for the Gemini API (what Gemini CLI talks to with ``GOOGLE_GEMINI_BASE_URL``).

``POST /v1beta/models/<model>:streamGenerateContent`` (server-sent events) and ``:generateContent`` (plain
JSON) answer from a `Script`; ``:countTokens`` gives a rough count; ``GET /v1beta/models`` lists the model.
The model is the one the request's path names (`model_of`). Requests without tools (the CLI's own side
questions) get the script's `side` text. Every request is recorded.

    python -m agensh_ray.fakes.gemini_server --script script.json --port 8557
    GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:8557 GEMINI_API_KEY=fake ...
"""

from __future__ import annotations

import json
import re
from http.server import BaseHTTPRequestHandler
from typing import Any

from agensh_ray.fakes.endpoint import FakeEndpoint, Recorded, run_cli
from agensh_ray.fakes.faults import split_text
from agensh_ray.fakes.replies import estimate_tokens, send_json
from agensh_ray.fakes.script import Call, Message, Reply

MODEL = "gemini-2.5-pro"
MODEL_RE = re.compile(r"/models/([^/:?]+):")


def model_of(path: str) -> str | None:
    """The model a Gemini API path names (``/v1beta/models/<model>:generateContent``)."""
    m = MODEL_RE.search(path)
    return m.group(1) if m else None


class FakeGemini(FakeEndpoint):
    """Fake Gemini generateContent endpoint driven by a script."""

    name = "gemini"
    base_path = ""
    call_prefix = "fc"

    def handles(self, path: str) -> bool:
        return path.endswith((":generateContent", ":streamGenerateContent"))

    def handle_get(self, h: BaseHTTPRequestHandler) -> None:
        if h.path.split("?")[0].rstrip("/").endswith("/models"):
            send_json(h, 200, {"models": [{"name": f"models/{MODEL}", "displayName": "Fake Gemini",
                                           "supportedGenerationMethods": ["generateContent", "countTokens"]}]})
        else:
            super().handle_get(h)

    def handle_post(self, h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        if h.path.split("?")[0].endswith(":countTokens"):
            send_json(h, 200, {"totalTokens": estimate_tokens(body.get("contents", []))})
            return
        super().handle_post(h, body)

    def conversation(self, body: dict[str, Any]) -> list[Message]:
        out: list[Message] = []
        system = body.get("systemInstruction") or {}
        text = "\n".join(p.get("text", "") for p in (system.get("parts") or []) if isinstance(p, dict))
        if text:
            out.append(Message("system", text))
        for c in body.get("contents") or []:
            parts = [p for p in c.get("parts") or [] if isinstance(p, dict)]
            texts = "\n".join(p["text"] for p in parts if isinstance(p.get("text"), str) and not p.get("thought"))
            if c.get("role") == "model":
                calls = [Call(p["functionCall"].get("id", ""), p["functionCall"].get("name", ""),
                              p["functionCall"].get("args") or {}) for p in parts if "functionCall" in p]
                out.append(Message("assistant", texts, calls))
                continue
            results = [p["functionResponse"] for p in parts if "functionResponse" in p]
            if results:
                out.extend(Message("result", json.dumps(r.get("response"))) for r in results)
            else:
                out.append(Message("prompt", texts))
        return out

    def tools(self, body: dict[str, Any]) -> list[str]:
        return [d.get("name", "") for t in body.get("tools") or [] for d in t.get("functionDeclarations") or []
                if d.get("name")]

    def error(self, h: BaseHTTPRequestHandler, status: int, message: str, retry_after: float | None,
              limited: bool) -> None:
        kind = {429: "RESOURCE_EXHAUSTED", 401: "UNAUTHENTICATED", 503: "UNAVAILABLE"}.get(status, "INTERNAL")
        data = json.dumps({"error": {"code": status, "message": message, "status": kind}}).encode()
        h.send_response(status)
        h.send_header("content-type", "application/json")
        h.send_header("content-length", str(len(data)))
        if retry_after is not None:
            h.send_header("retry-after", str(max(1, round(retry_after))))
        h.end_headers()
        h.wfile.write(data)

    def respond(self, h: BaseHTTPRequestHandler, body: dict[str, Any], reply: Reply, rec: Recorded) -> None:
        model = model_of(h.path) or MODEL
        parts: list[dict[str, Any]] = [{"text": reply.text}] if reply.text else []
        parts += [{"functionCall": {"id": c.id, "name": c.name, "args": c.args}} for c in reply.calls]
        usage = {"promptTokenCount": estimate_tokens([body.get("systemInstruction"), body.get("contents")]),
                 "candidatesTokenCount": estimate_tokens(parts)}
        usage["totalTokenCount"] = usage["promptTokenCount"] + usage["candidatesTokenCount"]
        rec.usage = {"input": usage["promptTokenCount"], "output": usage["candidatesTokenCount"]}

        def chunk(ps: list[dict[str, Any]], last: bool) -> dict[str, Any]:
            cand: dict[str, Any] = {"content": {"role": "model", "parts": ps}, "index": 0}
            out: dict[str, Any] = {"candidates": [cand], "modelVersion": model}
            if last:
                cand["finishReason"] = "STOP"
                out["usageMetadata"] = usage
            return out

        if not h.path.split("?")[0].endswith(":streamGenerateContent"):
            send_json(h, 200, chunk(parts, True))
            return
        pieces = split_text(reply.text, self.pieces) if reply.text else []
        calls = [p for p in parts if "functionCall" in p]
        sse = self.stream(h, reply, len(pieces) + 1)
        for piece in pieces:
            sse.send(chunk([{"text": piece}], False))
        sse.send(chunk(calls, True))
        sse.end()


if __name__ == "__main__":
    run_cli(FakeGemini, default_port=8557)
