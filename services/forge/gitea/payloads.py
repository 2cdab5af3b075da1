"""The webhook bodies the intake accepts: Gitea's JSON, read into pydantic
models of exactly the fields the mapper uses (everything else is ignored),
with a nesting limit. A body that is not JSON, nests deeper than
MAX_DEPTH, or has one of these fields of the wrong type is a `BadWebhook`
whose message names the problem (the intake answers 400), never a
traceback. Field names follow Gitea's webhook payloads (api.PushPayload,
api.PullRequestPayload, api.IssueCommentPayload) as the fake Gitea sends
them."""

from __future__ import annotations

import json

from pydantic import BaseModel, ConfigDict, ValidationError

from agensh_ray.errors import BadWebhook

MAX_DEPTH = 32
"""Deepest JSON nesting accepted (Gitea's payloads nest 4-5 levels)."""


class _Fields(BaseModel):
    model_config = ConfigDict(extra="ignore")


class HookUser(_Fields):
    login: str | None = None
    username: str | None = None


class BranchRef(_Fields):
    ref: str | None = None


class HookPR(_Fields):
    number: int | None = None
    title: str | None = ""
    body: str | None = ""
    user: HookUser | None = None
    head: BranchRef | None = None
    base: BranchRef | None = None
    merged: bool | None = False
    merge_commit_sha: str | None = None


class HookReview(_Fields):
    content: str | None = ""


class HookComment(_Fields):
    body: str | None = ""


class Payload(_Fields):
    """One webhook body: the union of the fields the mapper reads of any event type."""

    action: str | None = None
    number: int | None = None
    sender: HookUser | None = None
    pusher: HookUser | None = None
    pull_request: HookPR | None = None
    review: HookReview | None = None
    comment: HookComment | None = None
    ref: str | None = None
    before: str | None = None
    after: str | None = None


def _depth(value: object) -> int:
    """How deep `value` nests (iterative: a deep value cannot exhaust the stack here)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict | list):
            deepest = max(deepest, d)
            if d <= MAX_DEPTH:
                stack.extend((c, d + 1) for c in (v.values() if isinstance(v, dict) else v))
    return deepest


def parse(body: bytes, event_type: str = "") -> Payload:
    """The body as a Payload, or BadWebhook naming what is wrong with it."""
    try:
        data = json.loads(body)
    except RecursionError:
        raise BadWebhook(f"the body nests deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:
        raise BadWebhook(f"the body is not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise BadWebhook(f"the body is a JSON {type(data).__name__}, not an object")
    if _depth(data) > MAX_DEPTH:
        raise BadWebhook(f"the body nests deeper than {MAX_DEPTH} levels")
    try:
        payload = Payload.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "body"
        raise BadWebhook(f"{where}: {err['msg']}") from None
    if event_type == "push" and not payload.ref:
        raise BadWebhook("a push event without `ref`")
    pr = payload.pull_request
    if event_type.startswith("pull_request") and pr is not None and pr.number is None:
        raise BadWebhook(f"a {event_type} event whose pull_request has no `number`")
    return payload
