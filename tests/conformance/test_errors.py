"""Refusals: authentication, unknown resources, bad bodies, oversize bodies, and the session
headers on servers with and without a key (upstream-api.md §1.2–§1.4, §2)."""

from __future__ import annotations

import pytest

from tests.conformance.conftest import Sides
from tests.conformance.exchange import Side
from tests.conformance.scripts import conform, create_session

JSON = {"Content-Type": "application/json"}
USER = [{"role": "user", "content": "hello"}]


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/models"),
        ("GET", "/v1/capabilities"),
        ("GET", "/api/sessions"),
        ("POST", "/v1/chat/completions"),
        ("POST", "/v1/runs"),
        ("GET", "/v1/runs/run_0123/events"),
    ],
)
async def test_401_without_or_with_a_wrong_key(sides: Sides, method: str, path: str) -> None:
    async def script(side: Side) -> None:
        await side.call(method, path, auth=None, label=f"{method} {path} (no key)")
        await side.call(method, path, auth="wrong-key-0123456789", label=f"{method} {path}")

    await conform(sides, script)


async def test_404_for_unknown_resources(sides: Sides) -> None:
    missing_run = "run_" + "0" * 32

    async def script(side: Side) -> None:
        for method, path in (
            ("GET", "/api/sessions/conf-missing"),
            ("PATCH", "/api/sessions/conf-missing"),
            ("DELETE", "/api/sessions/conf-missing"),
            ("GET", "/api/sessions/conf-missing/messages"),
            ("POST", "/api/sessions/conf-missing/chat"),
            ("POST", "/api/sessions/conf-missing/chat/stream"),
            ("GET", f"/v1/runs/{missing_run}"),
            ("GET", f"/v1/runs/{missing_run}/events"),
            ("POST", f"/v1/runs/{missing_run}/stop"),
            ("GET", "/v1/responses/resp_missing"),
            ("DELETE", "/v1/responses/resp_missing"),
        ):
            body = {"message": "hi", "title": "x"} if method != "GET" else None
            await side.call(method, path, json_body=body)

    await conform(sides, script)


async def test_400_for_bad_bodies(sides: Sides) -> None:
    sid = f"conf-{sides.nonce}"
    bad_image = [{"type": "image_url", "image_url": {"url": "ftp://example.invalid/a.png"}}]

    async def script(side: Side) -> None:
        await create_session(side, sid)
        cases: list[tuple[str, object]] = [
            ("/v1/chat/completions", "{not json"),
            ("/v1/chat/completions", {}),
            ("/v1/chat/completions", {"messages": [{"role": "system", "content": "x"}]}),
            ("/v1/chat/completions", {"messages": [{"role": "user", "content": bad_image}]}),
            (
                "/v1/chat/completions",
                {"messages": [{"role": "user", "content": [{"type": "audio", "x": 1}]}]},
            ),
            (f"/api/sessions/{sid}/chat", "{not json"),
            (f"/api/sessions/{sid}/chat", {}),
            (f"/api/sessions/{sid}/chat", {"message": "hi", "system_message": 3}),
            (f"/api/sessions/{sid}/chat/stream", {"message": ""}),
            (f"/api/sessions/{sid}/chat/stream", {"message": bad_image}),
            ("/v1/responses", "{not json"),
            ("/v1/responses", {}),
            (
                "/v1/responses",
                {"input": "hi", "previous_response_id": "resp_x", "conversation": "c"},
            ),
            ("/v1/runs", "{not json"),
            ("/v1/runs", {}),
            ("/v1/runs", {"input": "hi", "conversation_history": [{"role": "user"}]}),
        ]
        for path, body in cases:
            label = f"POST {path.replace(sid, '{sid}')}"
            if isinstance(body, str):
                await side.call("POST", path, data=body, headers=JSON, label=label)
            else:
                await side.call("POST", path, json_body=body, label=label)

    await conform(sides, script)


async def test_413_for_a_body_over_the_limit(sides: Sides) -> None:
    big = b'{"messages": "' + b"x" * 10_000_000 + b'"}'

    async def script(side: Side) -> None:
        await side.call("POST", "/v1/chat/completions", data=big, headers=JSON)

    await conform(sides, script)


async def test_session_headers_are_validated(sides: Sides) -> None:
    sid = f"conf-{sides.nonce}"

    async def script(side: Side) -> None:
        await create_session(side, sid)
        body = {"messages": USER}
        for headers in (
            {"X-Hermes-Session-Key": "k" * 300},
            {"X-Hermes-Session-Id": "../escape"},
            {"X-Hermes-Session-Id": "s" * 300},
        ):
            await side.call("POST", "/v1/chat/completions", json_body=body, headers=headers)
        await side.call(
            "POST",
            f"/api/sessions/{sid}/chat",
            json_body={"message": "hi"},
            headers={"X-Hermes-Session-Key": "k" * 300},
            label="POST /api/sessions/{sid}/chat",
        )
        await side.call(
            "POST",
            "/v1/runs",
            json_body={"input": "hi"},
            headers={"X-Hermes-Session-Key": "k" * 300},
        )

    await conform(sides, script)


async def test_session_headers_need_an_api_key(keyless_sides: Sides) -> None:
    """On a server without a key, upstream refuses both session headers with 403 before any
    turn starts."""
    sid = f"conf-{keyless_sides.nonce}"
    key = {"X-Hermes-Session-Key": f"webui:{keyless_sides.nonce}"}

    async def script(side: Side) -> None:
        await create_session(side, sid)
        await side.call("POST", "/v1/chat/completions", json_body={"messages": USER}, headers=key)
        await side.call(
            "POST",
            "/v1/chat/completions",
            json_body={"messages": USER},
            headers={"X-Hermes-Session-Id": sid},
        )
        for path in (f"/api/sessions/{sid}/chat", f"/api/sessions/{sid}/chat/stream"):
            await side.call(
                "POST",
                path,
                json_body={"message": "hi"},
                headers=key,
                label=f"POST {path.replace(sid, '{sid}')}",
            )
        await side.call("POST", "/v1/runs", json_body={"input": "hi"}, headers=key)

    await conform(keyless_sides, script)
