"""The ``hermes`` backend: Hermes' real ``AIAgent`` against the fake LLM over real sockets.

No Redis here (the backend never touches it): a recording sink stands in for the worker's, and
answers approvals itself. Hermes' state lives in a private ``HERMES_HOME`` for the session.
These tests need the ``hermes`` extra, which CI installs (they fail there without it).
"""

from __future__ import annotations

import asyncio
import stat
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from hermes_queue.agents import load_backend
from hermes_queue.agents.base import (
    AgentError,
    AgentRequest,
    ApprovalRequest,
    CancelToken,
    ProviderAuthError,
    TurnCancelled,
)
from hermes_queue.providers import CredentialsUnavailable
from hermes_queue.routing import Selection
from tests.agents.test_echo import RecordingSink
from tests.conftest import require_hermes
from tests.support.fake_llm import FakeLLM

KEY = "sk-hermes-SECRET-0123456789abcdef"


class ApprovingSink(RecordingSink):
    """Answers every approval request with ``choice`` after noting it."""

    def __init__(self, choice: str = "deny") -> None:
        super().__init__()
        self.choice = choice
        self.requests: list[ApprovalRequest] = []

    async def approval(self, request: ApprovalRequest) -> str:
        self.requests.append(request)
        self.events.append(("approval", request.command))
        return self.choice


@pytest.fixture
async def fake() -> AsyncIterator[FakeLLM]:
    async with FakeLLM(expected_key=KEY) as server:
        yield server


def make_backend(fake: FakeLLM, hermes_home: str, **options: Any) -> Any:
    keys = {"fake": KEY, "spare": KEY}

    def credentials(name: str) -> str:
        if name not in keys:
            raise CredentialsUnavailable(f"no key for provider {name!r}")
        return keys[name]

    providers = {
        name: {"base_url": fake.base_url, "timeout": 5.0, "max_retries": 0}
        for name in ("fake", "spare", "keyless")
    }
    return load_backend(
        "hermes",
        providers=providers,
        default_provider="fake",
        credentials=credentials,
        hermes_home=hermes_home,
        toolsets=options.pop("toolsets", ("todo",)),
        max_iterations=options.pop("max_iterations", 4),
        **options,
    )


@pytest.fixture
async def backend(fake: FakeLLM, hermes_home: str) -> AsyncIterator[Any]:
    instance = make_backend(fake, hermes_home)
    try:
        yield instance
    finally:
        await instance.aclose()


ROUTE = {"provider": "fake", "model": "fake-model"}


def request(message: Any, **fields: Any) -> AgentRequest:
    route = Selection(**fields.pop("route", ROUTE))
    fields.setdefault("session_id", f"s-{uuid.uuid4().hex[:8]}")
    return AgentRequest(run_id=f"run_{uuid.uuid4().hex}", message=message, route=route, **fields)


async def run(backend: Any, message: Any, sink: RecordingSink | None = None, **fields: Any) -> Any:
    sink = sink or ApprovingSink()
    result = await backend.run_turn(request(message, **fields), sink, CancelToken())
    return result, sink


async def test_streams_deltas_and_reports_usage_and_runtime(backend: Any, fake: FakeLLM) -> None:
    result, sink = await run(backend, "hello there world")
    assert result.output == "You said: hello there world" == sink.text
    assert sink.kinds.count("delta") == 5  # streamed word by word
    assert result.usage.input_tokens == fake.usages[-1]["prompt_tokens"] > 0
    assert result.usage.output_tokens == fake.usages[-1]["completion_tokens"]
    assert result.runtime == {"provider": "fake", "model": "fake-model"}
    assert result.messages[-1]["role"] == "assistant"
    assert result.messages[-1]["content"] == result.output
    assert fake.last_request.authorization == f"Bearer {KEY}"


async def test_reasoning_streams_before_the_text(backend: Any) -> None:
    result, sink = await run(backend, "think first [reasoning]")
    reasoning = [event[1] for event in sink.events if event[0] == "reasoning"]
    # Only the model's reasoning: Hermes' preview of the answer is not repeated as reasoning.
    assert "".join(reasoning) == "Thinking about: think first"
    assert sink.kinds.index("reasoning") < sink.kinds.index("delta")
    assert result.messages[-1]["reasoning"] == "Thinking about: think first"


async def test_tool_progress_reaches_the_sink_and_the_loop_finishes(backend: Any) -> None:
    result, sink = await run(backend, "plan my day [toolcall:todo]")
    assert "reasoning" not in sink.kinds  # no reasoning asked for: none reported
    started = [e for e in sink.events if e[0] == "tool_started"]
    completed = [e for e in sink.events if e[0] == "tool_completed"]
    assert [e[1:3] for e in started] == [("todo", "call_fake_1")]
    assert sink.emojis == {"call_fake_1": "📋"}  # Hermes' own icon for the tool
    assert [e[1:3] for e in completed] == [("todo", "call_fake_1")]
    assert completed[0][4] is False and '"todos"' in completed[0][5]  # no error, real result
    assert sink.kinds.index("tool_started") < sink.kinds.index("tool_completed")
    assert result.output.startswith("Tool said:")
    roles = [m["role"] for m in result.messages]
    assert roles == ["assistant", "tool", "assistant"]
    assert result.messages[0]["tool_calls"][0]["function"]["name"] == "todo"
    assert result.messages[1]["tool_call_id"] == "call_fake_1"


class NoteTakingSink(ApprovingSink):
    async def thinking(self, text: str) -> None:
        self.events.append(("thinking", text))


async def test_hermes_progress_notes_reach_a_sink_that_takes_them(backend: Any) -> None:
    """Hermes tells its ``reasoning.available`` note (the text of each model reply, before
    that reply's tools run) through the progress callback: upstream's session stream shows it
    as ``tool.progress``. It reaches a sink with ``thinking``; never ``sink.reasoning``."""
    result, sink = await run(backend, "plan my day [toolcall:todo]", NoteTakingSink())
    notes = [event[1] for event in sink.events if event[0] == "thinking"]
    assert notes == ["You said: plan my day", result.output]
    assert sink.kinds.index("thinking") < sink.kinds.index("tool_started")
    assert "reasoning" not in sink.kinds
    _, plain = await run(backend, "hello there")  # a sink without notes: nothing changes
    assert "thinking" not in plain.kinds


async def test_the_turn_transcript_is_hermes_messages_in_upstreams_client_shape(
    backend: Any,
) -> None:
    """As upstream's run.completed shows them and its agent stores them: the agent's own
    keys (finish reasons, Hermes' call ids on tool calls, reasoning), no time stamp (the store
    adds it), nothing outside upstream's message projection."""
    result, _ = await run(backend, "plan my day [toolcall:todo]")
    call, tool, final = result.messages
    assert call["finish_reason"] == "tool_calls" and final["finish_reason"] == "stop"
    assert call["tool_calls"][0]["call_id"] == "call_fake_1"
    assert call["tool_calls"][0]["id"] == "call_fake_1"
    assert tool == {
        "role": "tool",
        "content": tool["content"],
        "tool_call_id": "call_fake_1",
        "tool_name": "todo",
    }
    assert '"todos"' in tool["content"]
    assert "reasoning" in final and final["reasoning"] is None  # Hermes sets it, to None
    assert all("timestamp" not in m for m in result.messages)


async def test_history_and_instructions_reach_the_provider(backend: Any, fake: FakeLLM) -> None:
    history = [
        {"role": "user", "content": "earlier question", "timestamp": 1.0},
        {"role": "assistant", "content": "earlier answer", "timestamp": 2.0},
    ]
    await run(backend, "and now?", history=history, instructions="Answer like a pirate.")
    messages = fake.last_request.body["messages"]
    assert [m["content"] for m in messages[1:]] == [
        "earlier question",
        "earlier answer",
        "and now?",
    ]
    assert "Answer like a pirate." in messages[0]["content"]  # Hermes' system prompt + ours
    assert all("timestamp" not in m for m in messages)


async def test_a_sessions_next_turn_reuses_its_warm_agent(fake: FakeLLM, hermes_home: str) -> None:
    backend = make_backend(fake, hermes_home)
    built: list[Any] = []
    original = backend._build

    def counting_build(*args: Any) -> Any:
        built.append(original(*args))
        return built[-1]

    backend._build = counting_build
    try:
        first, _ = await run(backend, "one", session_id="warm-1")
        history = [{"role": "user", "content": "one"}, *first.messages]
        second, sink = await run(backend, "two", session_id="warm-1", history=history)
        assert second.output == "You said: two" == sink.text
        assert len(built) == 1  # the second turn ran on the first turn's agent
        assert second.usage.input_tokens == fake.usages[-1]["prompt_tokens"]  # per turn
        await run(backend, "three", session_id="warm-2")
        assert len(built) == 2  # another session gets its own agent
        await run(backend, "four", session_id="warm-1", instructions="new instructions")
        assert len(built) == 3  # built differently: not reused
    finally:
        await backend.aclose()


async def test_stop_interrupts_the_agent_promptly(hermes_home: str) -> None:
    async with FakeLLM(expected_key=KEY, token_delay=0.2) as fake:
        backend = make_backend(fake, hermes_home)
        sink, token = ApprovingSink(), CancelToken()
        words = " ".join(f"w{i}" for i in range(60))
        turn = asyncio.ensure_future(backend.run_turn(request(words), sink, token))
        try:
            await asyncio.wait_for(sink.first_delta.wait(), 10)
            token.cancel("Stop requested via API")
            with pytest.raises(TurnCancelled):
                await asyncio.wait_for(turn, 5)  # 60 tokens at 0.2 s would take 12 s
            assert len(sink.text.split()) < 20
        finally:
            await backend.aclose()


async def test_a_denied_command_is_blocked_and_the_agent_is_told(
    fake: FakeLLM, hermes_home: str, tmp_path: Path
) -> None:
    target = tmp_path / "keep-me"
    target.mkdir()
    backend = make_backend(fake, hermes_home, toolsets=("terminal",))
    try:
        sink = ApprovingSink("deny")
        result, _ = await run(backend, f"clean up [terminal:rm -rf {target}]", sink=sink)
    finally:
        await backend.aclose()
    assert target.exists()  # the command never ran
    assert [r.command for r in sink.requests] == [f"rm -rf {target}"]
    request = sink.requests[0]
    assert request.description and "deny" in request.choices
    completed = [e for e in sink.events if e[0] == "tool_completed"]
    assert completed and "BLOCKED" in completed[0][5]
    assert sink.kinds.index("approval") < sink.kinds.index("tool_completed")
    assert result.output.startswith("Tool said: ")


async def test_an_approved_command_runs(fake: FakeLLM, hermes_home: str, tmp_path: Path) -> None:
    target = tmp_path / "shared.txt"
    target.write_text("x")
    target.chmod(0o600)
    backend = make_backend(fake, hermes_home, toolsets=("terminal",))
    try:
        sink = ApprovingSink("once")
        await run(backend, f"open it up [terminal:chmod 777 {target}]", sink=sink)
    finally:
        await backend.aclose()
    assert len(sink.requests) == 1
    assert stat.S_IMODE(target.stat().st_mode) == 0o777


async def test_unresolvable_credentials_fail_closed(backend: Any, fake: FakeLLM) -> None:
    with pytest.raises(ProviderAuthError, match="Provider authentication failed"):
        await run(backend, "hi", route={"provider": "keyless", "model": "m"})
    assert fake.chat_requests == []  # nothing was sent anywhere


async def test_a_rejected_key_is_an_auth_failure_without_the_key(
    fake: FakeLLM, hermes_home: str
) -> None:
    fake.expected_key = "some-other-key"
    backend = make_backend(fake, hermes_home)
    try:
        with pytest.raises(ProviderAuthError) as caught:
            await run(backend, "hi")
    finally:
        await backend.aclose()
    assert "401" in str(caught.value) and KEY not in str(caught.value)


async def test_provider_errors_fail_the_turn_with_their_message(backend: Any) -> None:
    with pytest.raises(AgentError, match="fake provider error 400") as caught:
        await run(backend, "bad [error:400]")
    assert not isinstance(caught.value, ProviderAuthError)


async def test_model_options_set_reasoning_and_service_tier(backend: Any, fake: FakeLLM) -> None:
    """Reasoning effort reaches the provider; the service tier is set on the agent, and Hermes
    sends it only to providers that take one (not to a generic endpoint like the fake)."""
    options = {"reasoning": {"enabled": True, "effort": "high"}, "fast": True}
    await run(backend, "hi", route={**ROUTE, "model_options": options}, session_id="opts")
    assert fake.last_request.body["reasoning_effort"] == "high"
    agent, _ = backend.warm.take("opts", next(iter(backend.warm._agents.values()))[0])
    assert agent.service_tier == "priority"
    assert agent.reasoning_config == {"enabled": True, "effort": "high"}
    await run(backend, "hi", route={**ROUTE, "model_options": {"reasoning_effort": "none"}})
    assert fake.last_request.body["reasoning_effort"] == "none"  # reasoning switched off


async def test_the_key_appears_in_no_event_result_or_message(backend: Any) -> None:
    result, sink = await run(backend, "plan [toolcall:todo] [reasoning]")
    assert KEY not in repr(sink.events)
    assert KEY not in repr(result)


async def test_catalog_lists_skills_and_toolsets_with_the_enabled_ones_marked(
    backend: Any, hermes_home: str
) -> None:
    skill = Path(hermes_home) / "skills" / "testing" / "hq-demo-skill" / "SKILL.md"
    skill.parent.mkdir(parents=True, exist_ok=True)
    skill.write_text(
        "---\nname: hq-demo-skill\ndescription: Says hello the hermes-queue way.\n---\n\nBody.\n"
    )
    catalog = await backend.catalog()
    toolsets = {item["name"]: item for item in catalog.toolsets}
    assert toolsets["todo"]["enabled"] is True and toolsets["todo"]["tools"] == ["todo"]
    assert toolsets["terminal"]["enabled"] is False  # not in this backend's toolsets
    assert {"label", "description", "configured"} <= set(toolsets["terminal"])
    skills = {item["name"]: item for item in catalog.skills}
    assert skills["hq-demo-skill"]["description"] == "Says hello the hermes-queue way."


def test_hermes_info_lines_go_to_its_log_file_not_to_a_warning_level_worker(
    tmp_path: Path,
) -> None:
    """Hermes lowers the root logger to INFO for its own files; the worker's output keeps the
    configured level. Run in a fresh interpreter: logging and Hermes are set up once each."""
    require_hermes()
    home = tmp_path / "home"
    script = f"""
import logging
from hermes_queue.logs import configure_logging
from hermes_queue.agents.hermes import process
configure_logging("WARNING", "text")
process.prepare({str(home)!r})
import hermes_logging
hermes_logging.setup_logging()  # what Hermes' first agent does
logging.getLogger("run_agent").info("hermes-info-line")
logging.getLogger("run_agent").warning("hermes-warning-line")
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    output = done.stdout + done.stderr
    assert "hermes-warning-line" in output
    assert "hermes-info-line" not in output
    assert "hermes-info-line" in (home / "logs" / "agent.log").read_text()


async def test_a_stop_while_the_agent_is_built_never_reaches_the_provider(
    backend: Any, fake: FakeLLM
) -> None:
    token = CancelToken()
    original = backend._build

    def build_then_stop(*args: Any) -> Any:
        agent = original(*args)
        token.cancel("Stop requested via API")  # lands while the turn is still starting
        return agent

    backend._build = build_then_stop
    with pytest.raises(TurnCancelled):
        await backend.run_turn(request("hi"), ApprovingSink(), token)
    assert fake.chat_requests == []


async def test_an_exception_inside_hermes_fails_the_turn_with_the_key_scrubbed(
    backend: Any,
) -> None:
    original = backend._build

    def build_broken(*args: Any) -> Any:
        agent = original(*args)

        def explode(**kwargs: Any) -> Any:
            raise RuntimeError(f"kaput while using {KEY}")

        agent.run_conversation = explode
        return agent

    backend._build = build_broken
    with pytest.raises(AgentError) as caught:
        await run(backend, "hi")
    assert "RuntimeError: kaput" in str(caught.value) and KEY not in str(caught.value)


class StoppedWhileAskingSink(ApprovingSink):
    """Stops the run while an approval is pending, as a stop request from any replica does."""

    def __init__(self, token: CancelToken) -> None:
        super().__init__()
        self.token = token

    async def approval(self, request: ApprovalRequest) -> str:
        self.requests.append(request)
        self.token.cancel("Stop requested via API")
        raise TurnCancelled(self.token.reason)


async def test_a_stop_while_waiting_for_consent_cancels_and_the_command_never_runs(
    fake: FakeLLM, hermes_home: str, tmp_path: Path
) -> None:
    target = tmp_path / "keep-me"
    target.mkdir()
    backend = make_backend(fake, hermes_home, toolsets=("terminal",))
    token = CancelToken()
    sink = StoppedWhileAskingSink(token)
    try:
        turn = backend.run_turn(request(f"go [terminal:rm -rf {target}]"), sink, token)
        with pytest.raises(TurnCancelled):
            await asyncio.wait_for(turn, 30)
    finally:
        await backend.aclose()
    assert len(sink.requests) == 1 and target.exists()
    # The agent did not go back to the model with a tool result after the stop.
    assert not any(r.body["messages"][-1].get("role") == "tool" for r in fake.chat_requests)


async def test_shutdown_interrupts_a_running_agent_instead_of_waiting_for_it(
    hermes_home: str,
) -> None:
    async with FakeLLM(expected_key=KEY, token_delay=0.2) as fake:
        backend = make_backend(fake, hermes_home)
        sink = ApprovingSink()
        words = " ".join(f"w{i}" for i in range(60))  # 12 s of tokens
        turn = asyncio.ensure_future(backend.run_turn(request(words), sink, CancelToken()))
        await asyncio.wait_for(sink.first_delta.wait(), 10)
        await asyncio.wait_for(backend.aclose(), 5)
        with pytest.raises(TurnCancelled):
            await asyncio.wait_for(turn, 5)
