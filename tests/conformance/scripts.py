"""Running one request script against both servers, and what scripts share: the scenarios
(each a user message for the fake LLM, whose markers pick its behaviour) and common steps."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from tests.conformance.compare import Difference, assert_same
from tests.conformance.exchange import Exchange, Side

Script = Callable[[Side], Awaitable[None]]

PNG = (
    "data:image/png;base64,"
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADElEQVR4nGNgYGAAAAAEAAH2FzhVAAAAAElFTkSuQmCC"
)
# Scenario -> user message. "failure": the provider refuses the model call (HTTP 400, which
# Hermes does not retry), so the agent ends with a failed result.
SCENARIOS: dict[str, Any] = {
    "plain": "hello there",
    "reasoning": "think it over [reasoning]",
    "tool": "plan my day [toolcall:todo]",
    "failure": "this breaks [error:400]",
    "multimodal": [
        {"type": "text", "text": "what is in this picture"},
        {"type": "image_url", "image_url": {"url": PNG}},
    ],
}


def message(scenario: str, nonce: str) -> Any:
    """The scenario's message, marked with the test's nonce (a derived session id depends on
    the first message, so each test gets its own session on the shared upstream server)."""
    content = SCENARIOS[scenario]
    if isinstance(content, str):
        return f"{content} #{nonce}"
    return [
        {**part, "text": f"{part['text']} #{nonce}"} if part.get("type") == "text" else part
        for part in content
    ]


async def conform(sides: Any, script: Script) -> None:
    """Run ``script`` on both servers at once, then compare everything they answered."""
    __tracebackhide__ = True
    await asyncio.gather(script(sides.upstream), script(sides.ours))
    pending = sides.pending

    def explained(difference: Difference) -> bool:
        return any(fix.explains(difference) for fix in pending)

    assert_same(sides.upstream.exchanges, sides.ours.exchanges, explained if pending else None)


async def create_session(side: Side, session_id: str, **fields: Any) -> Exchange:
    return await side.call(
        "POST", "/api/sessions", json_body={"id": session_id, **fields}, label="POST /api/sessions"
    )


async def messages_of(side: Side, session_id: str) -> Exchange:
    return await side.call(
        "GET", f"/api/sessions/{session_id}/messages", label="GET /api/sessions/{sid}/messages"
    )
