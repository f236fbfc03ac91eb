"""``GET /openapi.json``: an OpenAPI 3.1 document generated from the route table and the models
the handlers validate with, so it cannot drift from them (no hand-written copy).

Paths and methods come from the routes the app serves (``routes.ROUTES``, 501 placeholders
included, answering 501), read from its router, so this module needs no import of the table;
request bodies and query parameters from the pydantic models each handler parses with
(``request_models.py``, ``request_queries.py``); answers from ``response_schemas.py``, SSE
answers as ``text/event-stream``, event by event (``data`` holds the JSON of the frame's model,
its ``contentSchema``). Every
operation lists the error envelope for its refusals (the jobs API its own ``{"error": "…"}``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from aiohttp import web
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from hermes_queue import __version__
from hermes_queue.api import response_schemas as out
from hermes_queue.api.openapi_operations import SSE, Answer, Operation, operations_by_handler
from hermes_queue.api.ops.unsupported import is_not_implemented

REF = "#/components/schemas/{model}"
HEADERS: dict[str, tuple[str, dict[str, Any]]] = {
    "Idempotency-Key": (
        "Replays the run an earlier request with this key started (1-255 visible ASCII).",
        {"type": "string", "pattern": "^[\\x21-\\x7e]{1,255}$"},
    ),
    "X-Hermes-Session-Key": (
        "A conversation scope, echoed back; needs an API key (else 403).",
        {"type": "string", "maxLength": 256},
    ),
    "X-Hermes-Session-Id": (
        "Continue this stored session (its transcript is the history); needs an API key.",
        {"type": "string", "maxLength": 256},
    ),
    "X-Hermes-Cancel-On-Disconnect": (
        "Stop the turn when a streaming client leaves (lenient boolean).",
        {"type": "string"},
    ),
    "Last-Event-ID": (
        "Resume after this stream id (as sent in id: lines).",
        {"type": "string", "pattern": "^[0-9]+-[0-9]+$"},
    ),
}
ERRORS = {
    400: "Invalid request (the code says what)",
    401: "Missing or wrong API key",
    404: "Not found",
    408: "The body did not arrive in time",
    413: "Body over the limit",
    429: "Queue full (backpressure); see Retry-After",
    501: "An upstream endpoint this server does not provide",
    503: "Redis or the session store unavailable, or the process is draining",
}


def _models(ops: list[Operation]) -> list[type[BaseModel]]:
    found: dict[str, type[BaseModel]] = {}
    for op in ops:
        answers = [*op.answers.values(), *op.extra.values()]
        for model in (op.body, op.query, *(a.model for a in answers)):
            if model is not None:
                found[model.__name__] = model
    for model in (out.ErrorEnvelope, out.JobsError):
        found[model.__name__] = model
    return list(found.values())


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": REF.format(model=model.__name__)}


def _content(answer: Answer) -> dict[str, Any]:
    if answer.media == SSE:
        assert answer.model is not None
        # One server-sent event, as OpenAPI 3.2 describes streams item by item (and as
        # schemathesis checks each event): its data: line is the JSON of ``answer.model``.
        event = {
            "type": "object",
            "properties": {
                "event": {"type": "string"},
                "id": {"type": "string"},
                "data": {
                    "type": "string",
                    "contentMediaType": "application/json",
                    "contentSchema": _ref(answer.model),
                },
            },
        }
        return {SSE: {"schema": event}}
    schema: dict[str, Any] = _ref(answer.model) if answer.model else {}
    return {answer.media: {"schema": schema}}


def _query(model: type[BaseModel], schemas: dict[str, Any]) -> list[dict[str, Any]]:
    properties = schemas[model.__name__].get("properties", {})
    params = []
    for name, schema in properties.items():
        schema = {k: v for k, v in schema.items() if k not in ("title", "description")}
        described = properties[name].get("description")
        param: dict[str, Any] = {"name": name, "in": "query", "required": False, "schema": schema}
        if described:
            param["description"] = described
        params.append(param)
    return params


def _responses(op: Operation, method: str) -> dict[str, Any]:
    answers: dict[str, Any] = {
        str(status): {"description": a.description, "content": _content(a)}
        for status, a in op.answers.items()
    }
    for extra in op.extra.values():
        first = answers[min(answers)]
        first["content"].update(_content(extra))
    envelope: dict[str, Any] = _ref(out.ErrorEnvelope)
    if op.jobs_envelope:
        envelope = {"anyOf": [_ref(out.JobsError), _ref(out.ErrorEnvelope)]}
    codes = [404, 503]
    if not op.public:
        codes.append(401)
    if method in ("POST", "PATCH"):
        codes += [400, 408, 413]
    if op.starts_turn:
        codes.append(429)
    for status in sorted(codes):
        answers.setdefault(
            str(status),
            {"description": ERRORS[status], "content": {"application/json": {"schema": envelope}}},
        )
    answers["default"] = {
        "description": "Any other failure, in the same envelope",
        "content": {"application/json": {"schema": envelope}},
    }
    return answers


def _operation(op: Operation, method: str, path: str, schemas: dict[str, Any]) -> dict[str, Any]:
    params: list[dict[str, Any]] = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in re.findall(r"{(\w+)}", path)
    ]
    if op.query is not None:
        params += _query(op.query, schemas)
    for name in op.headers:
        description, schema = HEADERS[name]
        params.append(
            {
                "name": name,
                "in": "header",
                "required": False,
                "description": description,
                "schema": schema,
            }
        )
    doc: dict[str, Any] = {
        "operationId": f"{method.lower()}_{re.sub(r'[^a-z0-9]+', '_', path.lower()).strip('_')}",
        "summary": op.summary,
        "tags": [op.tag],
        "parameters": params,
        "responses": _responses(op, method),
    }
    if op.public:
        doc["security"] = []
    if op.body is not None:
        doc["requestBody"] = {
            "required": method == "POST" and op.body.__name__ not in OPTIONAL_BODIES,
            "content": {"application/json": {"schema": _ref(op.body)}},
        }
    return doc


OPTIONAL_BODIES = frozenset({"SessionCreateBody", "ForkBody"})
NOT_PROVIDED = Operation(
    "Not provided by this server (upstream has it)",
    "not provided",
    {501: Answer("Not implemented", out.ErrorEnvelope)},
)


class RouteLike(Protocol):
    """What the document needs of a route: a ``web.RouteDef`` or an entry of a router."""

    @property
    def method(self) -> str: ...

    @property
    def path(self) -> str: ...

    @property
    def handler(self) -> Any: ...


@dataclass(frozen=True)
class ServedRoute:
    method: str
    path: str
    handler: Any


def served_routes(app: web.Application) -> list[ServedRoute]:
    """The app's routes as its router holds them (aiohttp's automatic HEAD twins left out)."""
    return [
        ServedRoute(route.method, route.resource.canonical, route.handler)
        for route in app.router.routes()
        if route.method != "HEAD" and route.resource is not None
    ]


def build(routes: Sequence[RouteLike]) -> dict[str, Any]:
    """The document for ``routes`` (the app's route table)."""
    table = operations_by_handler()
    table[openapi_json] = Operation(
        "This document (OpenAPI 3.1)", "discovery", {200: Answer("OpenAPI 3.1", None)}, public=True
    )
    served = [(route, table.get(route.handler)) for route in routes]
    missing = [
        f"{r.method} {r.path}"
        for r, op in served
        if op is None and not is_not_implemented(r.handler)
    ]
    if missing:
        raise LookupError(f"no OpenAPI operation for {', '.join(missing)}")
    ops = [op or NOT_PROVIDED for _, op in served]
    _, top = models_json_schema([(m, "validation") for m in _models(ops)], ref_template=REF)
    schemas = top.get("$defs", {})
    paths: dict[str, dict[str, Any]] = {}
    for (route, _), op in zip(served, ops, strict=True):
        paths.setdefault(route.path, {})[route.method.lower()] = _operation(
            op, route.method, route.path, schemas
        )
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "hermes-queue",
            "version": __version__,
            "description": "A Hermes-compatible agent API on a queue. Errors: "
            "{error: {message, type, param, code}} (jobs API: {error: string}).",
        },
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    }


@functools.lru_cache(maxsize=8)
def document(app: web.Application) -> dict[str, Any]:
    """Built once per app: its routes are frozen once it serves."""
    return build(served_routes(app))


async def openapi_json(request: web.Request) -> web.Response:
    """``GET /openapi.json`` (no key needed, like ``/health``)."""
    return web.json_response(document(request.app))
