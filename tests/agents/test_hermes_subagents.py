"""Delegation in the ``hermes`` backend: Hermes' ``delegate_task`` relays its child agents'
progress to the parent's callbacks; only ``subagent.start`` / ``subagent.complete`` reach the
sink, with upstream's whitelisted fields and free text redacted (upstream-api.md §3.3).

The bridge tests need no Hermes (the bridge imports none of it until an approval); the last
test runs a real parent and child ``AIAgent`` against the fake LLM.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from hermes_queue.agents.base import CancelToken
from hermes_queue.agents.hermes.bridge import TurnBridge
from hermes_queue.events import SUBAGENT_FIELDS
from tests.agents.test_echo import RecordingSink
from tests.agents.test_hermes import KEY, ApprovingSink, make_backend, request
from tests.support.fake_llm import FakeLLM

# Secret-shaped text (an OpenAI-style key) the log redactor masks wherever it appears.
SECRET = "sk-live-0123456789abcdefXYZ"
# A provider key of no known shape: only the bridge's provider scrub can catch it.
PROVIDER_KEY = "prov-key-7f3a9c2e5b1d"

Call = tuple[tuple[Any, ...], dict[str, Any]]


async def relay(calls: list[Call]) -> RecordingSink:
    """Feed ``on_progress`` calls from a thread, as the agent does, and pump them to a sink."""
    sink = RecordingSink()
    bridge = TurnBridge(
        asyncio.get_running_loop(),
        sink,
        "run_x",
        interrupt=lambda reason: None,
        scrub=lambda text: text.replace(PROVIDER_KEY, "***"),
    )
    pump = asyncio.ensure_future(bridge.pump())

    def agent_thread() -> None:
        for args, kwargs in calls:
            bridge.on_progress(*args, **kwargs)
        bridge.close()

    await asyncio.to_thread(agent_thread)
    await asyncio.wait_for(pump, 5)
    assert bridge.failure is None
    return sink


IDENTITY = {
    "task_index": 0,
    "task_count": 1,
    "goal": "look around",
    "subagent_id": "sa-0-1234abcd",
    "depth": 0,
    "model": "m",
    "toolsets": ["terminal", "file"],
    "tool_count": 0,
}


async def test_child_thinking_text_tools_and_progress_are_not_forwarded() -> None:
    sink = await relay(
        [
            (("_thinking", "a child's first line"), {}),
            (("subagent.thinking", None, "musing"), IDENTITY),
            (("subagent.text", None, "You said"), IDENTITY),
            (("subagent.tool", "terminal", "ls", {"command": "ls"}), IDENTITY),
            (("subagent.progress", None, "🔀 terminal, terminal"), IDENTITY),
            (("subagent_progress", "[1] terminal"), {}),
            (("subagent.spawn_requested", None, "look around"), {}),
        ]
    )
    assert sink.events == []


async def test_start_and_complete_keep_whitelisted_fields_with_free_text_redacted() -> None:
    goal = f"use {PROVIDER_KEY} and {SECRET}"
    identity = {**IDENTITY, "goal": goal, "unknown_field": "x"}
    complete = {
        **identity,
        "status": "completed",
        "summary": f"done with {SECRET}",
        "duration_seconds": 1.5,
        "api_calls": 2,
        "files_read": [Path("/tmp/a.txt")],  # not JSON: sent as text
        "files_written": ("/tmp/b.txt",),
        "output_tail": [{"tool": "terminal", "preview": f"echo {SECRET}", "is_error": False}],
        "cost_usd": None,  # absent values are left out
    }
    sink = await relay(
        [
            (("subagent.start", None, goal), identity),
            (("subagent.complete", None, f"done with {SECRET}"), complete),
        ]
    )
    (_, start_phase, start), (_, end_phase, end) = sink.events
    assert (start_phase, end_phase) == ("start", "complete")
    for details in (start, end):
        assert set(details) <= set(SUBAGENT_FIELDS)
        assert "toolsets" not in details and "unknown_field" not in details
        assert SECRET not in json.dumps(details) and PROVIDER_KEY not in json.dumps(details)
        assert details["goal"] == "use *** and sk-***"
        assert details["subagent_id"] == "sa-0-1234abcd" and details["task_count"] == 1
    assert start["preview"] == "use *** and sk-***"
    assert end["preview"] == end["summary"] == "done with sk-***"
    assert end["output_tail"] == [{"tool": "terminal", "preview": "echo sk-***", "is_error": False}]
    assert end["files_read"] == ["/tmp/a.txt"] and end["files_written"] == ["/tmp/b.txt"]
    assert end["duration_seconds"] == 1.5 and "cost_usd" not in end


@pytest.fixture
async def fake() -> AsyncIterator[FakeLLM]:
    async with FakeLLM(expected_key=KEY) as server:
        yield server


async def test_a_delegated_child_runs_and_its_start_and_end_reach_the_sink(
    fake: FakeLLM, hermes_home: str
) -> None:
    """The parent calls ``delegate_task``; Hermes builds and runs a child agent (same provider,
    so the same fake LLM answers it) and relays its lifecycle through our bridge."""
    # ``delegation`` offers delegate_task to the parent; a leaf child keeps the rest (``todo``).
    backend = make_backend(fake, hermes_home, toolsets=("delegation", "todo"))
    sink = ApprovingSink()
    goal = f"find the key {SECRET} now"
    try:
        result = await backend.run_turn(request(f"please [delegate:{goal}]"), sink, CancelToken())
    finally:
        await backend.aclose()

    calls = [e for e in sink.events if e[0] in ("tool_started", "tool_completed")]
    assert [e[:2] for e in calls] == [
        ("tool_started", "delegate_task"),
        ("tool_completed", "delegate_task"),
    ]
    first, last = sink.events.index(calls[0]), sink.events.index(calls[1])
    # Inside the delegate_task call only the child's start and end: its thinking and streamed
    # text (which Hermes relays too) are not forwarded, not even as reasoning.
    assert [e[:2] for e in sink.events[first + 1 : last]] == [
        ("subagent", "start"),
        ("subagent", "complete"),
    ]
    assert "reasoning" not in sink.kinds
    start, end = sink.events[first + 1][2], sink.events[first + 2][2]
    redacted_goal = "find the key sk-*** now"
    assert start["goal"] == start["preview"] == redacted_goal
    assert start["task_index"] == 0 and start["task_count"] == 1 and start["depth"] == 0
    assert start["model"] == "fake-model" and start["subagent_id"].startswith("sa-0-")
    assert start["child_session_id"]
    assert end["subagent_id"] == start["subagent_id"] and end["goal"] == redacted_goal
    assert end["status"] == "completed" and end["api_calls"] == 1
    assert end["summary"] == f"You said: {redacted_goal}"  # the child's answer, redacted
    assert end["input_tokens"] > 0 and end["output_tokens"] > 0
    assert end["duration_seconds"] >= 0 and end["output_tail"] == []
    for details in (start, end):
        assert set(details) <= set(SUBAGENT_FIELDS) and "toolsets" not in details
        assert SECRET not in json.dumps(details)
    assert len(fake.chat_requests) == 3  # parent, child, parent again with the tool result
    assert result.output.startswith("Tool said:")
