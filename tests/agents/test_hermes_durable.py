"""Durable steps on Hermes' real ``AIAgent`` (agents/hermes/durable.py), in one process: a
turn whose attempt is lost resumes from its recorded steps; no recorded tool call runs again
(its side effect, a line in a file, is counted), no recorded model call is sent again, and a
tool in flight at the loss is handed to the model as lost. The sink stands in for the
worker's: it keeps the records in memory and "loses the worker" after a chosen one.
Across processes, under SIGKILL: tests/e2e/test_durable_steps_e2e.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from hermes_queue.agents.base import CancelToken
from hermes_queue.agents.steps import LOST_TOOL_RESULT
from tests.agents.test_echo import RecordingSink
from tests.agents.test_hermes import make_backend, request
from tests.conftest import require_hermes
from tests.support.fake_llm import FakeLLM

CALLS = 3


class WorkerLost(Exception):
    """The worker running the attempt is gone (the test's stand-in for a SIGKILL)."""


class JournalSink(RecordingSink):
    """Keeps every step the backend records; raises ``WorkerLost`` once ``lose_after`` matches
    a record that was just stored."""

    def __init__(self, steps: list[dict[str, Any]], lose_after: Any = None) -> None:
        super().__init__()
        self.steps = steps
        self.lose_after = lose_after

    async def step(self, record: dict[str, Any], *, last: bool = False) -> None:
        self.steps.append(record)
        if self.lose_after is not None and self.lose_after(record):
            raise WorkerLost(str(record.get("kind")))

    async def approval(self, request: Any) -> str:
        return "once"


@pytest.fixture
async def fake() -> AsyncIterator[FakeLLM]:
    require_hermes()
    async with FakeLLM(expected_key="sk-hermes-SECRET-0123456789abcdef") as server:
        yield server


def executions(counter: Path) -> int:
    """How many times the counting command ran (one ``x`` each)."""
    return counter.read_text().count("x")


def counting_turn(counter: Path) -> str:
    return f"count three times [calls:{CALLS}] [terminal:echo x >> {counter}]"


async def lose_then_resume(
    backend: Any, message: str, lose_after: Any, counted: Path
) -> tuple[Any, JournalSink, int]:
    """Attempt 1 of a turn, lost once ``lose_after`` matches a stored record, then attempt 2
    resumed from what it recorded: attempt 2's result and sink, and the lines ``counted``
    held after attempt 1."""
    steps: list[dict[str, Any]] = []
    turn = request(message)
    with pytest.raises(WorkerLost):
        await backend.run_turn(turn, JournalSink(steps, lose_after), CancelToken())
    after_loss = executions(counted)
    sink = JournalSink(list(steps))
    result = await backend.run_turn(
        replace(turn, steps=tuple(steps), attempt=2), sink, CancelToken()
    )
    return result, sink, after_loss


def shape(messages: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    return [(m["role"], [c["id"] for c in m.get("tool_calls") or []]) for m in messages]


async def test_a_resumed_turn_runs_no_recorded_tool_or_model_call_again(
    fake: FakeLLM, hermes_home: str, tmp_path: Path
) -> None:
    counter = tmp_path / "counter"
    message = counting_turn(counter)
    backend = make_backend(fake, hermes_home, toolsets=("terminal",), max_iterations=8)
    try:
        uninterrupted = await backend.run_turn(request(message), JournalSink([]), CancelToken())
        assert executions(counter) == CALLS
        calls_uninterrupted = len(fake.chat_requests)
        assert calls_uninterrupted == CALLS + 1
        counter.unlink()
        # Attempt 1 is lost right after its second tool result was recorded.
        resumed, sink, after_loss = await lose_then_resume(
            backend,
            message,
            lambda r: r["kind"] == "tool" and r["call_id"] == "call_fake_2",
            counter,
        )
    finally:
        await backend.aclose()
    assert after_loss == 2
    assert executions(counter) == CALLS  # each call ran exactly once
    sent = len(fake.chat_requests) - calls_uninterrupted
    assert sent == CALLS + 1  # no recorded model call went out twice (the loss was between)
    assert shape(resumed.messages) == shape(uninterrupted.messages)
    assert resumed.output == uninterrupted.output
    # The replayed steps told readers nothing again: only what the resumed attempt did.
    assert [e[2] for e in sink.events if e[0] == "tool_started"] == ["call_fake_3"]


async def test_a_tool_in_flight_at_the_loss_is_lost_not_run_again(
    fake: FakeLLM, hermes_home: str, tmp_path: Path
) -> None:
    counter = tmp_path / "counter"
    backend = make_backend(fake, hermes_home, toolsets=("terminal",), max_iterations=8)
    try:
        result, sink, after_loss = await lose_then_resume(
            backend,
            counting_turn(counter),
            lambda r: r["kind"] == "tool_started" and r["call_id"] == "call_fake_2",
            counter,
        )
    finally:
        await backend.aclose()
    assert after_loss == 1  # the second call never ran here
    tools = {m["tool_call_id"]: m["content"] for m in result.messages if m["role"] == "tool"}
    assert LOST_TOOL_RESULT in tools["call_fake_2"]
    assert executions(counter) == 2  # calls 1 and 3; 2 may have had its effect
    lost = [e for e in sink.events if e[0] == "tool_completed" and e[2] == "call_fake_2"]
    assert lost and lost[0][4] is True  # readers see the lost call end as a failure
