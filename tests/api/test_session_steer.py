"""Steering from session chat (``api/hermes/session_steer.py``): ``multitask_strategy: "steer"``
hands the message to the session's running turn and follows that turn; a session with no
running turn starts one; ``take_pending_steer`` gives the next turn what a turn that ended first
left. In-process API and worker on a real Redis; the echo backend's ``[gate:PATH]`` holds a turn
in a known state and its reply shows every steer it applied."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient

from hermes_queue.client import iter_sse
from tests.support.polling import eventually


async def new_session(api: TestClient, session_id: str) -> str:
    assert (await api.post("/api/sessions", json={"id": session_id})).status == 201
    return session_id


async def status_of(api: TestClient, run_id: str) -> dict[str, Any]:
    return dict(await (await api.get(f"/v1/runs/{run_id}")).json())


async def running_turn(api: TestClient, sid: str, text: str) -> tuple[str, Any]:
    """Start a streamed turn; its run id and the stream (read to its end by the caller)."""
    response = await api.post(f"/api/sessions/{sid}/chat/stream", json={"message": text})
    assert response.status == 200
    run_id = response.headers["X-Hermes-Run-Id"]

    def tool_running(status: dict[str, Any]) -> bool:
        return status["last_event"] in ("tool.started", "message.delta", "message.started")

    await eventually(lambda: status_of(api, run_id), tool_running, what="turn running")
    return run_id, response


async def frames(response: Any) -> list[tuple[str, dict[str, Any]]]:
    return [(frame.event or "", frame.json()) async for frame in iter_sse(response) if frame.data]


async def test_a_chat_message_steers_the_running_turn_and_answers_with_its_reply(
    api: TestClient, worker: Any, tmp_path: Path
) -> None:
    sid, gate = await new_session(api, "steered"), tmp_path / "gate"
    run_id, first = await running_turn(api, sid, f"look it up [tool:alpha] [gate:{gate}]")
    body = {"message": "be brief", "multitask_strategy": "steer"}
    asked = asyncio.ensure_future(api.post(f"/api/sessions/{sid}/chat", json=body))
    await eventually(
        lambda: status_of(api, run_id), lambda s: s["last_event"] == "run.steered", what="steer"
    )
    gate.touch()
    answered = await asked
    assert answered.status == 200
    assert answered.headers["X-Hermes-Run-Id"] == run_id  # no turn of its own
    reply = await answered.json()
    assert reply["message"]["content"] == "Echo: look it up (steered: be brief)"
    shown = await frames(first)  # the turn's own stream shows the steer too
    steered = [data for name, data in shown if name == "run.steered"]
    assert [(s["text"], s["accepted"]) for s in steered] == [("be brief", True)]
    runs = await (await api.get(f"/api/sessions/{sid}/runs")).json()
    assert runs["data"] == []  # nothing was queued behind it


async def test_a_streamed_steer_follows_the_turn_from_its_steer(
    api: TestClient, worker: Any, tmp_path: Path
) -> None:
    sid, gate = await new_session(api, "streamed"), tmp_path / "gate"
    run_id, first = await running_turn(api, sid, f"look [tool:alpha] [gate:{gate}]")
    response = await api.post(
        f"/api/sessions/{sid}/chat/stream",
        json={"message": "be brief", "multitask_strategy": "steer"},
    )
    assert response.status == 200 and response.headers["X-Hermes-Run-Id"] == run_id
    gate.touch()
    followed, whole = await frames(response), await frames(first)
    assert followed[0][0] == "run.steered" and followed[-1][0] == "done"
    # Numbered as the turn's own stream numbers them: the tail of the first connection's.
    assert [data["seq"] for _, data in followed] == [data["seq"] for _, data in whole][
        -len(followed) :
    ]
    completed = [data for name, data in followed if name == "assistant.completed"]
    assert completed[0]["content"] == "Echo: look (steered: be brief)"


async def test_steer_on_an_idle_session_starts_a_turn(api: TestClient, worker: Any) -> None:
    sid = await new_session(api, "idle")
    response = await api.post(
        f"/api/sessions/{sid}/chat", json={"message": "hello", "multitask_strategy": "steer"}
    )
    assert response.status == 200
    assert (await response.json())["message"]["content"] == "Echo: hello"


async def test_a_turn_takes_what_a_turn_that_ended_first_left(
    api: TestClient, worker: Any, tmp_path: Path
) -> None:
    sid, gate = await new_session(api, "leftover"), tmp_path / "gate"
    run_id, first = await running_turn(api, sid, f"just talk [gate:{gate}]")
    steered = await api.post(f"/v1/runs/{run_id}/steer", json={"input": "too late"})
    assert steered.status == 200
    gate.touch()
    closing = [data for name, data in await frames(first) if name == "run.completed"]
    assert closing[0]["pending_steer"] == "too late"

    body = {"message": "and more", "take_pending_steer": run_id}
    taken = await api.post(f"/api/sessions/{sid}/chat", json=body)
    assert taken.status == 200
    assert (await taken.json())["message"]["content"] == "Echo: too late and more (turn 2)"
    # Taken once.
    again = await api.post(f"/api/sessions/{sid}/chat", json=body)
    error = (await again.json())["error"]
    assert (again.status, error["code"]) == (409, "pending_steer_unavailable")
    # Only by a turn of its own session.
    other = await new_session(api, "other")
    foreign = await api.post(f"/api/sessions/{other}/chat", json=body)
    assert (foreign.status, (await foreign.json())["error"]["code"]) == (404, "run_not_found")
