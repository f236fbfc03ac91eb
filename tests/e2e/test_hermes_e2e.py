"""The hermes backend across OS processes: API replicas and a worker running Hermes' AIAgent
against fake LLM providers over loopback. Streaming, tool progress, reasoning, stop, an approval
answered through another replica than the one that started the run, the catalog, and a locked
session whose turn uses only the locked provider's key (which never reaches Redis)."""

from __future__ import annotations

import asyncio
import contextlib
import stat
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from hermes_queue.client import iter_sse
from hermes_queue.config import Settings
from hermes_queue.providers import ProviderSettings
from tests.conftest import require_hermes
from tests.e2e.test_model_lock_e2e import keys_holding
from tests.support.fake_llm import FakeLLM
from tests.support.polling import eventually
from tests.support.processes import Cluster, starts_processes

# The stack's processes start together: one start's guard (a hermes worker's warm-up).
pytestmark = starts_processes(1)

ALPHA_KEY = "sk-hermes-alpha-0123456789abcdef"
BETA_KEY = "sk-hermes-beta-0123456789abcdef"


@dataclass
class Stack:
    cluster: Cluster
    alpha: FakeLLM
    beta: FakeLLM
    first: str  # API replica that starts runs
    second: str  # another replica: reads, answers, stops
    session: aiohttp.ClientSession


@pytest.fixture
async def stack(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Stack]:
    require_hermes()
    monkeypatch.setenv("HQ_TEST_ALPHA_KEY", ALPHA_KEY)
    monkeypatch.setenv("HQ_TEST_BETA_KEY", BETA_KEY)
    async with contextlib.AsyncExitStack() as stack:
        alpha = await stack.enter_async_context(FakeLLM(expected_key=ALPHA_KEY))
        beta = await stack.enter_async_context(FakeLLM(expected_key=BETA_KEY))
        cluster = Cluster(
            settings.replace(
                agent_backend="hermes",
                providers={
                    "alpha": ProviderSettings(
                        "alpha", alpha.base_url, api_key_env="HQ_TEST_ALPHA_KEY"
                    ),
                    "beta": ProviderSettings("beta", beta.base_url, api_key_env="HQ_TEST_BETA_KEY"),
                },
                default_provider="alpha",
                default_model="alpha-default",
                fallback_model="beta::beta-fallback",
                hermes_home=str(tmp_path / "hermes"),
                hermes_toolsets=("terminal", "todo"),
                hermes_max_iterations=4,
            ).validate()
        )
        stack.callback(cluster.stop_all)
        # Started together: under a loaded machine three starts one after another took longer
        # than the suite's per-test guard, while starting at once they share the machine.
        first, second, _worker = await asyncio.gather(
            cluster.start_api(), cluster.start_api(), cluster.start_worker()
        )
        headers = {"Authorization": f"Bearer {settings.api.api_key}"}
        session = await stack.enter_async_context(aiohttp.ClientSession(headers=headers))
        yield Stack(cluster, alpha, beta, first, second, session)


async def start_run(stack: Stack, text: str) -> str:
    async with stack.session.post(f"{stack.first}/v1/runs", json={"input": text}) as created:
        assert created.status == 202, await created.text()
        return str((await created.json())["run_id"])


async def events(stack: Stack, run_id: str, within: float = 30) -> list[dict[str, Any]]:
    """Every event of the run, read from the second replica to the end of the stream."""

    async def read() -> list[dict[str, Any]]:
        async with stack.session.get(f"{stack.second}/v1/runs/{run_id}/events") as response:
            return [frame.json() async for frame in iter_sse(response) if frame.data]

    return await asyncio.wait_for(read(), within)


async def wait_status(stack: Stack, run_id: str, *wanted: str) -> dict[str, Any]:
    async def status() -> dict[str, Any]:
        async with stack.session.get(f"{stack.second}/v1/runs/{run_id}") as response:
            return dict(await response.json())

    return await eventually(status, lambda b: b["status"] in wanted, within=30, what=run_id)


async def locked_chat(
    stack: Stack, session_id: str, provider: str, model: str, message: str
) -> Any:
    """Create a session locked to ``provider``/``model`` on one replica, chat on the other."""
    created = await stack.session.post(
        f"{stack.first}/api/sessions",
        json={"id": session_id, "provider": provider, "model": model, "require_model_lock": True},
    )
    assert created.status == 201, await created.text()
    async with stack.session.post(
        f"{stack.second}/api/sessions/{session_id}/chat", json={"message": message}
    ) as response:
        assert response.status == 200, await response.text()
        return await response.json()


async def test_a_turn_streams_reasoning_text_and_tool_progress(stack: Stack) -> None:
    run_id = await start_run(stack, "plan my day [toolcall:todo] [reasoning]")
    seen = await events(stack, run_id)
    names = [event["event"] for event in seen]
    assert names[-1] == "run.completed", names
    # As upstream's runs stream: reasoning.available is Hermes' progress note (the reply's text,
    # told before its tools run), not the model's streamed reasoning.
    notes = [e["text"] for e in seen if e["event"] == "reasoning.available"]
    assert notes[0].startswith("You said: plan my day")
    assert not any("Thinking about" in note for note in notes)
    assert names.index("message.delta") < names.index("reasoning.available")
    assert names.index("reasoning.available") < names.index("tool.started")
    started = next(e for e in seen if e["event"] == "tool.started")
    completed = next(e for e in seen if e["event"] == "tool.completed")
    assert started["tool"] == completed["tool"] == "todo"
    assert names.index("tool.started") < names.index("tool.completed")
    assert completed["error"] is False
    assert seen[-1]["output"].startswith("Tool said:")
    assert seen[-1]["usage"]["input_tokens"] > 0
    # Two model calls (the tool loop came back), both with the default provider's key.
    assert [r.authorization for r in stack.alpha.chat_requests] == [f"Bearer {ALPHA_KEY}"] * 2


async def test_stop_through_another_replica_interrupts_the_agent(stack: Stack) -> None:
    stack.alpha.token_delay = 0.2
    run_id = await start_run(stack, " ".join(f"word{i}" for i in range(80)))  # ~16 s of tokens
    async with stack.session.get(f"{stack.second}/v1/runs/{run_id}/events") as response:
        stream = iter_sse(response)
        async for frame in stream:
            if frame.data and frame.json()["event"] == "message.delta":
                break
        async with stack.session.post(f"{stack.second}/v1/runs/{run_id}/stop") as stopped:
            assert stopped.status in (200, 202), await stopped.text()
        rest = await asyncio.wait_for(
            _collect(stream), 8
        )  # far less than the turn's 16 s of tokens
    assert rest[-1]["event"] == "run.cancelled"
    assert (await wait_status(stack, run_id, "cancelled"))["status"] == "cancelled"


async def _collect(stream: Any) -> list[dict[str, Any]]:
    return [frame.json() async for frame in stream if frame.data]


async def test_an_approval_answered_through_another_replica_lets_the_command_run(
    stack: Stack, tmp_path: Path
) -> None:
    target = tmp_path / "shared.txt"
    target.write_text("x")
    target.chmod(0o600)
    run_id = await start_run(stack, f"share it [terminal:chmod 777 {target}]")
    waiting = await wait_status(stack, run_id, "waiting_for_approval")
    assert waiting["status"] == "waiting_for_approval"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600  # nothing ran before consent
    async with stack.session.post(
        f"{stack.second}/v1/runs/{run_id}/approval", json={"choice": "once"}
    ) as answered:
        assert answered.status == 200, await answered.text()
    seen = await events(stack, run_id)
    names = [event["event"] for event in seen]
    request = next(e for e in seen if e["event"] == "approval.request")
    assert request["command"] == f"chmod 777 {target}" and "once" in request["choices"]
    assert names.index("approval.request") < names.index("approval.responded")
    assert names.index("approval.responded") < names.index("tool.completed")
    assert names[-1] == "run.completed"
    assert stat.S_IMODE(target.stat().st_mode) == 0o777


async def test_the_catalog_reaches_every_replica(stack: Stack) -> None:

    async def toolsets() -> dict[str, Any]:
        async with stack.session.get(f"{stack.second}/v1/toolsets") as response:
            return dict(await response.json())

    body = await eventually(toolsets, lambda b: b["data"], within=10, what="a catalog")
    enabled = sorted(item["name"] for item in body["data"] if item["enabled"])
    assert body["platform"] == "api_server" and enabled == ["terminal", "todo"]
    async with stack.session.get(f"{stack.first}/v1/capabilities") as response:
        assert (await response.json())["features"]["skills_api"] is True


async def test_a_locked_session_uses_only_the_locked_provider_and_keys_stay_out_of_redis(
    stack: Stack,
) -> None:
    reply = await locked_chat(stack, "locked-1", "beta", "beta-large", "hello")
    assert reply["message"]["content"] == stack.beta.reply_for("hello")
    assert reply["runtime"]["route_source"] == "session_model_lock"
    assert reply["runtime"]["provider"] == "beta" and reply["runtime"]["model"] == "beta-large"
    assert stack.beta.chat_requests[-1].body["model"] == "beta-large"
    assert stack.beta.chat_requests[-1].authorization == f"Bearer {BETA_KEY}"
    assert stack.alpha.chat_requests == []
    assert await keys_holding(stack.cluster.settings, ALPHA_KEY, BETA_KEY) == []


async def test_the_fallback_model_serves_a_free_turn_but_never_a_locked_one(stack: Stack) -> None:
    stack.alpha.expected_key = "sk-some-other-key-0123456789"  # alpha now rejects our key
    run_id = await start_run(stack, "hello there")
    seen = await events(stack, run_id)
    assert seen[-1]["event"] == "run.completed", seen[-1]
    assert seen[-1]["output"] == stack.beta.reply_for("hello there")
    assert [r.body["model"] for r in stack.beta.chat_requests] == ["beta-fallback"]

    reply = await locked_chat(stack, "locked-2", "alpha", "alpha-x", "hi")
    assert reply["message"]["content"].startswith("⚠️ Provider authentication failed:")
    assert len(stack.beta.chat_requests) == 1  # no fallback under the confirmed lock
