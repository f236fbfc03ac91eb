"""Drives the strict typed client ``hermes-agent-api-client`` (Python >= 3.13) through its
public API only, as a subprocess of the test suite (``tests/clients/``), and reports everything
it saw as JSON lines on stdout, each flushed at once so the test can act mid-stream.

The plan is one JSON object on stdin::

    {"base_url": ..., "key": ..., "turns": [
        {"request": {...chat completion body...}, "session_id": str | null,
         "session_key": str | null, "close_after_deltas": int | null}, ...]}

Turns run one after another on one ``HermesAgentApiClient``, whose ``httpx.AsyncClient`` is
injected with a response hook (the client itself exposes no response headers). A turn with
``close_after_deltas`` stops iterating after that many assistant deltas and closes its stream
(the connection is dropped), then the next turn starts at once.

Lines (``kind``):

- ``capabilities``: the probe's fields, or ``error`` (exception class name) and ``repr``;
- ``response``: ``turn``, HTTP ``status``, ``run_id`` (``X-Hermes-Run-Id``), ``session_id``;
- ``event``: ``turn``, ``type`` (the event's class name), ``fields``;
- ``end``: ``turn`` and either ``outcome``/``partial``/``failure_reason`` (the terminal event),
  ``closed`` (the plan closed the stream), ``error``/``repr`` (what the client raised), or
  ``missing_terminal`` (the stream ended with no terminal event);
- ``done``: last, when every turn ran.

Every line but ``capabilities`` and ``done`` has ``t``: seconds since its turn's request began.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from typing import Any

import httpx
from hermes_agent_api_client import AssistantDeltaEvent, HermesAgentApiClient, TerminalEvent


def emit(**fields: Any) -> None:
    print(json.dumps(fields, default=str), flush=True)


class Clock:
    """Which turn is running, and since when."""

    def __init__(self) -> None:
        self.turn = -1
        self.started = time.monotonic()

    def begin(self, turn: int) -> None:
        self.turn, self.started = turn, time.monotonic()

    def elapsed(self) -> float:
        return round(time.monotonic() - self.started, 4)


async def run_turn(
    client: HermesAgentApiClient, clock: Clock, index: int, turn: dict[str, Any]
) -> None:
    close_after: int | None = turn.get("close_after_deltas")
    deltas = 0
    ending: dict[str, Any] = {"missing_terminal": True}
    clock.begin(index)
    stream = client.stream_chat_events(
        turn["request"], session_id=turn.get("session_id"), session_key=turn.get("session_key")
    )
    try:
        async with contextlib.aclosing(stream):
            async for event in stream:
                fields = event.model_dump(mode="json")
                name = type(event).__name__
                emit(kind="event", turn=index, type=name, fields=fields, t=clock.elapsed())
                if isinstance(event, TerminalEvent):
                    ending = {
                        "outcome": event.outcome.value,
                        "partial": event.partial,
                        "failure_reason": event.failure_reason and event.failure_reason.value,
                    }
                elif isinstance(event, AssistantDeltaEvent):
                    deltas += 1
                    if close_after is not None and deltas >= close_after:
                        ending = {"closed": True}
                        break  # aclosing() closes the stream: the connection is dropped
    except Exception as error:  # every failure is reported, none ends the driver
        ending = {"error": type(error).__name__, "repr": repr(error)}
    emit(kind="end", turn=index, t=clock.elapsed(), **ending)


async def main() -> None:
    plan: dict[str, Any] = json.loads(sys.stdin.read())
    clock = Clock()

    async def on_response(response: httpx.Response) -> None:
        if response.request.url.path.endswith("/chat/completions"):
            emit(
                kind="response",
                turn=clock.turn,
                status=response.status_code,
                run_id=response.headers.get("X-Hermes-Run-Id"),
                session_id=response.headers.get("X-Hermes-Session-Id"),
                t=clock.elapsed(),
            )

    async with (
        httpx.AsyncClient(event_hooks={"response": [on_response]}) as http,
        HermesAgentApiClient(plan["base_url"], plan["key"], http_client=http) as client,
    ):
        try:
            capabilities = await client.probe_capabilities()
            emit(kind="capabilities", **capabilities.model_dump(mode="json"))
        except Exception as error:
            emit(kind="capabilities", error=type(error).__name__, repr=repr(error))
        for index, turn in enumerate(plan["turns"]):
            await run_turn(client, clock, index, turn)
    emit(kind="done")


if __name__ == "__main__":
    asyncio.run(main())
