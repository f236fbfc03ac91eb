"""Input that is valid JSON but that nothing after the parser can store, hash or send on: each
case here answered 500 before (issue 12 §1) and is a 400 in the JSON envelope now, with nothing
enqueued and nothing written."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from hermes_queue.config import Settings

SURROGATE = "\ud800"
JSON = {"Content-Type": "application/json"}
SESSION = "hostile-s1"
RUN = "run_" + "0" * 32

# Every string field of every POST endpoint's body (issue 12 §1 lists where each 500 came from).
STRING_FIELDS: list[tuple[str, dict[str, Any], str]] = [
    ("/v1/runs", {"input": SURROGATE}, "input"),
    ("/v1/runs", {"input": "hi", "instructions": SURROGATE}, "instructions"),
    ("/v1/runs", {"input": "hi", "session_id": SURROGATE}, "session_id"),
    ("/v1/runs", {"input": "hi", "model": SURROGATE}, "model"),
    (
        "/v1/runs",
        {"input": [{"role": "user", "content": [{"type": "text", "text": SURROGATE}]}]},
        "input[0].content[0].text",
    ),
    ("/v1/runs", {"input": "hi", SURROGATE: 1}, None),
    ("/api/sessions", {"id": SURROGATE}, "id"),
    ("/api/sessions", {"source": SURROGATE}, "source"),
    ("/api/sessions", {"title": SURROGATE}, "title"),
    ("/api/sessions", {"system_prompt": SURROGATE}, "system_prompt"),
    (f"/api/sessions/{SESSION}/fork", {"id": SURROGATE}, "id"),
    (f"/api/sessions/{SESSION}/model", {"model": SURROGATE}, "model"),
    (f"/api/sessions/{SESSION}/chat", {"message": SURROGATE}, "message"),
    (
        f"/api/sessions/{SESSION}/chat/stream",
        {"message": "hi", "system_message": SURROGATE},
        "system_message",
    ),
    (
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": SURROGATE}]},
        "messages[0].content",
    ),
    (
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "hi"}], "model": SURROGATE},
        "model",
    ),
    ("/v1/responses", {"input": SURROGATE}, "input"),
    ("/v1/responses", {"input": "hi", "previous_response_id": SURROGATE}, "previous_response_id"),
    ("/v1/responses", {"input": "hi", "instructions": SURROGATE}, "instructions"),
    (f"/v1/runs/{RUN}/approval", {"choice": "once", "request_id": SURROGATE}, "request_id"),
]


def raw(body: dict[str, Any]) -> bytes:
    """The body as JSON text; ``json.dumps`` writes a lone surrogate as its ``\\ud800`` escape."""
    return json.dumps(body).encode()


def envelope(body: dict[str, Any]) -> dict[str, Any]:
    assert set(body) == {"error"}
    assert set(body["error"]) >= {"message", "type", "param", "code"}
    return body["error"]


async def assert_nothing_enqueued(redis: Any, settings: Settings) -> None:
    assert await redis.zcard(f"{settings.redis.namespace}:queue") == 0


@pytest.fixture
async def session_row(session_api: TestClient) -> str:
    response = await session_api.post("/api/sessions", json={"id": SESSION})
    assert response.status == 201
    return SESSION


@pytest.mark.parametrize(("path", "body", "param"), STRING_FIELDS)
async def test_a_lone_surrogate_in_any_string_is_400(
    session_api: TestClient,
    session_row: str,
    redis: Any,
    store_settings: Settings,
    path: str,
    body: dict[str, Any],
    param: str | None,
) -> None:
    response = await session_api.post(path, data=raw(body), headers=JSON)
    assert response.status == 400
    error = envelope(await response.json())
    assert error["code"] == "invalid_text"
    assert error["param"] == param
    assert "surrogate" in error["message"]
    await assert_nothing_enqueued(redis, store_settings)


async def test_a_surrogate_in_a_job_field_is_400_in_the_jobs_envelope(
    session_api: TestClient,
) -> None:
    body = {"name": SURROGATE, "schedule": "30m", "prompt": "hello"}
    response = await session_api.post("/api/jobs", data=raw(body), headers=JSON)
    assert response.status == 400
    assert set(await response.json()) == {"error"}
    assert (await session_api.get("/api/jobs")).status == 200
    assert (await (await session_api.get("/api/jobs")).json())["jobs"] == []


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ('{"input": "a\\u0000b"}', "invalid_text"),
        ('{"input": "hi", "model_options": {"fast": 1e400}}', "number_out_of_range"),
        ('{"input": "hi", "x": ' + "9" * 40 + "}", "number_out_of_range"),
        ('{"input": "hi", "x": NaN}', "invalid_json"),
        ('{"input": "hi", "x": -Infinity}', "invalid_json"),
        (b'{"input": "\xff\xfe"}', "invalid_json"),
    ],
)
async def test_nul_bytes_huge_numbers_and_bad_bytes_are_400(
    api: TestClient, redis: Any, settings: Settings, text: str | bytes, code: str
) -> None:
    data = text if isinstance(text, bytes) else text.encode()
    response = await api.post("/v1/runs", data=data, headers=JSON)
    assert response.status == 400
    assert envelope(await response.json())["code"] == code
    await assert_nothing_enqueued(redis, settings)


@pytest.mark.parametrize("depth", [65, 950, 990, 5000])
@pytest.mark.parametrize("path", ["/v1/runs", "/v1/chat/completions", "/v1/responses"])
async def test_deep_nesting_is_400(
    api: TestClient, redis: Any, settings: Settings, path: str, depth: int
) -> None:
    nested = '{"input": "hi", "messages": "x", "x": ' + "[" * depth + "]" * depth + "}"
    response = await api.post(path, data=nested.encode(), headers=JSON)
    assert response.status == 400
    error = envelope(await response.json())
    assert error["code"] == "invalid_json"
    assert "nested deeper" in error["message"]
    await assert_nothing_enqueued(redis, settings)


async def test_nesting_within_the_limit_is_accepted(api: TestClient) -> None:
    options = {"reasoning": {"effort": "low"}, "extra": [[[[["deep but fine"]]]]]}
    response = await api.post("/v1/runs", json={"input": "hi", "model_options": options})
    assert response.status == 202


@pytest.mark.parametrize(
    ("path", "body", "code"),
    [
        ("/v1/runs", {"input": [{"role": [], "content": "x"}]}, "invalid_messages"),
        ("/v1/runs", {"input": [{"role": {}, "content": "x"}]}, "invalid_messages"),
        ("/v1/runs", {"input": "hi", "conversation_history": [{"role": {}}]}, "invalid_messages"),
        (
            "/v1/runs",
            {"input": "hi", "conversation_history": [{"role": ["user"], "content": "x"}]},
            "invalid_messages",
        ),
        (
            f"/api/sessions/{SESSION}/chat",
            {"message": "hi", "multitask_strategy": []},
            "invalid_multitask_strategy",
        ),
        (
            f"/api/sessions/{SESSION}/chat",
            {"message": "hi", "multitask_strategy": {}},
            "invalid_multitask_strategy",
        ),
        (
            "/v1/chat/completions",
            {"messages": [{"role": [], "content": "hi"}]},
            "missing_user_message",
        ),
        ("/v1/responses", {"input": [{"role": [], "content": "hi"}]}, "invalid_input"),
        (f"/v1/runs/{RUN}/approval", {"choice": []}, "invalid_approval_choice"),
    ],
)
async def test_unhashable_values_where_a_string_is_expected_are_400(
    session_api: TestClient,
    session_row: str,
    redis: Any,
    store_settings: Settings,
    path: str,
    body: dict[str, Any],
    code: str,
) -> None:
    response = await session_api.post(path, json=body)
    assert response.status == 400
    assert envelope(await response.json())["code"] == code
    await assert_nothing_enqueued(redis, store_settings)


async def send_raw(api: TestClient, head: bytes, body: bytes = b"") -> tuple[int, bytes]:
    """One request written byte for byte (a client library would re-encode the headers)."""
    reader, writer = await asyncio.open_connection(api.host, api.port)
    try:
        writer.write(head + b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
    status_line, _, rest = answer.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


@pytest.mark.parametrize(
    ("header", "path", "body"),
    [
        (
            "X-Hermes-Session-Id",
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "hi"}]},
        ),
        (
            "X-Hermes-Session-Key",
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "hi"}]},
        ),
        ("X-Hermes-Session-Key", f"/api/sessions/{SESSION}/chat", {"message": "hi"}),
    ],
)
async def test_header_bytes_that_are_not_utf8_are_400(
    session_api: TestClient,
    session_row: str,
    redis: Any,
    store_settings: Settings,
    header: str,
    path: str,
    body: dict[str, Any],
) -> None:
    head = (
        (
            f"POST {path} HTTP/1.1\r\nHost: test\r\n"
            f"Authorization: Bearer {store_settings.api.api_key}\r\n"
            "Content-Type: application/json\r\n"
        ).encode()
        + header.encode()
        + b": abc\xff\xfe\r\n"
    )
    status, answer = await send_raw(session_api, head, raw(body))
    assert status == 400
    assert envelope(json.loads(answer))["code"] in ("invalid_session_id", "invalid_session_key")
    await assert_nothing_enqueued(redis, store_settings)


async def test_an_authorization_header_that_is_not_utf8_is_401(api: TestClient) -> None:
    head = b"POST /v1/runs HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer \xff\xfe-no\r\n"
    status, answer = await send_raw(api, head, raw({"input": "hi"}))
    assert status == 401
    assert envelope(json.loads(answer))["code"] == "gateway_auth_failed"
