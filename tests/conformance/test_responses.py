"""``POST /v1/responses`` (plain and SSE), chaining, ``GET``/``DELETE`` of stored responses
(upstream-api.md §2.3, §3.4)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conformance.conftest import NOKEY_ALIAS, Sides
from tests.conformance.exchange import Exchange, Side
from tests.conformance.pending import case
from tests.conformance.reconcile import MISSING_CREDENTIALS
from tests.conformance.scripts import SCENARIOS, conform, message

LABEL = "POST /v1/responses"


def response_id(exchange: Exchange) -> str:
    if exchange.frames is not None:
        done = [f for f in exchange.frames if isinstance(f.data, dict) and "response" in f.data]
        return str(done[-1].data["response"]["id"])
    return str(exchange.body["id"])


TURNS = [
    case(stream, scenario, id=f"{'sse' if stream else 'json'}-{scenario}")
    for stream in (False, True)
    for scenario in sorted(SCENARIOS)
]


@pytest.mark.parametrize(("stream", "scenario"), TURNS)
async def test_one_turn(sides: Sides, stream: bool, scenario: str) -> None:
    async def script(side: Side) -> None:
        content: Any = message(scenario, sides.nonce)
        if isinstance(content, list):  # Responses content parts
            content = [
                {"type": "input_text", "text": p["text"]}
                if p["type"] == "text"
                else {"type": "input_image", "image_url": p["image_url"]["url"]}
                for p in content
            ]
            content = [{"role": "user", "content": content}]
        await side.call(
            "POST", "/v1/responses", json_body={"input": content, "stream": stream}, label=LABEL
        )

    await conform(sides, script)


@pytest.mark.parametrize(
    "stream",
    [
        case(False, id="json"),
        case(True, id="sse"),
    ],
)
async def test_chained_turns_then_read_and_delete(sides: Sides, stream: bool) -> None:
    async def script(side: Side) -> None:
        first = await side.call(
            "POST",
            "/v1/responses",
            json_body={
                "input": f"my name is Ada #{sides.nonce}",
                "instructions": "Be brief.",
                "stream": stream,
            },
            label=LABEL,
        )
        previous = response_id(first)
        second = await side.call(
            "POST",
            "/v1/responses",
            json_body={
                "input": "what is my name",
                "previous_response_id": previous,
                "stream": stream,
            },
            label=LABEL,
        )
        latest = response_id(second)
        await side.call("GET", f"/v1/responses/{latest}", label="GET /v1/responses/{id}")
        for _ in range(2):
            await side.call("DELETE", f"/v1/responses/{latest}", label="DELETE /v1/responses/{id}")
        await side.call("GET", f"/v1/responses/{latest}", label="GET /v1/responses/{id}")
        await side.call(
            "POST",
            "/v1/responses",
            json_body={"input": "again", "previous_response_id": latest},
            label="POST /v1/responses (deleted previous)",
        )

    await conform(sides, script)


async def test_a_provider_without_credentials(sides: Sides) -> None:
    async def script(side: Side) -> None:
        body = {"input": f"hello #{sides.nonce}", "model": NOKEY_ALIAS}
        label = f"{LABEL} {MISSING_CREDENTIALS}"
        await side.call("POST", "/v1/responses", json_body=body, label=label)

    await conform(sides, script)
