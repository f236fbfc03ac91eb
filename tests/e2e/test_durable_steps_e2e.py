"""Durable steps across OS processes (issue 23): a worker SIGKILLed mid-turn, after its second
tool result, leaves a run the next worker resumes, not restarts: every tool with a side effect
runs exactly once, no finished model call is sent again, and the stored transcript is the one
an uninterrupted turn leaves. A worker told to stop (SIGTERM) hands its turn over at the next
step boundary. The echo backend counts its tool executions in a shared log; the hermes backend's
``terminal`` tool appends a line to a file."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from hermes_queue.agents.echo_tools import read_tool_log
from hermes_queue.agents.steps import LOST_TOOL_RESULT
from hermes_queue.client import HermesQueueClient
from hermes_queue.config import Settings
from hermes_queue.providers import ProviderSettings
from tests.conftest import require_hermes
from tests.support.fake_llm import FakeLLM
from tests.support.polling import eventually
from tests.support.processes import Cluster, Proc, starts_processes

# A kill test starts a worker (a hermes one's warm-up included) after another died: two
# starts, one after the other.
pytestmark = starts_processes(2)

KEY = "sk-durable-0123456789abcdef"
ECHO_TURN = "count [tool:alpha] [tool:beta] [tool:gamma] [slowtool:0.5]"


def recorded_steps(cluster: Cluster, run_id: str) -> list[dict[str, Any]]:
    with cluster.redis() as r:
        return [json.loads(raw)["step"] for raw in r.lrange(cluster.keys.steps(run_id), 0, -1)]


def has_result(call_id: str) -> Any:
    def check(steps: list[dict[str, Any]]) -> bool:
        return any(s["kind"] == "tool" and s["call_id"] == call_id for s in steps)

    return check


async def steps_of(cluster: Cluster, run_id: str) -> list[dict[str, Any]]:
    return recorded_steps(cluster, run_id)


def shape(messages: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """Roles and tool calls of a transcript (what the issue compares; timestamps differ)."""
    return [(m["role"], [c["id"] for c in m.get("tool_calls") or []]) for m in messages]


async def transcript(client: HermesQueueClient, session_id: str) -> list[dict[str, Any]]:
    page = await client._json("GET", f"/api/sessions/{session_id}/messages?order=oldest")
    return list(page["data"])


async def events(client: HermesQueueClient, run_id: str) -> list[dict[str, Any]]:
    return [payload async for _, payload in client.iter_events(run_id)]


async def test_echo_turn_resumes_after_a_sigkill_and_runs_no_tool_twice(
    cluster: Cluster, client_for: Any, tmp_path: Path
) -> None:
    log = tmp_path / "tools.jsonl"
    cluster.settings = cluster.settings.replace(echo_tool_log=str(log), max_attempts=2)
    url = await cluster.start_api()
    doomed = await cluster.start_worker()
    async with client_for(url) as client:
        reference = await client.create_run(ECHO_TURN)
        await eventually(lambda: client.get_run(reference), lambda r: r["status"] == "completed")
        run_id = await client.create_run(ECHO_TURN)
        await eventually(lambda: steps_of(cluster, run_id), has_result("call_2"), what="beta")
        doomed.kill()
        await cluster.start_worker()
        seen = await events(client, run_id)
        status = await client.get_run(run_id)
        stored, expected = await transcript(client, run_id), await transcript(client, reference)
    assert status["status"] == "completed" and status["attempt"] == 2
    names = [e["event"] for e in seen]
    assert "run.resumed" in names and "run.restarted" not in names
    lines = [line for line in read_tool_log(log) if line["run_id"] == run_id]
    ran = sorted(line["call_id"] for line in lines if line["phase"] == "start")
    assert ran == ["call_1", "call_2", "call_3"]  # each tool ran once
    models = sorted(line["call_id"] for line in lines if line["phase"] == "model")
    # Each recorded model call was made once; only one in flight at the kill may have been
    # made twice (the call after beta's result, or the last one, after gamma).
    assert models in (
        ["model_0", "model_1", "model_2", "model_3"],
        ["model_0", "model_1", "model_2", "model_2", "model_3"],
        ["model_0", "model_1", "model_2", "model_3", "model_3"],
    )
    assert shape(stored) == shape(expected)
    # alpha and beta finished before the kill; gamma may have been running when it landed
    # (then the model is told its effect is unknown, and it is not run again).
    results = [m["content"] for m in stored if m["role"] == "tool"]
    assert results[:2] == ["ok", "ok"] and results[2] in ("ok", LOST_TOOL_RESULT)


@pytest.fixture
async def fake() -> Any:
    async with FakeLLM(expected_key=KEY, token_delay=0.05) as server:
        yield server


def hermes_settings(settings: Settings, fake: FakeLLM, home: Path) -> Settings:
    return settings.replace(
        agent_backend="hermes",
        providers={"fake": ProviderSettings("fake", fake.base_url, api_key_env="HQ_DURABLE_KEY")},
        default_provider="fake",
        default_model="fake-model",
        hermes_home=str(home),
        hermes_toolsets=("terminal",),
        hermes_max_iterations=8,
        max_attempts=2,
    ).validate()


async def test_hermes_turn_resumes_after_a_sigkill_after_its_second_tool_result(
    settings: Settings,
    fake: FakeLLM,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    client_for: Any,
) -> None:
    """A fake LLM that calls ``terminal`` three times across four model calls; the worker is
    SIGKILLed once the second result is recorded."""
    require_hermes()
    monkeypatch.setenv("HQ_DURABLE_KEY", KEY)
    counter = tmp_path / "counter"
    turn = f"count three times [calls:3] [terminal:echo x >> {counter}]"
    cluster = Cluster(hermes_settings(settings, fake, tmp_path / "hermes"))
    try:
        url = await cluster.start_api()
        doomed = await cluster.start_worker()
        async with client_for(url) as client:
            reference = await client.create_run(turn)
            await eventually(
                lambda: client.get_run(reference), lambda r: r["status"] == "completed"
            )
            uninterrupted_calls = len(fake.chat_requests)
            counter.unlink()
            run_id = await client.create_run(turn)
            await eventually(
                lambda: steps_of(cluster, run_id), has_result("call_fake_2"), what="result 2"
            )
            doomed.kill()
            await cluster.start_worker()
            seen = await events(client, run_id)
            status = await client.get_run(run_id)
            stored, expected = await transcript(client, run_id), await transcript(client, reference)
    finally:
        cluster.stop_all()
    assert status["status"] == "completed" and status["attempt"] == 2
    assert "run.resumed" in [e["event"] for e in seen]
    assert counter.read_text().count("x") == 3  # each terminal call ran exactly once
    sent = len(fake.chat_requests) - uninterrupted_calls
    assert uninterrupted_calls <= sent <= uninterrupted_calls + 1  # only the one in flight
    assert shape(stored) == shape(expected)


async def test_sigterm_hands_the_turn_over_at_the_next_step(
    cluster: Cluster, client_for: Any, tmp_path: Path
) -> None:
    """A drain lasts one step, not one turn: the stopping worker (given a minute to drain)
    records the tool call it is in, hands the run back and exits; the worker started after it
    has gone runs the next steps, and no tool runs twice."""
    log = tmp_path / "tools.jsonl"
    turn = "drain [tool:alpha] [tool:beta] [tool:gamma] [slowtool:2]"
    cluster.settings = cluster.settings.replace(echo_tool_log=str(log), drain_seconds=60.0)
    url = await cluster.start_api()
    stopping = await cluster.start_worker()
    async with client_for(url) as client:
        run_id = await client.create_run(turn)
        first = ("call_1", pid_of(stopping))
        await eventually(lambda: starts(log), lambda s: first in s, what="alpha running")
        stopping.process.send_signal(signal.SIGTERM)
        stopping.process.wait(30)
        successor = await cluster.start_worker()
        seen = await events(client, run_id)
    assert seen[-1]["event"] == "run.completed"
    assert "run.resumed" in [e["event"] for e in seen]
    assert await starts(log) == [
        first,
        ("call_2", pid_of(successor)),
        ("call_3", pid_of(successor)),
    ]


def pid_of(proc: Proc) -> int:
    return proc.process.pid


async def starts(log: Path) -> list[tuple[str, int]]:
    return [
        (line["call_id"], line["pid"]) for line in read_tool_log(log) if line["phase"] == "start"
    ]
