"""Contract checks: every request and response body a fake server sees is
validated against the official API description it stands in for.

Neither spec file is a JSON Schema document as a whole (Gitea's is Swagger
2.0, Mattermost's is OpenAPI 3.0), so validation is per operation: the
request is matched to an operation by method and path template, its JSON
body (and query parameters) are checked against that operation's parameter
schemas, and the response body against the schema documented for its status.
`$ref`s resolve inside the spec file itself (one `referencing` resource).

Two deliberate relaxations, both about how the servers really behave and
neither spec can express:

* **null for optional properties.** Gitea marshals Go pointer fields
  (`merged_at`, `milestone`, `assignee`...) as `null`; Swagger 2.0 has no
  `nullable`. A property that is not in its object's `required` list may be
  null. OpenAPI 3.0's own `nullable: true` is honoured the same way.
* **Error bodies.** Both specs describe error responses without a body
  schema (Gitea puts `message`/`url` under "headers"); an error response is
  only checked for being a documented status when it has a schema.

Every mismatch is recorded as a `Violation` (the tests assert there are
none); nothing is raised into the fake, so one bad body never hides the
next one.
"""

from __future__ import annotations

import json
import os
import re
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

SPEC_FILES = {"gitea": "gitea-swagger.v1.json", "mattermost": "mattermost-openapi-v4-2023.yaml"}


def specs_dir() -> Path:
    """The specs kept beside this module (`specs/`); AGENSH_SPECS_DIR overrides it."""
    env = os.environ.get("AGENSH_SPECS_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parent / "specs"


def spec_path(name: str) -> Path | None:
    """The spec file for `name` (gitea | mattermost), or None when it is absent."""
    path = specs_dir() / SPEC_FILES[name]
    return path if path.is_file() else None


def missing_specs(*names: str) -> str | None:
    """Why contract tests must skip (which file is missing, where it was looked for), or None."""
    missing = [SPEC_FILES[n] for n in names if spec_path(n) is None]
    if not missing:
        return None
    return (f"API specs absent: {', '.join(missing)} not in {specs_dir().resolve()} (set AGENSH_SPECS_DIR "
            "to point elsewhere); contract tests skipped")


@dataclass(frozen=True)
class Violation:
    api: str
    where: str
    """e.g. `POST /repos/{owner}/{repo}/pulls request` or `webhook pull_request.pull_request`."""
    message: str

    def __str__(self) -> str:
        return f"[{self.api}] {self.where}: {self.message}"


@dataclass
class Operation:
    method: str
    template: str
    regex: re.Pattern
    op: dict
    path_params: list[dict]


def _load(path: Path) -> dict:
    if path.suffix == ".json":
        return json.loads(path.read_text())
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with open(path, "rb") as f:
        return yaml.load(f, Loader=loader)


def _relax(node: Any, openapi3: bool) -> Any:
    """Allow null for optional properties (see the module docstring); OpenAPI `nullable` too."""
    if isinstance(node, list):
        return [_relax(x, openapi3) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: _relax(v, openapi3) for k, v in node.items()}
    if openapi3 and out.pop("nullable", False):
        out = {"anyOf": [out, {"type": "null"}]}
    props = out.get("properties")
    if isinstance(props, dict) and "properties" in node:
        required = set(node.get("required") or [])
        out["properties"] = {
            k: (v if k in required else {"anyOf": [v, {"type": "null"}]}) for k, v in props.items()
        }
    return out


@lru_cache(maxsize=4)
def load_contract(name: str) -> "Contract":
    """One parsed spec per process (the Mattermost YAML takes ~0.5 s to parse)."""
    path = spec_path(name)
    if path is None:
        raise FileNotFoundError(
            f"{SPEC_FILES[name]} not found in {specs_dir()} (set AGENSH_SPECS_DIR)"
        )
    return Contract(name, _load(path))


class Contract:
    """The operations of one spec, and the validators built from it."""

    def __init__(self, api: str, spec: dict):
        import jsonschema
        from referencing import Registry, Resource
        from referencing.jsonschema import DRAFT4

        self.api = api
        self.openapi3 = "openapi" in spec
        self.base_path = "" if self.openapi3 else spec.get("basePath", "")
        self.spec = spec
        relaxed = {k: _relax(v, self.openapi3) for k, v in spec.items() if k != "paths"}
        relaxed["paths"] = spec["paths"]
        self._uri = f"urn:agensh:spec:{api}"
        self._registry = Registry().with_resource(self._uri, Resource.from_contents(relaxed, default_specification=DRAFT4))
        self._relaxed = relaxed
        self._validator_cls = jsonschema.Draft4Validator
        self._validators: dict[str, Any] = {}
        self._lock = threading.Lock()
        self.operations: list[Operation] = []
        for template, item in spec["paths"].items():
            shared = item.get("parameters", [])
            for method, op in item.items():
                if method in ("parameters", "summary", "description", "servers"):
                    continue
                params = [self._deref(p) for p in [*shared, *op.get("parameters", [])]]
                pattern = "^" + re.sub(r"\\\{[^}]+\\\}", "([^/]+)", re.escape(template)) + "$"
                self.operations.append(
                    Operation(method.upper(), template, re.compile(pattern), op, [p for p in params if p.get("in") == "path"])
                )
        # Literal segments beat templated ones (/users/username/{u} before /users/{id}/{x}).
        self.operations.sort(key=lambda o: (o.template.count("{"), -len(o.template)))

    # ------------------------------------------------------------------ lookup

    def _deref(self, node: dict) -> dict:
        while isinstance(node, dict) and "$ref" in node:
            node = self._pointer(node["$ref"])
        return node

    def _pointer(self, ref: str) -> Any:
        node: Any = self.spec
        for part in ref.lstrip("#/").split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
        return node

    def find(self, method: str, path: str) -> Operation | None:
        if self.base_path and path.startswith(self.base_path):
            path = path[len(self.base_path):]
        for op in self.operations:
            if op.method == method and op.regex.match(path):
                return op
        return None

    def validator(self, ref: str):
        """A validator for the schema at `ref` (a JSON pointer into the spec, e.g. #/definitions/User)."""
        with self._lock:
            v = self._validators.get(ref)
            if v is None:
                schema = {"$ref": f"{self._uri}{ref}"}
                v = self._validator_cls(schema, registry=self._registry)
                self._validators[ref] = v
            return v

    def schema_validator(self, schema: dict, key: str):
        """A validator for an inline schema (its $refs resolve in the spec)."""
        with self._lock:
            v = self._validators.get(key)
            if v is None:
                relaxed = _relax(schema, self.openapi3)
                v = self._validator_cls(_rebase(relaxed, self._uri), registry=self._registry)
                self._validators[key] = v
            return v

    # ------------------------------------------------------- what to validate

    def request_schema(self, op: Operation) -> dict | None:
        if self.openapi3:
            body = self._deref(op.op.get("requestBody") or {})
            return ((body.get("content") or {}).get("application/json") or {}).get("schema")
        for p in op.op.get("parameters", []):
            p = self._deref(p)
            if p.get("in") == "body":
                return p.get("schema")
        return None

    def response_schema(self, op: Operation, status: int) -> tuple[bool, dict | None]:
        """(documented, schema) for a status of an operation."""
        responses = op.op.get("responses", {})
        resp = responses.get(str(status)) or responses.get("default")
        if resp is None:
            return False, None
        resp = self._deref(resp)
        if self.openapi3:
            schema = ((resp.get("content") or {}).get("application/json") or {}).get("schema")
        else:
            schema = resp.get("schema")
        return True, schema

    def query_params(self, op: Operation) -> dict[str, dict]:
        out = {}
        for p in op.op.get("parameters", []):
            p = self._deref(p)
            if p.get("in") == "query":
                out[p["name"]] = p.get("schema", p) if self.openapi3 else p
        return out


def _rebase(node: Any, uri: str) -> Any:
    """Point local refs (#/definitions/X) of an inline schema at the spec resource."""
    if isinstance(node, list):
        return [_rebase(x, uri) for x in node]
    if isinstance(node, dict):
        return {
            k: (uri + v if k == "$ref" and isinstance(v, str) and v.startswith("#") else _rebase(v, uri))
            for k, v in node.items()
        }
    return node


class ContractChecker:
    """Records what a fake server saw that its spec does not allow."""

    def __init__(self, api: str):
        self.api = api
        self.contract = load_contract(api)
        self.violations: list[Violation] = []
        self.checked = 0
        self._lock = threading.Lock()

    def _add(self, where: str, message: str) -> None:
        with self._lock:
            self.violations.append(Violation(self.api, where, message))

    def _validate(self, validator, instance: Any, where: str) -> None:
        with self._lock:
            self.checked += 1
        for err in validator.iter_errors(instance):
            loc = "/".join(str(p) for p in err.absolute_path) or "(body)"
            self._add(where, f"{loc}: {err.message[:300]}")

    def check_request(self, method: str, path: str, query: dict[str, list[str]], body: bytes | None) -> Operation | None:
        op = self.contract.find(method, path)
        if op is None:
            self._add(f"{method} {path}", "no such operation in the spec")
            return None
        where = f"{method} {op.template} request"
        known = self.contract.query_params(op)
        for name, values in query.items():
            spec = known.get(name)
            if spec is None:
                self._add(where, f"query parameter {name!r} is not documented")
                continue
            for v in values:
                problem = _query_problem(spec, v)
                if problem:
                    self._add(where, f"query parameter {name}={v!r}: {problem}")
        schema = self.contract.request_schema(op)
        if body:
            if schema is None:
                self._add(where, "a body was sent but the operation takes none")
            else:
                try:
                    data = json.loads(body)
                except ValueError:
                    self._add(where, "body is not JSON")
                else:
                    self._validate(self.contract.schema_validator(schema, f"req:{method}:{op.template}"), data, where)
        elif schema is not None and self._body_required(op):
            self._add(where, "the operation requires a JSON body")
        return op

    def _body_required(self, op: Operation) -> bool:
        if self.contract.openapi3:
            return bool(self.contract._deref(op.op.get("requestBody") or {}).get("required"))
        return any(self.contract._deref(p).get("in") == "body" and self.contract._deref(p).get("required")
                   for p in op.op.get("parameters", []))

    def check_response(self, op: Operation | None, status: int, body: Any, raw_text: bool = False) -> None:
        if op is None:
            return
        where = f"{op.method} {op.template} response {status}"
        documented, schema = self.contract.response_schema(op, status)
        if not documented:
            if 200 <= status < 300:
                self._add(where, "status not documented for this operation")
            return
        if schema is None:
            if 200 <= status < 300 and body not in (None, b"", "") and not raw_text:
                self._add(where, "the spec documents no body for this status, but one was sent")
            return
        if raw_text:
            return
        self._validate(self.contract.schema_validator(schema, f"resp:{op.method}:{op.template}:{status}"), body, where)

    def check_definition(self, ref: str, instance: Any, where: str) -> None:
        """Validate an object that is not itself an API body (a webhook part, a websocket post)."""
        self._validate(self.contract.validator(ref), instance, where)


def _query_problem(spec: dict, value: str) -> str | None:
    typ = spec.get("type")
    if typ == "integer":
        try:
            int(value)
        except ValueError:
            return "not an integer"
    elif typ == "boolean" and value not in ("true", "false"):
        return "not a boolean"
    enum = spec.get("enum")
    if enum and value not in [str(e) for e in enum]:
        return f"not one of {enum}"
    return None
