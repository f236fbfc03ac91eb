"""``/v1/runs``: start, events, status, stop, and the turn's place in its session
(upstream-api.md §3.3, §4)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conformance.conftest import NOKEY_ALIAS, Sides
from tests.conformance.exchange import Exchange, Side
from tests.conformance.reconcile import MISSING_CREDENTIALS
from tests.conformance.scripts import SCENARIOS, conform, message, messages_of
from tests.support.polling import NeverHeld, eventually

TERMINAL = frozenset({"completed", "failed", "cancelled"})


async def start(side: Side, body: dict[str, Any], **kwargs: Any) -> str:
    started = await side.call("POST", "/v1/runs", json_body=body, label="POST /v1/runs", **kwargs)
    assert started.status == 202, f"{side.name}: {started.body}"
    return str(started.body["run_id"])


async def follow(side: Side, run_id: str, tag: str = "") -> Exchange:
    """The run's events to the end, then its final status (polled until terminal)."""
    label = f"GET /v1/runs/{{id}}/events {tag}".rstrip()
    await side.call("GET", f"/v1/runs/{run_id}/events", label=label)
    return await follow_status(side, run_id, tag)


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
async def test_one_run(sides: Sides, scenario: str) -> None:
    sid = f"conf-{sides.nonce}"

    async def script(side: Side) -> None:
        content = message(scenario, sides.nonce)
        turn = content if isinstance(content, str) else [{"role": "user", "content": content}]
        run_id = await start(side, {"input": turn, "session_id": sid})
        await follow(side, run_id)
        await side.call("POST", f"/v1/runs/{run_id}/stop", label="POST /v1/runs/{id}/stop")

    await conform(sides, script)


async def test_history_instructions_and_session_key(sides: Sides) -> None:
    async def script(side: Side) -> None:
        body = {
            "input": [
                {"role": "user", "content": f"my name is Ada #{sides.nonce}"},
                {"role": "assistant", "content": "Hello Ada."},
                {"role": "user", "content": "what is my name"},
            ],
            "instructions": "Be brief.",
        }
        headers = {"X-Hermes-Session-Key": f"webui:{sides.nonce}"}
        await follow(side, await start(side, body, headers=headers))

    await conform(sides, script)


async def test_a_provider_without_credentials(sides: Sides) -> None:
    async def script(side: Side) -> None:
        body = {"input": f"hello #{sides.nonce}", "model": NOKEY_ALIAS}
        await follow(side, await start(side, body), tag=MISSING_CREDENTIALS)

    await conform(sides, script)


async def test_stop_cancels_a_running_turn(sides: Sides) -> None:
    """The provider sends one word and then nothing; the stop ends the turn."""

    async def script(side: Side) -> None:
        run_id = await start(side, {"input": f"wait for it [stall] #{sides.nonce}"})
        events = await side.stream(
            "GET", f"/v1/runs/{run_id}/events", label="GET /v1/runs/{id}/events"
        )
        await events.until(lambda f: isinstance(f.data, dict) and f.data.get("delta"))
        await side.call("POST", f"/v1/runs/{run_id}/stop", label="POST /v1/runs/{id}/stop")
        await events.finish()
        await follow_status(side, run_id)

    await conform(sides, script)


async def follow_status(side: Side, run_id: str, tag: str = "") -> Exchange:
    """Poll the run's status until it is terminal; record only that last answer."""
    label = f"GET /v1/runs/{{id}} {tag}".rstrip()
    try:
        status = await eventually(
            lambda: side.call("GET", f"/v1/runs/{run_id}", label=label, record=False),
            lambda answer: answer.body.get("status") in TERMINAL,
            within=20,
        )
    except NeverHeld as never:  # the last answer is compared as it is
        status = never.last
    side.exchanges.append(status)
    return status


async def test_a_run_then_a_chat_turn_share_the_session(sides: Sides) -> None:
    """hermes-webui's switch between its two paths: a ``/v1/runs`` turn with ``session_id``,
    then a ``/v1/chat/completions`` turn with ``X-Hermes-Session-Id`` on the same session, which
    must continue the conversation (its history holds the run's turn)."""
    sid = f"conf-{sides.nonce}"

    async def script(side: Side) -> None:
        await follow(
            side, await start(side, {"input": f"my name is Ada #{sides.nonce}", "session_id": sid})
        )
        await messages_of(side, sid)
        await side.call(
            "POST",
            "/v1/chat/completions",
            json_body={"messages": [{"role": "user", "content": "what is my name"}]},
            headers={"X-Hermes-Session-Id": sid},
            label="POST /v1/chat/completions",
        )
        await messages_of(side, sid)

    await conform(sides, script)
