"""Session chat, ``POST /api/sessions/{id}/chat`` and ``/chat/stream`` (upstream-api.md §2.1, §3.1),
then the stored transcript (``GET …/messages``)."""

from __future__ import annotations

import pytest

from tests.conformance.conftest import Sides
from tests.conformance.exchange import Side
from tests.conformance.scripts import SCENARIOS, conform, create_session, message, messages_of

TURNS = [
    pytest.param(path, scenario, id=f"{path}-{scenario}")
    for path in ("chat", "chat/stream")
    for scenario in sorted(SCENARIOS)
]


@pytest.mark.parametrize(("path", "scenario"), TURNS)
async def test_one_turn(sides: Sides, path: str, scenario: str) -> None:
    sid = f"conf-{sides.nonce}"

    async def script(side: Side) -> None:
        await create_session(side, sid)
        await side.call(
            "POST",
            f"/api/sessions/{sid}/{path}",
            json_body={"message": message(scenario, sides.nonce)},
            label=f"POST /api/sessions/{{sid}}/{path}",
        )
        await messages_of(side, sid)

    await conform(sides, script)


@pytest.mark.parametrize("path", ["chat", "chat/stream"])
async def test_a_second_turn_sees_the_first(sides: Sides, path: str) -> None:
    """Multi-turn history: the server loads it from the store; the system message is
    ephemeral; the session key header is echoed."""
    sid = f"conf-{sides.nonce}"

    async def script(side: Side) -> None:
        await create_session(side, sid, title=f"T {sides.nonce}", system_prompt="Be brief.")
        for text in ("first question", "second question"):
            await side.call(
                "POST",
                f"/api/sessions/{sid}/{path}",
                json_body={"message": f"{text} #{sides.nonce}", "system_message": "Answer."},
                headers={"X-Hermes-Session-Key": f"webui:{sides.nonce}"},
                label=f"POST /api/sessions/{{sid}}/{path}",
            )
        await messages_of(side, sid)
        await side.call("GET", f"/api/sessions/{sid}", label="GET /api/sessions/{sid}")

    await conform(sides, script)
