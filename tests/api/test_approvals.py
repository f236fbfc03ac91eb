"""``POST /v1/runs/{run_id}/approval`` with in-process API replicas and a worker on a real Redis.

The echo backend's ``[approve]`` marker asks for approval mid-reply and ends its reply with the
decision, so each test can check the whole loop: request event, status, answer, resumed turn.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp.test_utils import TestClient

from hermes_queue.client import iter_sse
from hermes_queue.config import Settings
from hermes_queue.runs.repository import RunRepository
from tests.support.inprocess import running_api, running_worker
from tests.support.polling import eventually


async def start(api: TestClient, text: str = "hello there [approve]") -> str:
    response = await api.post("/v1/runs", json={"input": text})
    assert response.status == 202
    return str((await response.json())["run_id"])


async def wait_status(api: TestClient, run_id: str, *statuses: str) -> dict[str, Any]:
    async def status() -> dict[str, Any]:
        return dict(await (await api.get(f"/v1/runs/{run_id}")).json())

    return await eventually(status, lambda b: b["status"] in statuses, within=10, what=run_id)


async def events(api: TestClient, run_id: str) -> list[dict[str, Any]]:
    response = await api.get(f"/v1/runs/{run_id}/events")
    frames = [f.json() async for f in iter_sse(response) if f.data]
    return frames


async def answer(api: TestClient, run_id: str, **body: Any) -> tuple[int, dict[str, Any]]:
    response = await api.post(f"/v1/runs/{run_id}/approval", json=body)
    return response.status, await response.json()


async def test_approve_once_resumes_the_run(api: TestClient, worker: Any) -> None:
    run_id = await start(api)
    waiting = await wait_status(api, run_id, "waiting_for_approval")
    assert waiting["last_event"] == "approval.request"
    assert waiting["approval"]["command"] == "echo 'hello there'"  # VN's pending request

    status, body = await answer(api, run_id, choice="approve")
    assert status == 200
    assert body == {
        "object": "hermes.run.approval_response",
        "run_id": run_id,
        "choice": "once",
        "resolved": 1,
    }
    done = await wait_status(api, run_id, "completed")
    assert done["output"] == "Echo: hello there (command approved: once)"

    frames = await events(api, run_id)
    names = [f["event"] for f in frames]
    assert names.index("approval.request") < names.index("approval.responded")
    assert names[-1] == "run.completed"
    asked = frames[names.index("approval.request")]
    assert asked["command"] == "echo 'hello there'"
    assert asked["choices"] == ["once", "session", "always", "deny"]
    assert asked["allow_permanent"] is True and asked["pattern_keys"] == ["echo"]
    responded = frames[names.index("approval.responded")]
    assert responded["choice"] == "once" and responded["resolved"] == 1
    assert responded["request_id"] == asked["request_id"] == waiting["approval"]["request_id"]
    assert "approval" not in done


async def test_deny_is_reported_and_the_turn_continues(api: TestClient, worker: Any) -> None:
    run_id = await start(api)
    await wait_status(api, run_id, "waiting_for_approval")
    assert (await answer(api, run_id, choice="DENY"))[1]["choice"] == "deny"
    done = await wait_status(api, run_id, "completed")
    assert done["output"] == "Echo: hello there (command denied)"


async def test_error_codes(api: TestClient, worker: Any, settings: Settings) -> None:
    status, body = await answer(api, "run_nope", choice="once")
    assert status == 404 and body["error"]["code"] == "run_not_found"

    plain = await start(api, "no approval here")
    await wait_status(api, plain, "completed")
    status, body = await answer(api, plain, choice="once")
    assert status == 409 and body["error"]["code"] == "approval_not_active"

    run_id = await start(api)
    await wait_status(api, run_id, "waiting_for_approval")
    for bad in ("", "maybe", None, 3):
        status, body = await answer(api, run_id, choice=bad)
        assert status == 400 and body["error"]["code"] == "invalid_approval_choice"
    status, body = await answer(api, run_id, choice="once", request_id="apr_unknown")
    assert status == 409 and body["error"]["code"] == "approval_not_pending"
    status, body = await answer(api, run_id, choice="once", request_id=7)
    assert status == 400 and body["error"]["code"] == "invalid_approval_request"
    response = await api.post(f"/v1/runs/{run_id}/approval", data=b"not json")
    assert response.status == 400
    # None of that answered it; a named request_id does.
    request_id = (await events_until_request(api, run_id))["request_id"]
    status, body = await answer(api, run_id, choice="session", request_id=request_id)
    assert status == 200 and body["request_id"] == request_id and body["resolved"] == 1
    await wait_status(api, run_id, "completed")


async def events_until_request(api: TestClient, run_id: str) -> dict[str, Any]:
    response = await api.get(f"/v1/runs/{run_id}/events")
    async for frame in iter_sse(response):
        if frame.data and frame.json()["event"] == "approval.request":
            response.close()
            return dict(frame.json())
    raise AssertionError("no approval.request")


async def test_all_and_resolve_all_answer_every_pending_request_of_that_run_only(
    api: TestClient, redis: Any, settings: Settings
) -> None:
    # No worker: the test plays the worker, asking several approvals on two runs at once.
    repo = RunRepository(redis, settings.redis.keys, settings.runs)
    runs = [await start(api, f"run {n}") for n in range(2)]
    for run_id in runs:
        attempt = await repo.claim(run_id, "w")
        assert attempt is not None
        for n in range(3):
            await attempt.request_approval(f"apr_{n}", {"n": n})
    first, second = runs

    status, body = await answer(api, first, choice="once", all="false")  # a string false
    assert status == 200 and body["resolved"] == 1
    status, body = await answer(api, first, choice="always", resolve_all="yes")
    assert status == 200 and body["resolved"] == 2
    assert (await wait_status(api, first, "running"))["last_event"] == "approval.responded"
    assert (await answer(api, first, choice="once"))[0] == 409

    second_status = await (await api.get(f"/v1/runs/{second}")).json()
    assert second_status["status"] == "waiting_for_approval"
    status, body = await answer(api, second, choice="deny", all=True)
    assert status == 200 and body["resolved"] == 3


async def test_unanswered_request_is_denied_after_the_timeout(settings: Settings) -> None:
    quick = settings.replace(approval_timeout_seconds=0.5)
    async with running_api(quick) as api, running_worker(quick):
        run_id = await start(api)
        done = await wait_status(api, run_id, "completed")
        frames = await events(api, run_id)
    assert done["output"] == "Echo: hello there (command denied)"
    responded = next(f for f in frames if f["event"] == "approval.responded")
    assert responded["choice"] == "deny" and responded["timed_out"] is True


async def test_stop_while_waiting_cancels_the_run(api: TestClient, worker: Any) -> None:
    run_id = await start(api)
    await wait_status(api, run_id, "waiting_for_approval")
    response = await api.post(f"/v1/runs/{run_id}/stop")
    assert (await response.json())["status"] == "stopping"
    assert (await answer(api, run_id, choice="once"))[0] == 409
    await wait_status(api, run_id, "cancelled")
    assert (await events(api, run_id))[-1]["event"] == "run.cancelled"


async def test_answer_through_another_replica_reaches_the_worker(settings: Settings) -> None:
    # A 30 s heartbeat: the worker's poll cannot be what resumes the run within the test, so the
    # pub/sub message from the second replica must (the lease is long enough not to lapse).
    slow_poll = settings.replace(heartbeat_seconds=30.0, lease_seconds=90.0)
    async with (
        running_api(slow_poll) as first,
        running_api(slow_poll) as second,
        running_worker(slow_poll),
    ):
        run_id = await start(first)
        await wait_status(first, run_id, "waiting_for_approval")
        status, body = await answer(second, run_id, choice="session")
        assert status == 200 and body["resolved"] == 1
        done = await asyncio.wait_for(wait_status(first, run_id, "completed"), 5)
    assert done["output"] == "Echo: hello there (command approved: session)"


async def test_capabilities_advertise_approvals(api: TestClient) -> None:
    features = (await (await api.get("/v1/capabilities")).json())["features"]
    assert features["run_approval_response"] is True
    assert features["approval_events"] is True
