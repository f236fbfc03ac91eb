"""Steering a turn across OS processes (issue 31): the run starts on one API replica, a worker
process runs it, the steer arrives through another replica. With the real Hermes agent (the
``hermes`` backend against the fake LLM) the steer sent while the first tool call runs is in the
model's next request, shown as ``run.steered``, and survives a SIGKILL of the worker right after
it was applied: the resumed attempt's model requests carry it, once; a run's execution_policy
toolsets narrow what the model is offered; a run over its budget stops at its next step. Every
state a test acts in is one the turn cannot leave on its own: a tool waiting for a file, a held
model response."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from hermes_queue.agents.echo_tools import read_tool_log
from hermes_queue.client import HermesQueueClient
from hermes_queue.config import Settings
from tests.conftest import require_hermes
from tests.e2e.test_durable_steps_e2e import KEY, hermes_settings, recorded_steps
from tests.support.fake_llm import FakeLLM
from tests.support.llm_replies import tool_names
from tests.support.polling import eventually
from tests.support.processes import Cluster, starts_processes

# A kill test starts a worker (a hermes one's warm-up included) after another died: two
# starts, one after the other.
pytestmark = starts_processes(2)

STEER = "answer in one short sentence"


def times_seen(body: Any) -> int:
    return sum(str(message.get("content")).count(STEER) for message in body["messages"])


async def events(client: HermesQueueClient, run_id: str) -> list[dict[str, Any]]:
    return [payload async for _, payload in client.iter_events(run_id)]


def started(cluster: Cluster, run_id: str, call_id: str) -> Any:
    async def steps() -> list[dict[str, Any]]:
        return recorded_steps(cluster, run_id)

    def running(found: list[dict[str, Any]]) -> bool:
        return any(s["kind"] == "tool_started" and s["call_id"] == call_id for s in found)

    return eventually(steps, running, within=30, what=f"{call_id} running")


@pytest.fixture
async def holding_fake() -> Any:
    """The fake LLM, holding the first model request that carries the steer."""
    async with FakeLLM(expected_key=KEY, hold=lambda body: times_seen(body) > 0) as server:
        yield server


async def test_a_steer_through_another_replica_survives_the_sigkill_of_its_worker(
    settings: Settings,
    holding_fake: FakeLLM,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    client_for: Any,
) -> None:
    require_hermes()
    monkeypatch.setenv("HQ_DURABLE_KEY", KEY)
    fake, gate = holding_fake, tmp_path / "gate"
    # Each terminal call waits for the gate file: the first one runs until the test opens it.
    turn = f"work twice [calls:2] [terminal:until test -e {gate}; do sleep 0.05; done]"
    cluster = Cluster(hermes_settings(settings, fake, tmp_path / "hermes"))
    try:
        first, second, doomed = await asyncio.gather(
            cluster.start_api(), cluster.start_api(), cluster.start_worker()
        )
        async with client_for(first) as starter, client_for(second) as other:
            run_id = await starter.create_run(turn)
            await started(cluster, run_id, "call_fake_1")
            assert await other.steer_run(run_id, STEER) == {
                "object": "hermes.run.steer",
                "run_id": run_id,
                "accepted": True,
            }
            gate.touch()
            # The model's next request carries the steer; held there, the worker is killed.
            await asyncio.wait_for(fake.held.wait(), 30)
            before_kill = list(fake.chat_requests)
            doomed.kill()
            await cluster.start_worker()
            seen = await events(other, run_id)
            status = await other.get_run(run_id)
            after_kill = fake.chat_requests[len(before_kill) :]
            # A run's toolsets only narrow the deployment's ("terminal" here): "web" is not
            # offered, and neither is "terminal", which the policy leaves out.
            narrowed = await starter.create_run(
                "no tools for you", execution_policy={"toolsets": ["web"]}
            )
            await eventually(lambda: other.get_run(narrowed), lambda r: r["status"] == "completed")
            offered = tool_names(fake.last_request.body)
    finally:
        cluster.stop_all()
    assert [times_seen(r.body) for r in before_kill] == [0, 1]  # next request after the tool
    assert after_kill and [times_seen(r.body) for r in after_kill] == [1] * len(after_kill)
    assert status["status"] == "completed" and status["attempt"] == 2
    assert "pending_steer" not in status
    names = [e["event"] for e in seen]
    assert names.count("run.steered") == 1 and "run.resumed" in names
    assert names.index("run.steered") < names.index("run.resumed")
    assert "terminal" in tool_names(before_kill[0].body) and offered == []


async def test_a_run_over_its_budget_stops_at_its_next_step(
    cluster: Cluster, client_for: Any, tmp_path: Path
) -> None:
    """A 10-s turn (ten one-second tools) with run_budget_seconds 2 ends at the first step
    boundary past 2 s: failed, run_budget_exceeded, the tools after it never run, the steps
    before it kept."""
    log = tmp_path / "tools.jsonl"
    cluster.settings = cluster.settings.replace(echo_tool_log=str(log))
    turn = " ".join(f"[tool:t{n}]" for n in range(1, 11)) + " [slowtool:1]"
    url = await cluster.start_api()
    await cluster.start_worker()
    async with client_for(url) as client:
        run_id = await client.create_run(turn, execution_policy={"run_budget_seconds": 2})
        seen = await events(client, run_id)
        status = await client.get_run(run_id)
    assert status["status"] == "failed" and status["reason"] == "run_budget_exceeded"
    assert seen[-1]["event"] == "run.failed" and seen[-1]["reason"] == "run_budget_exceeded"
    lines = [line for line in read_tool_log(log) if line["run_id"] == run_id]
    ran = [line["call_id"] for line in lines if line["phase"] == "start"]
    # Each tool takes a second, so the step after the second one is past the budget (counted
    # from the run's claim): no third tool starts. (A slow start may end it after the first.)
    assert ran in (["call_1"], ["call_1", "call_2"])
    steps = recorded_steps(cluster, run_id)
    results = [s["call_id"] for s in steps if s["kind"] == "tool"]
    assert results and results == sorted(results)  # the finished steps stay recorded
    assert results == ran  # each tool that ran finished, and its result is kept
