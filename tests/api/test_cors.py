"""CORS as upstream (upstream-api.md §1.4): an Origin not allowed → empty 403 on every route;
allowed origins get the headers on every response, SSE included; preflights without auth."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp.test_utils import TestClient

from hermes_queue.api.middlewares import CORS_ALLOW_HEADERS, CORS_ALLOW_METHODS
from hermes_queue.config import Settings
from tests.support.inprocess import running_api

ALLOWED = "https://app.example"
BLOCKED = "https://evil.example"


@pytest.fixture
async def cors_api(settings: Settings) -> AsyncIterator[TestClient]:
    async with running_api(settings.replace(cors_origins=(ALLOWED,))) as client:
        yield client


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/health"),
        ("POST", "/v1/runs"),
        ("GET", "/v1/models"),
        ("GET", "/dashboard"),
        ("GET", "/no/such/route"),
    ],
)
async def test_blocked_origin_gets_an_empty_403(
    cors_api: TestClient, method: str, path: str
) -> None:
    response = await cors_api.request(
        method, path, headers={"Origin": BLOCKED}, json={"input": "hi"}
    )
    assert response.status == 403
    assert await response.read() == b""
    assert "Access-Control-Allow-Origin" not in response.headers
    assert response.headers["X-Content-Type-Options"] == "nosniff"  # still a normal response


async def test_no_origin_configured_blocks_every_origin(api: TestClient) -> None:
    response = await api.get("/health", headers={"Origin": ALLOWED})
    assert response.status == 403 and await response.read() == b""


async def test_allowed_origin_gets_the_cors_headers(cors_api: TestClient) -> None:
    response = await cors_api.post("/v1/runs", json={"input": "hi"}, headers={"Origin": ALLOWED})
    assert response.status == 202
    headers = response.headers
    assert headers["Access-Control-Allow-Origin"] == ALLOWED
    assert "Origin" in headers["Vary"]
    assert headers["Access-Control-Max-Age"] == "600"
    assert headers["Access-Control-Allow-Methods"] == "GET, POST, PATCH, DELETE, OPTIONS"
    for name in ("Idempotency-Key", "Last-Event-ID", "X-Hermes-Session-Key", "Authorization"):
        assert name in headers["Access-Control-Allow-Headers"]
    exposed = headers["Access-Control-Expose-Headers"]
    for name in ("X-Hermes-Session-Id", "X-Hermes-Run-Id", "X-Hermes-Session-Key", "X-Request-Id"):
        assert name in exposed


async def test_error_responses_carry_the_cors_headers(cors_api: TestClient) -> None:
    response = await cors_api.get(
        "/v1/models", headers={"Origin": ALLOWED, "Authorization": "Bearer wrong"}
    )
    assert response.status == 401  # a browser can read why it failed
    assert response.headers["Access-Control-Allow-Origin"] == ALLOWED


async def test_sse_response_carries_the_cors_headers(cors_api: TestClient) -> None:
    created = await cors_api.post("/v1/runs", json={"input": "hi"})
    run_id = (await created.json())["run_id"]
    # No worker: the stream stays open, but its headers are already sent.
    async with cors_api.get(f"/v1/runs/{run_id}/events", headers={"Origin": ALLOWED}) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/event-stream")
        assert response.headers["Access-Control-Allow-Origin"] == ALLOWED
        assert "Origin" in response.headers["Vary"]
        assert "X-Hermes-Run-Id" in response.headers["Access-Control-Expose-Headers"]


async def test_wildcard_allows_any_origin(settings: Settings) -> None:
    async with running_api(settings.replace(cors_origins=("*",))) as client:
        response = await client.get("/health", headers={"Origin": BLOCKED})
        assert response.status == 200
        assert response.headers["Access-Control-Allow-Origin"] == "*"


async def test_preflight_allowed_without_auth(cors_api: TestClient) -> None:
    del cors_api.session.headers["Authorization"]
    response = await cors_api.options(
        "/v1/chat/completions",
        headers={
            "Origin": ALLOWED,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type, idempotency-key",
        },
    )
    assert response.status == 200
    assert response.headers["Access-Control-Allow-Origin"] == ALLOWED
    assert response.headers["Access-Control-Allow-Methods"] == CORS_ALLOW_METHODS
    assert response.headers["Access-Control-Allow-Headers"] == CORS_ALLOW_HEADERS


@pytest.mark.parametrize("origin", [BLOCKED, None])
async def test_preflight_refused(cors_api: TestClient, origin: str | None) -> None:
    headers = {"Access-Control-Request-Method": "POST"}
    if origin:
        headers["Origin"] = origin
    response = await cors_api.options("/v1/runs", headers=headers)
    assert response.status == 403
    assert await response.read() == b""
    assert "Access-Control-Allow-Origin" not in response.headers


async def test_no_origin_is_unaffected(cors_api: TestClient) -> None:
    response = await cors_api.get("/health")
    assert response.status == 200
    assert "Access-Control-Allow-Origin" not in response.headers
    dashboard = await cors_api.get("/dashboard")
    assert dashboard.status == 200
    assert "Access-Control-Allow-Origin" not in dashboard.headers
