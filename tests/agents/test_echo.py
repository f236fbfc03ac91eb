"""The echo backend is the fixture every later end-to-end test leans on, so pin its contract."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from hermes_queue.agents import AgentBackend, known_backends, load_backend
from hermes_queue.agents.base import (
    AgentError,
    AgentRequest,
    AgentResult,
    CancelToken,
    SubagentPhase,
    TurnCancelled,
)
from hermes_queue.agents.echo import EchoBackend
from hermes_queue.routing import Selection


class RecordingSink:
    """Appends one tuple per event; ``first_delta`` lets a test react to streaming starting."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.first_delta = asyncio.Event()
        self.emojis: dict[str, str | None] = {}  # call id -> the tool's emoji, if named

    async def delta(self, text: str) -> None:
        self.events.append(("delta", text))
        self.first_delta.set()

    async def reasoning(self, text: str) -> None:
        self.events.append(("reasoning", text))

    async def tool_started(
        self,
        name: str,
        call_id: str,
        preview: str | None = None,
        args: Any = None,
        emoji: str | None = None,
    ) -> None:
        self.events.append(("tool_started", name, call_id, preview, args))
        self.emojis[call_id] = emoji

    async def tool_completed(
        self,
        name: str,
        call_id: str,
        duration: float = 0.0,
        error: bool = False,
        result: str | None = None,
    ) -> None:
        self.events.append(("tool_completed", name, call_id, duration, error, result))

    async def subagent(self, phase: SubagentPhase, details: dict[str, Any]) -> None:
        self.events.append(("subagent", phase, details))

    @property
    def kinds(self) -> list[str]:
        return [event[0] for event in self.events]

    @property
    def text(self) -> str:
        return "".join(event[1] for event in self.events if event[0] == "delta")


async def run(
    message: Any, history: list[dict[str, Any]] | None = None, **kwargs: Any
) -> tuple[AgentResult, RecordingSink]:
    sink = RecordingSink()
    request = AgentRequest(
        run_id="r1", session_id="s1", message=message, history=history or [], **kwargs
    )
    result = await EchoBackend().run_turn(request, sink, CancelToken())
    return result, sink


async def test_plain_echo_streams_deltas_that_equal_output() -> None:
    result, sink = await run("hello   there world")
    assert result.output == "Echo: hello there world"
    assert sink.kinds == ["delta"] * 4
    assert sink.text == result.output
    assert result.usage.input_tokens == 3
    assert result.usage.output_tokens == 4
    assert result.runtime == {"provider": "echo", "model": "echo"}
    [final] = result.messages
    assert final["role"] == "assistant" and final["content"] == result.output
    assert "reasoning" not in final and isinstance(final["timestamp"], float)


async def test_runtime_follows_route() -> None:
    result, _ = await run("hi", route=Selection(provider="acme", model="m-1"))
    assert result.runtime == {"provider": "acme", "model": "m-1"}


async def test_think_emits_reasoning_first() -> None:
    result, sink = await run("[think] why sky blue")
    assert sink.events[0] == ("reasoning", "Thinking about: why sky blue")
    assert set(sink.kinds[1:]) == {"delta"}
    assert result.output == "Echo: why sky blue"
    assert result.messages[-1]["reasoning"] == "Thinking about: why sky blue"


async def test_tools_emitted_mid_reply_and_recorded() -> None:
    result, sink = await run("look [tool:web.search] up [tool:calc_2] four words")
    assert result.output == "Echo: look up four words"  # 5 tokens -> tools after 3
    assert sink.kinds == ["delta"] * 3 + ["tool_started", "tool_completed"] * 2 + ["delta"] * 2
    args = {"query": "look up four words"}
    assert sink.events[3] == ("tool_started", "web.search", "call_1", "web.search preview", args)
    done = sink.events[4]
    assert done[:3] == ("tool_completed", "web.search", "call_1") and done[4:] == (False, "ok")
    assert done[3] >= 0
    assert sink.events[5][1:3] == ("calc_2", "call_2")

    call, tool, call2, tool2, final = result.messages
    assert call["role"] == "assistant" and call["content"] == ""
    assert call["tool_calls"] == [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "web.search", "arguments": json.dumps(args)},
        }
    ]
    assert {k: tool[k] for k in ("role", "tool_call_id", "tool_name", "content")} == {
        "role": "tool",
        "tool_call_id": "call_1",
        "tool_name": "web.search",
        "content": "ok",
    }
    assert call2["tool_calls"][0]["id"] == tool2["tool_call_id"] == "call_2"
    assert final == {**final, "role": "assistant", "content": result.output}
    assert all("timestamp" in m for m in result.messages)


async def test_fail_raises_after_half_the_tokens() -> None:
    sink = RecordingSink()
    request = AgentRequest(run_id="r", session_id="s", message="[fail] one two three")
    with pytest.raises(AgentError, match="echo backend failure requested"):
        await EchoBackend().run_turn(request, sink, CancelToken())
    assert sink.kinds == ["delta", "delta"]  # 4 tokens, failed after 2
    assert sink.text == "Echo: one "


async def test_history_suffix_and_usage_counts_history() -> None:
    history: list[dict[str, Any]] = [
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": "Echo: first question"},
        {"role": "user", "content": [{"type": "text", "text": "second"}]},
        {"role": "assistant", "content": "Echo: second (turn 2)"},
    ]
    result, sink = await run("third [tool:t]", history=history)
    assert result.output == "Echo: third (turn 3)"
    assert sink.text == result.output
    # history words: 2 + 3 + 1 + 4 = 10; message "third [tool:t]" = 2
    assert result.usage.input_tokens == 12
    assert result.usage.output_tokens == 4


async def test_content_part_list() -> None:
    parts = [
        {"type": "text", "text": "what is"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        {"type": "text", "text": "this?"},
    ]
    result, sink = await run(parts)
    assert result.output == "Echo: what is [image] this?"
    assert sink.text == result.output
    assert result.usage.input_tokens == 4


async def test_slow_pads_and_uses_delay() -> None:
    sink = RecordingSink()
    request = AgentRequest(run_id="r", session_id="s", message="[slow:0] hi")
    result = await EchoBackend().run_turn(request, sink, CancelToken())
    assert result.output.startswith("Echo: hi tick tick")
    assert result.usage.output_tokens >= 50
    assert sink.text == result.output


async def test_cancel_mid_turn_is_prompt() -> None:
    backend = EchoBackend(token_delay=5.0)
    sink = RecordingSink()
    cancel = CancelToken()
    request = AgentRequest(run_id="r", session_id="s", message="a b c d e f")
    task = asyncio.create_task(backend.run_turn(request, sink, cancel))
    await asyncio.wait_for(sink.first_delta.wait(), timeout=5)
    cancel.cancel("user stop")
    with pytest.raises(TurnCancelled, match="user stop"):
        # Promptly: well before the next token (5 s away) could have ended the wait.
        await asyncio.wait_for(task, timeout=backend.token_delay / 5)
    assert sink.kinds == ["delta"]


async def test_cancel_without_delay_stops_between_tokens() -> None:
    sink = RecordingSink()
    cancel = CancelToken()
    request = AgentRequest(run_id="r", session_id="s", message=" ".join(["w"] * 200))
    task = asyncio.create_task(EchoBackend().run_turn(request, sink, cancel))

    async def stop_on_first_delta() -> None:
        await sink.first_delta.wait()
        cancel.cancel()

    stopper = asyncio.create_task(stop_on_first_delta())
    with pytest.raises(TurnCancelled):
        await asyncio.wait_for(task, timeout=5)
    await stopper
    assert len(sink.events) < 200


async def test_registry() -> None:
    backend = load_backend("echo", token_delay=0.01)
    assert isinstance(backend, EchoBackend) and isinstance(backend, AgentBackend)
    assert backend.name == "echo" and backend.token_delay == 0.01
    assert "echo" in known_backends()
    with pytest.raises(ValueError, match="echo"):
        load_backend("nope")
    await backend.aclose()
