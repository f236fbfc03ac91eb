"""Bad input gets the JSON envelope with the right status and code, never a 500 or a hang."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from redis.exceptions import ConnectionError as RedisConnectionError

from hermes_queue.api.http.sse import open_stream
from hermes_queue.api.middlewares import REDIS_OUTAGE, error_middleware
from hermes_queue.config import Settings
from hermes_queue.redisio.health import OutageLog
from tests.support.inprocess import running_api


def error_of(body: dict[str, Any]) -> dict[str, Any]:
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]


async def test_health_needs_no_key(api: TestClient) -> None:
    for path in ("/health", "/v1/health"):
        response = await api.get(path, headers={"Authorization": ""})
        assert response.status == 200
        assert (await response.json())["status"] == "ok"


@pytest.mark.parametrize("header", ["", "Bearer wrong", "Basic abc", "Bearer"])
async def test_bad_or_missing_key_is_401_gateway_auth_failed(api: TestClient, header: str) -> None:
    response = await api.post("/v1/runs", json={"input": "hi"}, headers={"Authorization": header})
    assert response.status == 401
    assert await response.json() == {
        "error": {
            "message": "Invalid gateway API key (API_SERVER_KEY)",
            "type": "gateway_auth_error",
            "param": None,
            "code": "gateway_auth_failed",
        }
    }


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"{not json", "invalid_json"),
        (b"[1, 2]", "invalid_json"),
        (b"{}", "missing_input"),
        (b'{"input": ""}', "missing_input"),
        (b'{"input": "   "}', "missing_input"),
        (b'{"input": []}', "missing_input"),
        (b'{"input": 42}', "invalid_input"),
        (b'{"input": [{"role": "assistant", "content": "hi"}]}', "missing_user_message"),
        (b'{"input": [{"role": "wizard", "content": "hi"}]}', "invalid_messages"),
        (b'{"input": "hi", "conversation_history": "nope"}', "invalid_messages"),
        (b'{"input": "hi", "conversation_history": [{"content": "x"}]}', "invalid_messages"),
        (b'{"input": "hi", "conversation_history": [{"role": "user"}]}', "invalid_messages"),
        (b'{"input": "hi", "instructions": 5}', "invalid_instructions"),
        (b'{"input": "hi", "session_id": "../etc"}', "invalid_session_id"),
        (b'{"input": "hi", "session_id": "a\\nb"}', "invalid_session_id"),
        (b'{"input": [{"role": "user", "content": 7}]}', "invalid_content_part"),
    ],
)
async def test_bad_run_bodies_are_400_and_enqueue_nothing(
    api: TestClient, redis: Any, settings: Settings, body: bytes, code: str
) -> None:
    response = await api.post("/v1/runs", data=body, headers={"Content-Type": "application/json"})
    assert response.status == 400
    assert error_of(await response.json())["code"] == code
    assert await redis.zcard(f"{settings.redis.namespace}:queue") == 0


async def test_oversize_body_is_413(api: TestClient, settings: Settings) -> None:
    big = b'{"input": "' + b"x" * (settings.api.body_limit_bytes + 10) + b'"}'
    response = await api.post("/v1/runs", data=big, headers={"Content-Type": "application/json"})
    assert response.status == 413
    assert error_of(await response.json())["code"] == "body_too_large"


async def test_oversize_chunked_body_is_413(api: TestClient, settings: Settings) -> None:
    async def chunks():  # type: ignore[no-untyped-def]
        yield b'{"input": "'
        for _ in range(settings.api.body_limit_bytes // 1_000_000 + 1):
            yield b"x" * 1_000_000
        yield b'"}'

    response = await api.post(
        "/v1/runs", data=chunks(), headers={"Content-Type": "application/json"}
    )
    assert response.status == 413
    assert error_of(await response.json())["code"] == "body_too_large"


@pytest.mark.parametrize("path", ["/v1/runs/run_nope", "/v1/runs/run_nope/events"])
async def test_unknown_run_is_404(api: TestClient, path: str) -> None:
    response = await api.get(path)
    assert response.status == 404
    assert error_of(await response.json())["code"] == "run_not_found"


async def test_stop_unknown_run_is_404(api: TestClient) -> None:
    response = await api.post("/v1/runs/" + "x" * 5000 + "/stop")
    assert response.status == 404
    assert error_of(await response.json())["code"] == "run_not_found"


async def test_unknown_route_is_json_404(api: TestClient) -> None:
    response = await api.get("/v1/nothing-here")
    assert response.status == 404
    assert error_of(await response.json())["code"] == "not_found"


@pytest.mark.parametrize("cursor", ["garbage", "12-ab", "-1", "1-2-3", "9" * 30])
async def test_garbage_resume_cursor_is_400(api: TestClient, cursor: str) -> None:
    run_id = (await (await api.post("/v1/runs", json={"input": "hi"})).json())["run_id"]
    for response in (
        await api.get(f"/v1/runs/{run_id}/events", headers={"Last-Event-ID": cursor}),
        await api.get(f"/v1/runs/{run_id}/events", params={"after": cursor}),
    ):
        assert response.status == 400
        assert error_of(await response.json())["code"] == "invalid_last_event_id"


async def test_cursor_ahead_of_the_stream_is_400_not_a_hang(api: TestClient) -> None:
    run_id = (await (await api.post("/v1/runs", json={"input": "hi"})).json())["run_id"]
    response = await api.get(
        f"/v1/runs/{run_id}/events", headers={"Last-Event-ID": "99999999999999-0"}
    )
    assert response.status == 400
    assert error_of(await response.json())["code"] == "invalid_last_event_id"


async def test_every_response_has_security_headers(api: TestClient) -> None:
    response = await api.get("/v1/runs/run_nope")
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["X-Frame-Options"] == "DENY"
    assert "X-Request-Id" in response.headers


async def test_the_key_is_compared_after_the_normalisation_the_guard_applied(
    settings: Settings,
) -> None:
    """A key configured with surrounding whitespace is the key without it, on both sides."""
    async with running_api(settings.replace(api_key=f"  {settings.api.api_key}\t")) as api:
        for header in (f"Bearer {settings.api.api_key}", f"Bearer   {settings.api.api_key}  "):
            response = await api.post(
                "/v1/runs", json={"input": "hi"}, headers={"Authorization": header}
            )
            assert response.status == 202
        wrong = await api.post(
            "/v1/runs", json={"input": "hi"}, headers={"Authorization": "Bearer " + " " * 16}
        )
        assert wrong.status == 401


async def test_health_detailed_warns_when_the_api_has_no_key(settings: Settings) -> None:
    async with running_api(settings.replace(api_key="")) as api:
        body = await (await api.get("/health/detailed")).json()
        assert len(body["warnings"]) == 1 and "No API key is set" in body["warnings"][0]
    async with running_api(settings) as api:
        assert (await (await api.get("/health/detailed")).json())["warnings"] == []


@pytest.mark.parametrize("failure", [RuntimeError("a bug"), RedisConnectionError("gone")])
async def test_a_failure_after_a_stream_opened_cuts_it_rather_than_leaving_it_open(
    failure: Exception,
) -> None:
    """Once an event stream's headers are sent, a JSON error would land inside its body and the
    client would wait on it for ever: the connection is cut instead, so the client resumes."""

    async def handler(request: web.Request) -> web.StreamResponse:
        response = await open_stream(request)
        await response.write(b": keepalive\n\n")
        raise failure

    app = web.Application(middlewares=[error_middleware])
    app[REDIS_OUTAGE] = OutageLog(logging.getLogger("test"), "API requests")
    app.router.add_get("/events", handler)
    async with TestClient(TestServer(app)) as client:
        response = await client.get("/events")
        assert response.status == 200
        with pytest.raises(aiohttp.ClientPayloadError):
            async with asyncio.timeout(30):  # a hang fails the test instead of blocking it
                await response.read()
