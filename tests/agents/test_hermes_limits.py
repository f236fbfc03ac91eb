"""A run's ``execution_policy`` on Hermes' real ``AIAgent`` against the fake LLM: its toolsets
narrow what the model is offered (never widen it: a toolset the deployment does not enable is
not offered either), and its ``max_turns`` caps the agent's model calls, as upstream shrinks the
profile it built."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from hermes_queue.agents.base import TurnLimits
from tests.agents.test_hermes import make_backend, run
from tests.conftest import require_hermes
from tests.support.fake_llm import FakeLLM
from tests.support.llm_replies import tool_names

DEPLOYED = ("todo", "terminal")


@pytest.fixture
async def fake() -> AsyncIterator[FakeLLM]:
    require_hermes()
    async with FakeLLM(expected_key="sk-hermes-SECRET-0123456789abcdef") as server:
        yield server


@pytest.fixture
async def backend(fake: FakeLLM, hermes_home: str) -> AsyncIterator[Any]:
    instance = make_backend(fake, hermes_home, toolsets=DEPLOYED, max_iterations=6)
    try:
        yield instance
    finally:
        await instance.aclose()


async def test_toolsets_outside_the_policy_are_not_offered(backend: Any, fake: FakeLLM) -> None:
    await run(backend, "hello")
    everything = tool_names(fake.last_request.body)
    assert "todo" in everything and "terminal" in everything  # what the deployment offers

    # "web" is not enabled here: asking for it widens nothing.
    limits = TurnLimits(toolsets=("todo", "web"))
    await run(backend, "hello again", limits=limits)
    assert tool_names(fake.last_request.body) == ["todo"]

    await run(backend, "and nothing", limits=TurnLimits(toolsets=("web",)))
    assert tool_names(fake.last_request.body) == []

    # The next turn without a policy is offered the deployment's tools again.
    await run(backend, "back to normal")
    assert tool_names(fake.last_request.body) == everything


async def test_max_turns_caps_the_agents_model_calls(backend: Any, fake: FakeLLM) -> None:
    loop = "use the tool five times [calls:5] [toolcall:todo]"
    before = len(fake.chat_requests)
    await run(backend, loop, limits=TurnLimits(max_turns=2))
    capped = fake.chat_requests[before:]
    # Two model calls of the loop, then Hermes' own summary request (tools stripped).
    assert len(capped) == 3 and tool_names(capped[-1].body) == []
    before = len(fake.chat_requests)
    await run(backend, loop)
    assert len(fake.chat_requests) - before == 6  # the deployment's limit: the whole loop
