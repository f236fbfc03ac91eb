"""``POST /v1/chat/completions``, plain JSON and SSE, with and without ``X-Hermes-Session-Id``
(upstream-api.md §2.2, §3.2)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conformance.conftest import NOKEY_ALIAS, Sides
from tests.conformance.exchange import Side
from tests.conformance.pending import case
from tests.conformance.reconcile import MISSING_CREDENTIALS
from tests.conformance.scripts import SCENARIOS, conform, message, messages_of

LABEL = "POST /v1/chat/completions"


def completion(content: Any, *, stream: bool, **extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": content}], "stream": stream, **extra}


TURNS = [
    case(stream, scenario, id=f"{'sse' if stream else 'json'}-{scenario}")
    for stream in (False, True)
    for scenario in sorted(SCENARIOS)
]
BOTH = [case(False, id="json"), case(True, id="sse")]


@pytest.mark.parametrize(("stream", "scenario"), TURNS)
async def test_one_turn(sides: Sides, stream: bool, scenario: str) -> None:
    """Without the header: the session id is derived from the first user message."""

    async def script(side: Side) -> None:
        body = completion(message(scenario, sides.nonce), stream=stream)
        await side.call("POST", "/v1/chat/completions", json_body=body, label=LABEL)

    await conform(sides, script)


@pytest.mark.parametrize("stream", BOTH)
async def test_session_header_continues_the_conversation(sides: Sides, stream: bool) -> None:
    """With ``X-Hermes-Session-Id`` the history comes from the store: each turn sends only its
    new message; the session key header is echoed."""
    sid = f"conf-{sides.nonce}"
    headers = {"X-Hermes-Session-Id": sid, "X-Hermes-Session-Key": f"webui:{sides.nonce}"}

    async def script(side: Side) -> None:
        for text in ("my name is Ada", "what is my name"):
            body = completion(f"{text} #{sides.nonce}", stream=stream)
            await side.call(
                "POST", "/v1/chat/completions", json_body=body, headers=headers, label=LABEL
            )
        await messages_of(side, sid)

    await conform(sides, script)


@pytest.mark.parametrize("stream", BOTH)
async def test_history_and_system_prompt_in_the_body(sides: Sides, stream: bool) -> None:
    async def script(side: Side) -> None:
        body = {
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "system", "content": "Answer in English."},  # joined as upstream does
                {"role": "user", "content": f"my name is Ada #{sides.nonce}"},
                {"role": "assistant", "content": "Hello Ada."},
                {"role": "user", "content": [{"type": "text", "text": "what is my name"}]},
            ],
            "stream": stream,
        }
        await side.call("POST", "/v1/chat/completions", json_body=body, label=LABEL)

    await conform(sides, script)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_a_provider_without_credentials(sides: Sides, stream: bool) -> None:
    async def script(side: Side) -> None:
        body = completion(f"hello #{sides.nonce}", stream=stream, model=NOKEY_ALIAS)
        label = f"{LABEL} {MISSING_CREDENTIALS}"
        await side.call("POST", "/v1/chat/completions", json_body=body, label=label)

    await conform(sides, script)
