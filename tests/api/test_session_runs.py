"""``GET /api/sessions/{id}/runs``: a session's active turn, then the turns queued behind it."""

from __future__ import annotations

from typing import Any

import jsonschema
from aiohttp.test_utils import TestClient

from hermes_queue.client import iter_sse


async def frames(response: Any, stop_after: int | None = None) -> list[Any]:
    got = []
    async for frame in iter_sse(response):
        if frame.data:
            got.append(frame)
        if stop_after is not None and len(got) >= stop_after:
            break
    return got


async def runs_of(api: TestClient, session_id: str) -> dict[str, Any]:
    response = await api.get(f"/api/sessions/{session_id}/runs")
    assert response.status == 200, await response.text()
    return dict(await response.json())


async def test_the_active_turn_comes_first_then_the_queued_ones_in_order(
    api: TestClient, worker: Any
) -> None:
    assert (await api.post("/api/sessions", json={"id": "runs-1"})).status == 201
    assert await runs_of(api, "runs-1") == {"object": "list", "session_id": "runs-1", "data": []}

    first = await api.post("/api/sessions/runs-1/chat/stream", json={"message": "one [slow]"})
    await frames(first, stop_after=2)  # it is running
    queued = [
        await api.post(
            "/api/sessions/runs-1/chat/stream",
            json={"message": word, "multitask_strategy": "enqueue"},
        )
        for word in ("two", "three")
    ]
    run_ids = [response.headers["X-Hermes-Run-Id"] for response in (first, *queued)]

    listed = await runs_of(api, "runs-1")
    assert listed["object"] == "list" and listed["session_id"] == "runs-1"
    assert [run["run_id"] for run in listed["data"]] == run_ids
    assert [run["status"] for run in listed["data"]] == ["running", "queued", "queued"]
    assert {run["object"] for run in listed["data"]} == {"hermes.run"}
    assert {run["session_id"] for run in listed["data"]} == {"runs-1"}
    doc = await (await api.get("/openapi.json")).json()
    schema = {"$ref": "#/components/schemas/SessionRunList", "components": doc["components"]}
    jsonschema.Draft202012Validator(schema).validate(listed)

    assert (await api.post(f"/v1/runs/{run_ids[0]}/stop")).status == 200
    for response in (first, *queued):
        assert (await frames(response))[-1].event == "done"
    assert (await runs_of(api, "runs-1"))["data"] == []


async def test_an_unknown_session_is_404(api: TestClient) -> None:
    response = await api.get("/api/sessions/nope/runs")
    assert response.status == 404
    assert (await response.json())["error"]["code"] == "session_not_found"
