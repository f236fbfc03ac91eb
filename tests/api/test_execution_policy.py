"""``execution_policy`` on the bodies that start a turn (``POST /v1/runs``, session chat), with
in-process API replicas and a worker on a real Redis: refused as upstream refuses it, carried to
the worker in the run's request, and enforced there (``max_turns`` by the backend, the run budget
at step boundaries, from the run's first claim). The budget across processes, and toolsets on the
real agent: tests/e2e/test_steer_e2e.py, tests/agents/test_hermes_limits.py."""

from __future__ import annotations

import time
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from hermes_queue.config import Settings
from hermes_queue.runs.repository import RunRepository
from hermes_queue.runs.turn_request import ExecutionPolicy
from tests.support.inprocess import running_api, running_worker
from tests.support.polling import eventually

REFUSED = [
    ({"model": "x"}, "Unsupported execution_policy fields"),
    ({"max_turns": 2, "owner": {"type": "a2a"}}, "Unsupported execution_policy fields"),
    ("fast", "Unsupported execution_policy fields"),
    ([], "Unsupported execution_policy fields"),
    ({"max_turns": True}, "Invalid execution_policy max_turns"),
    ({"max_turns": 0}, "Invalid execution_policy max_turns"),
    ({"max_turns": 10_001}, "Invalid execution_policy max_turns"),
    ({"max_turns": 2.0}, "Invalid execution_policy max_turns"),
    ({"run_budget_seconds": 10_801}, "Invalid execution_policy run_budget_seconds"),
    ({"run_budget_seconds": "60"}, "Invalid execution_policy run_budget_seconds"),
    ({"toolsets": "web"}, "Invalid execution_policy toolsets"),
    ({"toolsets": ["web", ""]}, "Invalid execution_policy toolsets"),
    ({"toolsets": ["x" * 129]}, "Invalid execution_policy toolsets"),
    ({"toolsets": ["t"] * 129}, "Invalid execution_policy toolsets"),
]


@pytest.mark.parametrize(("policy", "message"), REFUSED)
async def test_a_policy_that_would_widen_or_is_malformed_is_refused(
    api: TestClient, policy: Any, message: str
) -> None:
    for path, body in (
        ("/v1/runs", {"input": "hi"}),
        ("/api/sessions/s1/chat", {"message": "hi"}),
    ):
        if path.startswith("/api/"):
            assert (await api.post("/api/sessions", json={"id": "s1"})).status in (201, 409)
        response = await api.post(path, json={**body, "execution_policy": policy})
        error = (await response.json())["error"]
        assert response.status == 400, path
        assert (error["code"], error["message"], error["param"]) == (
            "invalid_execution_policy",
            message,
            "execution_policy",
        )


async def test_the_policy_travels_with_the_run(
    settings: Settings, redis: Any, api: TestClient
) -> None:
    policy = {"max_turns": 4, "run_budget_seconds": 30, "toolsets": ["web", "terminal", "web"]}
    response = await api.post("/v1/runs", json={"input": "hi", "execution_policy": policy})
    run_id = (await response.json())["run_id"]
    record = await RunRepository(redis, settings.redis.keys, settings.runs).get(run_id)
    assert record is not None
    assert record.request.policy == ExecutionPolicy(4, 30, ("web", "terminal"))
    # Null, or an empty object, sets nothing.
    for empty in (None, {}):
        response = await api.post("/v1/runs", json={"input": "hi", "execution_policy": empty})
        bare = await RunRepository(redis, settings.redis.keys, settings.runs).get(
            (await response.json())["run_id"]
        )
        assert bare is not None and bare.request.policy is None


async def test_max_turns_caps_the_model_calls(api: TestClient, worker: Any) -> None:
    response = await api.post(
        "/v1/runs",
        json={
            "input": "go [tool:alpha] [tool:beta] [tool:gamma]",
            "execution_policy": {"max_turns": 2},
        },
    )
    run_id = (await response.json())["run_id"]
    done = await eventually(
        lambda: _status(api, run_id), lambda s: s["status"] == "completed", what=run_id
    )
    # Two model calls: one asking for alpha, one answering; beta and gamma never called.
    assert done["output"] == "Echo: go (max_turns reached)"


async def test_the_queue_wait_is_not_counted_against_the_budget(settings: Settings) -> None:
    """A run that waited in the queue longer than its budget still gets all of it."""
    async with running_api(settings) as api:
        response = await api.post(
            "/v1/runs",
            json={
                "input": "go [tool:alpha] [tool:beta]",
                "execution_policy": {"run_budget_seconds": 1},
            },
        )
        run_id = (await response.json())["run_id"]
        created = (await _status(api, run_id))["created_at"]
        await eventually(time.time, lambda now: now > created + 1.5, what="the budget in the queue")
        async with running_worker(settings):
            done = await eventually(
                lambda: _status(api, run_id),
                lambda s: s["status"] in ("completed", "failed"),
                what=run_id,
            )
    assert done["status"] == "completed", done


async def _status(api: TestClient, run_id: str) -> dict[str, Any]:
    return dict(await (await api.get(f"/v1/runs/{run_id}")).json())
