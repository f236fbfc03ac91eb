"""``GET /openapi.json``: an OpenAPI 3.1 document built from the route rows the app was built
from (``endpoint.SERVED``), so it cannot drift from them (no hand-written copy, no second table).

Paths and methods are the rows' (the 501 placeholders included, answering 501); request bodies
and query parameters come from the pydantic models each row names, which its handler parses
with; answers from the rows' answer models, SSE answers as ``text/event-stream``, event by event
(``data`` holds the JSON of the frame's model, its ``contentSchema``). Every operation lists the
error envelope for its refusals (the jobs API its own ``{"error": "…"}`` too).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any

from aiohttp import web
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from hermes_queue import __version__
from hermes_queue.api.endpoint import SERVED, SSE, Answer, Endpoint
from hermes_queue.api.errors import ErrorEnvelope

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
    403: "An operator surface, and the key is a tenant's (operator_only)",
    404: "Not found",
    408: "The body did not arrive in time",
    413: "Body over the limit",
    429: "Queue full, or the tenant over its own limits (backpressure); see Retry-After",
    501: "An upstream endpoint this server does not provide",
    503: "Redis or the session store unavailable, or the process is draining",
}


def _models(endpoints: Sequence[Endpoint]) -> list[type[BaseModel]]:
    found: dict[str, type[BaseModel]] = {}
    for op in endpoints:
        answers = [*op.answers.values(), *([op.streamed] if op.streamed else [])]
        for model in (op.body, op.query, op.errors, *(a.model for a in answers)):
            if model is not None:
                found[model.__name__] = model
    found[ErrorEnvelope.__name__] = ErrorEnvelope
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


def _responses(op: Endpoint) -> dict[str, Any]:
    answers: dict[str, Any] = {
        str(status): {"description": a.description, "content": _content(a)}
        for status, a in op.answers.items()
    }
    if op.streamed is not None:
        first = answers[min(answers)]
        first["content"].update(_content(op.streamed))
    envelope: dict[str, Any] = _ref(ErrorEnvelope)
    if op.errors is not None:
        envelope = {"anyOf": [_ref(op.errors), _ref(ErrorEnvelope)]}
    codes = [404, 503]
    if not op.public:
        codes.append(401)
    if op.operator:
        codes.append(403)
    if op.method in ("POST", "PATCH"):
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


def _operation(op: Endpoint, schemas: dict[str, Any]) -> dict[str, Any]:
    method, path = op.method, op.path
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
        "responses": _responses(op),
    }
    if op.public:
        doc["security"] = []
    if op.operator:
        doc["x-operator-only"] = True
    if op.body is not None:
        doc["requestBody"] = {
            "required": method == "POST" and not op.body_optional,
            "content": {"application/json": {"schema": _ref(op.body)}},
        }
    return doc


def build(endpoints: Sequence[Endpoint]) -> dict[str, Any]:
    """The document for ``endpoints`` (an app's route rows)."""
    _, top = models_json_schema([(m, "validation") for m in _models(endpoints)], ref_template=REF)
    schemas = top.get("$defs", {})
    paths: dict[str, dict[str, Any]] = {}
    for op in endpoints:
        paths.setdefault(op.path, {})[op.method.lower()] = _operation(op, schemas)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "hermes-queue",
            "version": __version__,
            "description": "A Hermes-compatible agent API on a queue. Errors: "
            "{error: {message, type, param, code}} (jobs API: {error: string}). Every path is "
            "also served under /p/{profile}, acting as that tenant (docs/tenants.md); another "
            "tenant's id answers 404 exactly as an unknown one.",
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
    served: tuple[Endpoint, ...] = app[SERVED]
    return build(served)


async def openapi_json(request: web.Request) -> web.Response:
    """``GET /openapi.json`` (no key needed, like ``/health``)."""
    return web.json_response(document(request.app))


ENDPOINTS = [
    Endpoint(
        "GET",
        "/openapi.json",
        openapi_json,
        "This document (OpenAPI 3.1)",
        "discovery",
        {200: Answer("OpenAPI 3.1", None)},
        public=True,
    )
]
