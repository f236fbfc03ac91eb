"""Steers on Hermes' real ``AIAgent`` (agents/hermes/durable.py), in one process: a pending steer
reaches the model in the request after the next tool result (Hermes' own ``steer()`` and its
marker), is recorded with that tool result, and a resumed attempt replays it, once, never
applying it again; a steer the lost attempt never applied is applied by the next one. The sink
stands in for the worker's: it keeps the run's pending steers and takes off those a recorded step
applied, as ``append_step.lua`` does. Across processes, under SIGKILL:
tests/e2e/test_steer_e2e.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest

from hermes_queue.agents.base import CancelToken
from hermes_queue.agents.steps import Steer, applied_steers
from tests.agents.test_hermes import make_backend, request
from tests.agents.test_hermes_durable import JournalSink, WorkerLost
from tests.conftest import require_hermes
from tests.support.fake_llm import FakeLLM

STEER = "answer in one short sentence"
TURN = "look twice [calls:2] [toolcall:todo]"


class SteeringSink(JournalSink):
    """A ``JournalSink`` that is also a ``SteerSink``: ``pending`` are the run's steers."""

    def __init__(self, steps: list[dict[str, Any]], pending: list[Steer], lose_after: Any = None):
        super().__init__(steps, lose_after)
        self.pending = pending

    @property
    def steers(self) -> tuple[Steer, ...]:
        return tuple(self.pending)

    async def step(self, record: dict[str, Any], *, last: bool = False) -> None:
        applied = set(applied_steers(record))
        self.pending[:] = [steer for steer in self.pending if steer.id not in applied]
        await super().step(record, last=last)


@pytest.fixture
async def fake() -> AsyncIterator[FakeLLM]:
    require_hermes()
    async with FakeLLM(expected_key="sk-hermes-SECRET-0123456789abcdef") as server:
        yield server


@pytest.fixture
async def backend(fake: FakeLLM, hermes_home: str) -> AsyncIterator[Any]:
    instance = make_backend(fake, hermes_home)
    try:
        yield instance
    finally:
        await instance.aclose()


def times_seen(body: Any) -> int:
    """How often the steer's text is in one model request."""
    return sum(str(message.get("content")).count(STEER) for message in body["messages"])


def steered_records(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [step for step in steps if applied_steers(step)]


async def test_a_pending_steer_reaches_the_model_after_the_next_tool_result(
    backend: Any, fake: FakeLLM
) -> None:
    steps: list[dict[str, Any]] = []
    pending = [Steer("st1", STEER)]
    result = await backend.run_turn(request(TURN), SteeringSink(steps, pending), CancelToken())
    assert result.output.startswith("Tool said:")
    seen = [times_seen(r.body) for r in fake.chat_requests]
    assert seen == [0, 1, 1]  # absent from the first request, then once in each later one
    (carrier,) = steered_records(steps)
    assert carrier["kind"] == "tool" and carrier["call_id"] == "call_fake_1"
    assert carrier["steers"] == ["st1"] and STEER in carrier["message"]["content"]
    assert "OUT-OF-BAND USER MESSAGE" in carrier["message"]["content"]  # Hermes' own marker
    assert pending == []  # applied: nothing left for a later boundary or pending_steer
    assert sum(STEER in str(m.get("content")) for m in result.messages) == 1


async def test_a_resumed_attempt_replays_the_steer_once_and_never_applies_it_again(
    backend: Any, fake: FakeLLM
) -> None:
    steps: list[dict[str, Any]] = []
    pending = [Steer("st1", STEER)]
    turn = request(TURN)
    with pytest.raises(WorkerLost):
        await backend.run_turn(
            turn, SteeringSink(steps, pending, lambda r: bool(applied_steers(r))), CancelToken()
        )
    assert pending == []  # the step that applied it was recorded before the loss
    sent = len(fake.chat_requests)
    resumed = SteeringSink(list(steps), pending)
    await backend.run_turn(replace(turn, steps=tuple(steps), attempt=2), resumed, CancelToken())
    later = fake.chat_requests[sent:]
    assert later and all(times_seen(r.body) == 1 for r in later)
    assert len(steered_records(resumed.steps)) == 1  # not applied a second time


async def test_a_steer_the_lost_attempt_never_applied_is_applied_by_the_next(
    backend: Any, fake: FakeLLM
) -> None:
    steps: list[dict[str, Any]] = []
    pending: list[Steer] = []
    turn = request(TURN)
    with pytest.raises(WorkerLost):
        await backend.run_turn(
            turn,
            SteeringSink(steps, pending, lambda r: r["kind"] == "tool_started"),
            CancelToken(),
        )
    pending.append(Steer("st1", STEER))  # accepted while no worker held the run
    sent = len(fake.chat_requests)
    resumed = SteeringSink(list(steps), pending)
    result = await backend.run_turn(
        replace(turn, steps=tuple(steps), attempt=2), resumed, CancelToken()
    )
    assert result.output.startswith("Tool said:")
    # The call in flight at the loss is handed back as lost (it does not run again), so the
    # first tool result of the resumed attempt is the second call's, which carries the steer.
    assert [times_seen(r.body) for r in fake.chat_requests[sent:]] == [0, 1]
    assert pending == []
