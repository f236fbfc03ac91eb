"""``POST /v1/runs/{run_id}/steer`` with in-process API replicas and a worker on a real Redis.

The echo backend's ``[gate:PATH]`` marker holds a turn (at its tool call, or mid-reply without
one) until the file exists, so each test steers a turn in a known state; the echo reply shows
every steer it applied as ``(steered: <text>)``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient

from hermes_queue.client import iter_sse
from hermes_queue.config import Settings
from hermes_queue.runs.steers import MAX_PENDING_STEERS
from tests.support.inprocess import running_api
from tests.support.polling import eventually


async def start(api: TestClient, text: str, **fields: Any) -> str:
    response = await api.post("/v1/runs", json={"input": text, **fields})
    assert response.status == 202, await response.text()
    return str((await response.json())["run_id"])


async def status_of(api: TestClient, run_id: str) -> dict[str, Any]:
    return dict(await (await api.get(f"/v1/runs/{run_id}")).json())


async def wait_for(api: TestClient, run_id: str, check: Any, what: str) -> dict[str, Any]:
    return await eventually(lambda: status_of(api, run_id), check, within=15, what=what)


async def steer(api: TestClient, run_id: str, body: Any) -> tuple[int, dict[str, Any]]:
    data = body if isinstance(body, str) else json.dumps(body)
    response = await api.post(
        f"/v1/runs/{run_id}/steer", data=data, headers={"Content-Type": "application/json"}
    )
    return response.status, await response.json()


async def events(api: TestClient, run_id: str) -> list[dict[str, Any]]:
    response = await api.get(f"/v1/runs/{run_id}/events")
    return [frame.json() async for frame in iter_sse(response) if frame.data]


def tool_running(status: dict[str, Any]) -> bool:
    return status["status"] == "running" and status["last_event"] == "tool.started"


async def test_a_steer_lands_at_the_next_tool_result_and_in_the_reply(
    api: TestClient, worker: Any, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    run_id = await start(api, f"look it up [tool:alpha] [gate:{gate}]")
    await wait_for(api, run_id, tool_running, "the tool running")

    code, body = await steer(api, run_id, {"input": "be brief"})
    assert (code, body) == (200, {"object": "hermes.run.steer", "run_id": run_id, "accepted": True})
    gate.touch()
    done = await wait_for(api, run_id, lambda s: s["status"] == "completed", "completed")

    assert done["output"] == "Echo: look it up (steered: be brief)"
    assert "pending_steer" not in done  # it was applied
    frames = await events(api, run_id)
    names = [frame["event"] for frame in frames]
    assert names.index("tool.started") < names.index("run.steered") < names.index("tool.completed")
    steered = frames[names.index("run.steered")]
    assert set(steered) == {"event", "run_id", "timestamp", "accepted"}  # upstream's fields
    assert steered["accepted"] is True
    assert "pending_steer" not in frames[-1]


async def test_steers_arriving_together_land_together(
    api: TestClient, worker: Any, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    run_id = await start(api, f"go [tool:alpha] [tool:beta] [gate:{gate}]")
    await wait_for(api, run_id, tool_running, "the first tool running")
    assert (await steer(api, run_id, {"message": "first"}))[0] == 200
    # Content parts are taken as their text.
    parts = [{"type": "text", "text": "second"}]
    assert (await steer(api, run_id, {"text": parts}))[0] == 200
    gate.touch()
    done = await wait_for(api, run_id, lambda s: s["status"] == "completed", "completed")
    assert done["output"] == "Echo: go (steered: first) (steered: second)"


async def test_a_steer_no_tool_result_took_is_the_runs_pending_steer(
    api: TestClient, worker: Any, tmp_path: Path
) -> None:
    """Upstream's pending_steer: the turn ended (no tool result left to carry the steer)."""
    gate = tmp_path / "gate"
    run_id = await start(api, f"just talk [gate:{gate}]")
    await wait_for(api, run_id, lambda s: s["status"] == "running", "running")
    assert (await steer(api, run_id, {"input": "too late"}))[0] == 200
    assert (await steer(api, run_id, {"input": "also late"}))[0] == 200
    gate.touch()
    done = await wait_for(api, run_id, lambda s: s["status"] == "completed", "completed")

    assert done["output"] == "Echo: just talk"
    assert done["pending_steer"] == "too late\nalso late"
    terminal = (await events(api, run_id))[-1]
    assert terminal["event"] == "run.completed"
    assert terminal["pending_steer"] == "too late\nalso late"


async def test_only_a_running_run_takes_a_steer(settings: Settings, tmp_path: Path) -> None:
    """404 for an unknown run; 409 run_not_accepting_steer while it is queued (no worker yet)
    and once it ended, checked before the body (as upstream)."""
    async with running_api(settings) as api:
        code, body = await steer(api, "run_nope", {"input": "x"})
        assert (code, body["error"]["code"]) == (404, "run_not_found")

        queued = await start(api, "waiting in the queue")
        for sent in ({"input": "x"}, {"input": ""}, "not json"):
            code, body = await steer(api, queued, sent)
            assert (code, body["error"]["code"]) == (409, "run_not_accepting_steer")
            assert body["error"]["message"] == (
                f"Run is not currently accepting steer input: {queued}"
            )
        assert "pending_steer" not in await status_of(api, queued)


async def test_a_finished_run_takes_no_steer(api: TestClient, worker: Any) -> None:
    run_id = await start(api, "quick")
    await wait_for(api, run_id, lambda s: s["status"] == "completed", "completed")
    code, body = await steer(api, run_id, {"input": "x"})
    assert (code, body["error"]["code"]) == (409, "run_not_accepting_steer")


async def test_empty_steer_text_is_refused(api: TestClient, worker: Any, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    run_id = await start(api, f"hold [tool:alpha] [gate:{gate}]")
    await wait_for(api, run_id, tool_running, "the tool running")
    for sent in (
        {},
        {"input": ""},
        {"input": "   "},
        {"message": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]},
        {"text": None},
    ):
        code, body = await steer(api, run_id, sent)
        assert (code, body["error"]["code"]) == (400, "invalid_steer_input"), sent
        assert body["error"]["message"] == (
            "Missing non-empty steer text; expected 'input', 'message', or 'text'."
        )
    code, body = await steer(api, run_id, "{not json")
    assert (code, body["error"]["code"]) == (400, "invalid_json")
    # Nothing refused reached the run.
    gate.touch()
    done = await wait_for(api, run_id, lambda s: s["status"] == "completed", "completed")
    assert done["output"] == "Echo: hold"
    assert "run.steered" not in [frame["event"] for frame in await events(api, run_id)]


async def test_a_run_holds_a_bounded_number_of_pending_steers(
    api: TestClient, worker: Any, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    run_id = await start(api, f"hold [gate:{gate}]")
    await wait_for(api, run_id, lambda s: s["status"] == "running", "running")
    for number in range(MAX_PENDING_STEERS):
        assert (await steer(api, run_id, {"input": f"s{number}"}))[0] == 200
    code, body = await steer(api, run_id, {"input": "one too many"})
    assert (code, body["error"]["code"]) == (409, "steer_not_accepted")
    gate.touch()
    done = await wait_for(api, run_id, lambda s: s["status"] == "completed", "completed")
    assert done["pending_steer"].split("\n") == [f"s{n}" for n in range(MAX_PENDING_STEERS)]
