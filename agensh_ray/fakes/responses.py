"""The OpenAI Responses API of the fake OpenAI endpoint (openai_server.py): what Codex (`codex-acp`) talks to.

``POST /v1/responses`` (server-sent events or plain JSON): a request's ``instructions`` and ``input`` items
(messages, function calls and their outputs, custom tool calls) become the script's conversation; a reply's
tool call is a ``function_call`` item (with its ``namespace`` for a tool of one: Codex offers an MCP server's
tools as namespace ``mcp__<server>``), or a ``custom_tool_call`` when the request offers that tool as a custom
(freeform) one, whose ``input`` is the step's ``input`` argument. The
stream ends with ``response.completed`` carrying the usage (the event the gateway reads, services/gateway/wire.py).
Codex first tries a WebSocket on the same path (a GET): it gets 404 and falls back to POST.
"""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any

from agensh_ray.fakes.replies import SSE, estimate_tokens, send_json
from agensh_ray.fakes.faults import split_text
from agensh_ray.fakes.script import Call, Message, Reply

NS_SEP = "__"
"""A tool of a namespace (Codex gives its MCP servers' tools as namespace ``mcp__<server>``) is known to the script
as ``<namespace>__<tool>``; the reply's call names the tool and its namespace apart, as the API does."""


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") or p.get("output", "") for p in content if isinstance(p, dict))
    if isinstance(content, dict):
        return _text(content.get("content") or content.get("text"))
    return str(content)


def conversation(body: dict[str, Any]) -> list[Message]:
    out: list[Message] = []
    if body.get("instructions"):
        out.append(Message("system", _text(body["instructions"])))
    items = body.get("input") or []
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    for it in items:
        kind = it.get("type", "message")
        if kind == "message":
            role = it.get("role")
            if role in ("system", "developer"):
                out.append(Message("system", _text(it.get("content"))))
            elif role == "assistant":
                out.append(Message("assistant", _text(it.get("content"))))
            else:
                out.append(Message("prompt", _text(it.get("content"))))
        elif kind in ("function_call", "custom_tool_call", "local_shell_call"):
            if kind == "function_call":
                try:
                    args = json.loads(it.get("arguments") or "{}")
                except ValueError:
                    args = {}
            else:
                args = {"input": it.get("input")} if kind == "custom_tool_call" else dict(it.get("action") or {})
            name = it.get("name", kind)
            if it.get("namespace"):
                name = f"{it['namespace']}{NS_SEP}{name}"
            call = Call(it.get("call_id", ""), name, args)
            # A reply's text and its calls come back as separate items: one assistant message per reply.
            if out and out[-1].kind == "assistant" and not out[-1].calls:
                out[-1].calls.append(call)
            else:
                out.append(Message("assistant", "", [call]))
        elif kind.endswith("_output"):
            out.append(Message("result", _text(it.get("output"))))
    return out


def _specs(body: dict[str, Any]) -> dict[str, tuple[str | None, dict[str, Any]]]:
    """Each tool the request offers, by the name the script knows it by: (its namespace, its spec)."""
    out: dict[str, tuple[str | None, dict[str, Any]]] = {}
    for t in body.get("tools") or []:
        if t.get("type") == "namespace":
            for inner in t.get("tools") or []:
                if inner.get("name"):
                    out[f"{t.get('name')}{NS_SEP}{inner['name']}"] = (t.get("name"), inner)
        elif t.get("name"):
            out[t["name"]] = (None, t)
    return out


def tools(body: dict[str, Any]) -> list[str]:
    return list(_specs(body))


def _item(call: Call, specs: dict[str, tuple[str | None, dict[str, Any]]]) -> dict[str, Any]:
    namespace, spec = specs.get(call.name, (None, {}))
    name = call.name[len(namespace) + len(NS_SEP):] if namespace else call.name
    if spec.get("type") == "custom":
        raw = call.args.get("input") if set(call.args) == {"input"} else json.dumps(call.args)
        return {"type": "custom_tool_call", "id": f"ctc_{call.id}", "call_id": call.id, "name": name,
                "input": raw, "status": "completed"}
    item = {"type": "function_call", "id": f"fc_{call.id}", "call_id": call.id, "name": name,
            "arguments": json.dumps(call.args), "status": "completed"}
    if namespace:
        item["namespace"] = namespace
    return item


def respond(h: BaseHTTPRequestHandler, body: dict[str, Any], reply: Reply, stream_of, pieces: int,
            default_model: str) -> dict[str, int]:
    """Write the answer to a Responses request; returns the usage it reported. `stream_of(h, reply, events)`
    makes the SSE writer (slowed or cut as the endpoint's faults say)."""
    model = body.get("model") or default_model
    rid = f"resp_{reply.worker or 'x'}_{reply.turn}_{reply.step}"
    specs = _specs(body)
    output: list[dict[str, Any]] = []
    if reply.text:
        output.append({"type": "message", "id": f"msg_{rid}", "role": "assistant", "status": "completed",
                       "content": [{"type": "output_text", "text": reply.text, "annotations": []}]})
    output += [_item(c, specs) for c in reply.calls]
    usage = {"input_tokens": estimate_tokens([body.get("instructions"), body.get("input")]),
             "input_tokens_details": {"cached_tokens": 0},
             "output_tokens": estimate_tokens(json.dumps(output)),
             "output_tokens_details": {"reasoning_tokens": 0}}
    usage["total_tokens"] = usage["input_tokens"] + usage["output_tokens"]
    counted = {"input": usage["input_tokens"], "output": usage["output_tokens"]}
    done = {"id": rid, "object": "response", "status": "completed", "model": model, "output": output,
            "usage": usage}
    if not body.get("stream"):
        send_json(h, 200, done)
        return counted
    text_pieces = split_text(reply.text, pieces) if reply.text else []
    sse: SSE = stream_of(h, reply, 2 + len(text_pieces) + 2 * len(output))
    sse.send({"type": "response.created", "response": {**done, "status": "in_progress", "output": [],
                                                        "usage": None}}, event="response.created")
    for i, item in enumerate(output):
        sse.send({"type": "response.output_item.added", "output_index": i,
                  "item": {**item, "status": "in_progress"} if item["type"] != "message" else
                  {**item, "status": "in_progress", "content": []}}, event="response.output_item.added")
        if item["type"] == "message":
            for piece in text_pieces:
                sse.send({"type": "response.output_text.delta", "item_id": item["id"], "output_index": i,
                          "content_index": 0, "delta": piece}, event="response.output_text.delta")
        sse.send({"type": "response.output_item.done", "output_index": i, "item": item},
                 event="response.output_item.done")
    sse.send({"type": "response.completed", "response": done}, event="response.completed")
    sse.end()
    return counted
