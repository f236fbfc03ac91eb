"""``GET /openapi.json``: valid OpenAPI 3.1, generated from the route table and from the models
the handlers validate with, and what the API really answers fits it (issue 12 §2)."""

from __future__ import annotations

from typing import Any

import jsonschema
from aiohttp.test_utils import TestClient
from openapi_spec_validator import validate

from hermes_queue.api.hermes import run_bodies as request_models
from hermes_queue.api.middlewares import Access
from hermes_queue.api.routes import ROUTES
from hermes_queue.config import Settings


async def fetch(api: TestClient) -> dict[str, Any]:
    response = await api.get("/openapi.json", headers={"Authorization": ""})
    assert response.status == 200  # no key needed, like /health
    return dict(await response.json())


def conforms(doc: dict[str, Any], component: str, value: Any) -> None:
    schema = {"$ref": f"#/components/schemas/{component}", "components": doc["components"]}
    jsonschema.Draft202012Validator(schema).validate(value)


async def test_the_document_is_valid_openapi_31(api: TestClient) -> None:
    doc = await fetch(api)
    assert doc["openapi"].startswith("3.1")
    validate(doc)


async def test_every_route_is_an_operation(api: TestClient) -> None:
    paths = (await fetch(api))["paths"]
    public = Access.of(ROUTES).public
    for route in ROUTES:
        operation = paths[route.path][route.method.lower()]
        assert operation["responses"], route
        # Public in the document exactly where the auth middleware lets requests through.
        assert (operation.get("security") == []) == (route.path in public), route.path


async def test_bodies_come_from_the_models_the_handlers_parse_with(api: TestClient) -> None:
    doc = await fetch(api)
    schemas, paths = doc["components"]["schemas"], doc["paths"]
    body = paths["/v1/runs"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/RunBody"}
    run = schemas["RunBody"]
    assert set(run["properties"]) == set(request_models.RunBody.model_fields)
    assert run["required"] == ["input"]
    # Upstream's aliases are both documented.
    assert {"id", "session_id"} <= set(schemas["SessionCreateBody"]["properties"])
    assert {"message", "input", "system_message", "instructions"} <= set(
        schemas["SessionChatBody"]["properties"]
    )
    strategy = schemas["SessionChatBody"]["properties"]["multitask_strategy"]
    assert strategy["enum"] == ["reject", "enqueue", "interrupt", "steer"]
    assert schemas["SessionPatchBody"]["additionalProperties"] is False
    queries = {p["name"] for p in paths["/api/sessions"]["get"]["parameters"]}
    assert queries == {"limit", "offset", "source", "include_children"}
    headers = {p["name"] for p in paths["/v1/chat/completions"]["post"]["parameters"]}
    assert {"X-Hermes-Session-Id", "X-Hermes-Session-Key", "Idempotency-Key"} <= headers


async def test_streams_and_errors_are_described(api: TestClient) -> None:
    doc = await fetch(api)
    events = doc["paths"]["/v1/runs/{run_id}/events"]["get"]["responses"]["200"]["content"]
    data = events["text/event-stream"]["schema"]["properties"]["data"]
    assert data["contentSchema"] == {"$ref": "#/components/schemas/RunsEvent"}
    start = doc["paths"]["/v1/runs"]["post"]["responses"]
    for status in ("400", "401", "413", "429", "503", "default"):
        schema = start[status]["content"]["application/json"]["schema"]
        assert schema == {"$ref": "#/components/schemas/ErrorEnvelope"}
    job = doc["paths"]["/api/jobs"]["post"]["responses"]["400"]["content"]["application/json"]
    assert {"$ref": "#/components/schemas/JobsError"} in job["schema"]["anyOf"]
    operations = [op for path in doc["paths"].values() for op in path.values()]
    not_provided = [op for op in operations if "501" in op["responses"]]
    assert not_provided  # upstream endpoints answered 501 are listed as such


async def test_real_answers_fit_the_document(api: TestClient, settings: Settings) -> None:
    doc = await fetch(api)
    started = await api.post("/v1/runs", json={"input": "hi"})
    conforms(doc, "RunStarted", await started.json())
    run_id = (await started.json())["run_id"]
    conforms(doc, "RunStatus", await (await api.get(f"/v1/runs/{run_id}")).json())
    created = await api.post("/api/sessions", json={"id": "doc-1", "title": "T"})
    conforms(doc, "SessionEnvelope", await created.json())
    conforms(doc, "SessionList", await (await api.get("/api/sessions")).json())
    conforms(doc, "Capabilities", await (await api.get("/v1/capabilities")).json())
    conforms(doc, "HealthDetailed", await (await api.get("/health/detailed")).json())
    refused = await api.post("/v1/runs", json={})
    conforms(doc, "ErrorEnvelope", await refused.json())
    jobs_refusal = await api.post("/api/jobs", json={"schedule": "30m"})
    conforms(doc, "JobsError", await jobs_refusal.json())
