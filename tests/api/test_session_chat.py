"""Session chat through the queue: turns run by a worker, persisted, streamed, resumable."""

from __future__ import annotations

import base64
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from aiohttp.test_utils import TestClient

from hermes_queue.client import SSEFrame, iter_sse
from hermes_queue.config import Settings
from hermes_queue.redisio.embedded import EmbeddedRedis
from tests.support.inprocess import running_api, running_worker
from tests.support.redis_stats import commands_for


async def new_session(api: TestClient, session_id: str = "chat-1") -> str:
    response = await api.post("/api/sessions", json={"id": session_id})
    assert response.status == 201
    return session_id


async def frames_of(response: Any, stop_after: int | None = None) -> list[SSEFrame]:
    got = []
    async for frame in iter_sse(response):
        if frame.data:
            got.append(frame)
        if stop_after is not None and len(got) >= stop_after:
            break
    return got


async def stream_turn(api: TestClient, session_id: str, **body: Any) -> tuple[Any, list[SSEFrame]]:
    response = await api.post(f"/api/sessions/{session_id}/chat/stream", json=body)
    assert response.status == 200, await response.text()
    return response, await frames_of(response)


async def test_chat_answers_and_persists_the_turn(
    session_api: TestClient, session_worker: Any
) -> None:
    sid = await new_session(session_api)
    response = await session_api.post(f"/api/sessions/{sid}/chat", json={"message": "hello"})
    assert response.status == 200
    body = await response.json()
    assert body["object"] == "hermes.session.chat.completion"
    assert body["session_id"] == sid
    assert body["message"] == {"role": "assistant", "content": "Echo: hello"}
    assert body["usage"]["output_tokens"] == 2
    assert response.headers["X-Hermes-Session-Id"] == sid
    run = await (await session_api.get(f"/v1/runs/{response.headers['X-Hermes-Run-Id']}")).json()
    assert run["status"] == "completed" and run["session_id"] == sid

    second = await (
        await session_api.post(f"/api/sessions/{sid}/chat", json={"message": "again"})
    ).json()
    assert second["message"]["content"] == "Echo: again (turn 2)"
    page = await (await session_api.get(f"/api/sessions/{sid}/messages")).json()
    assert [(m["role"], m["content"]) for m in page["data"]] == [
        ("user", "hello"),
        ("assistant", "Echo: hello"),
        ("user", "again"),
        ("assistant", "Echo: again (turn 2)"),
    ]
    session = (await (await session_api.get(f"/api/sessions/{sid}")).json())["session"]
    assert session["message_count"] == 4


async def test_stream_event_order_and_fields(session_api: TestClient, session_worker: Any) -> None:
    sid = await new_session(session_api)
    response, frames = await stream_turn(
        session_api, sid, message="look [think] [tool:search] it up"
    )
    assert response.headers["Content-Type"] == "text/event-stream"
    names = [f.event for f in frames]
    assert names[:3] == ["run.started", "message.started", "tool.progress"]
    assert names[-3:] == ["assistant.completed", "run.completed", "done"]
    assert names.index("tool.started") < names.index("tool.completed")
    payloads = [f.json() for f in frames]
    run_id = response.headers["X-Hermes-Run-Id"]
    for payload in payloads:
        assert payload["session_id"] == sid and payload["run_id"] == run_id
        assert isinstance(payload["ts"], float)
    # Upstream numbers every frame 1, 2, 3 …; every frame but the closing ``done`` has an id of
    # its own (one stored event per frame).
    assert [p["seq"] for p in payloads] == list(range(1, len(frames) + 1))
    ids = [f.id for f in frames[:-1]]
    assert all(ids) and len(set(ids)) == len(ids) and not frames[-1].id
    assert payloads[0]["user_message"] == {
        "role": "user",
        "content": "look [think] [tool:search] it up",
    }
    assert payloads[2]["tool_name"] == "_thinking"
    started = payloads[names.index("tool.started")]
    assert started["tool_name"] == "search" and started["preview"] and started["args"]
    completed = payloads[names.index("tool.completed")]
    assert completed["preview"] is None and completed["args"] is None
    text = "".join(
        p["delta"] for n, p in zip(names, payloads, strict=True) if n == "assistant.delta"
    )
    assert text == payloads[-3]["content"] == "Echo: look it up"
    transcript = payloads[-2]["messages"]
    assert [m["role"] for m in transcript] == ["assistant", "tool", "assistant"]


async def test_a_client_cut_off_between_any_two_frames_gets_exactly_the_rest(
    session_api: TestClient, session_worker: Any
) -> None:
    """Resuming after any frame's id sends the frames after it, numbered as the first time:
    the completion's frames included (``assistant.completed``, ``run.completed``, ``done``)."""
    sid = await new_session(session_api)
    response, frames = await stream_turn(session_api, sid, message="finish me [tool:t]")
    run_id = response.headers["X-Hermes-Run-Id"]
    assert [f.event for f in frames[-3:]] == ["assistant.completed", "run.completed", "done"]
    for cut, frame in enumerate(frames[:-1], start=1):
        again = await session_api.get(
            f"/api/sessions/{sid}/chat/stream",
            params={"run_id": run_id},
            headers={"Last-Event-ID": frame.id},
        )
        tail = await frames_of(again)
        assert [(f.event, f.id, f.data) for f in tail] == [
            (f.event, f.id, f.data) for f in frames[cut:]
        ], f"resumed after frame {cut} ({frame.event})"


async def test_failed_turn_streams_error_then_done(
    session_api: TestClient, session_worker: Any
) -> None:
    sid = await new_session(session_api)
    _, frames = await stream_turn(session_api, sid, message="boom [fail]")
    assert [f.event for f in frames][-2:] == ["error", "done"]
    assert "failure" in frames[-2].json()["message"]
    sync = await session_api.post(f"/api/sessions/{sid}/chat", json={"message": "boom [fail]"})
    assert sync.status == 500 and (await sync.json())["error"]["code"] == "agent_error"


async def test_resume_mid_turn_and_after_it_ended(
    session_api: TestClient, session_worker: Any
) -> None:
    sid = await new_session(session_api)
    response = await session_api.post(
        f"/api/sessions/{sid}/chat/stream", json={"message": "w " * 30 + "[slow:0.02]"}
    )
    run_id = response.headers["X-Hermes-Run-Id"]
    head = await frames_of(response, stop_after=4)
    response.close()  # the client drops mid-turn; the turn goes on
    active = await session_api.get(
        f"/api/sessions/{sid}/chat/stream", headers={"Last-Event-ID": head[-1].id}
    )
    tail = await frames_of(active)
    after = await session_api.get(f"/api/sessions/{sid}/chat/stream", params={"run_id": run_id})
    full = await frames_of(after)
    assert [f.id for f in head + tail] == [f.id for f in full]
    assert [f.data for f in head + tail] == [f.data for f in full]
    assert full[-1].event == "done"
    none_active = await session_api.get(f"/api/sessions/{sid}/chat/stream")
    assert none_active.status == 404
    assert (await none_active.json())["error"]["code"] == "no_active_run"


async def test_reject_enqueue_and_interrupt(session_api: TestClient, session_worker: Any) -> None:
    sid = await new_session(session_api)
    first = await session_api.post(
        f"/api/sessions/{sid}/chat/stream", json={"message": "one [slow:0.05]"}
    )
    first_run = first.headers["X-Hermes-Run-Id"]
    await frames_of(first, stop_after=2)  # it is running

    rejected = await session_api.post(f"/api/sessions/{sid}/chat", json={"message": "two"})
    assert rejected.status == 409
    error = (await rejected.json())["error"]
    assert error["code"] == "run_already_active" and error["run_id"] == first_run
    busy_delete = await session_api.delete(f"/api/sessions/{sid}")
    assert busy_delete.status == 409
    assert (await busy_delete.json())["error"]["code"] == "session_active_turn"

    queued = await session_api.post(
        f"/api/sessions/{sid}/chat/stream",
        json={"message": "three", "multitask_strategy": "enqueue"},
    )
    queued_run = queued.headers["X-Hermes-Run-Id"]
    assert (await (await session_api.get(f"/v1/runs/{queued_run}")).json())["status"] == "queued"
    interrupting = await session_api.post(
        f"/api/sessions/{sid}/chat", json={"message": "four", "multitask_strategy": "interrupt"}
    )
    assert (await interrupting.json())["message"]["content"].startswith("Echo: four")
    statuses = [
        (await (await session_api.get(f"/v1/runs/{run}")).json())["status"]
        for run in (first_run, queued_run)
    ]
    assert statuses == ["cancelled", "cancelled"]


async def test_enqueue_runs_turns_in_order(session_api: TestClient, session_worker: Any) -> None:
    sid = await new_session(session_api)
    streams = []
    for word in ("alpha [slow:0.02]", "beta", "gamma"):
        response = await session_api.post(
            f"/api/sessions/{sid}/chat/stream",
            json={"message": word, "multitask_strategy": "enqueue"},
        )
        streams.append(response)
    for response in streams:
        assert (await frames_of(response))[-1].event == "done"
    page = await (await session_api.get(f"/api/sessions/{sid}/messages")).json()
    users = [m["content"] for m in page["data"] if m["role"] == "user"]
    assert users == ["alpha [slow:0.02]", "beta", "gamma"]


async def test_stop_a_session_turn_through_runs(
    session_api: TestClient, session_worker: Any
) -> None:
    sid = await new_session(session_api)
    response = await session_api.post(
        f"/api/sessions/{sid}/chat/stream", json={"message": "x [slow]"}
    )
    head = await frames_of(response, stop_after=3)
    run_id = response.headers["X-Hermes-Run-Id"]
    stopped = await session_api.post(f"/v1/runs/{run_id}/stop")
    assert (await stopped.json())["status"] == "stopping"
    rest = await frames_of(response)
    assert [f.event for f in rest][-2:] == ["run.cancelled", "done"]
    shown = "".join(f.json()["delta"] for f in head + rest if f.event == "assistant.delta")

    # The transcript keeps what the reader was shown, marked, so the next turn's history
    # answers the first message before the second asks (user, assistant, user, assistant).
    _, nxt = await stream_turn(session_api, sid, message="again")
    assert nxt[-1].event == "done"
    page = await (await session_api.get(f"/api/sessions/{sid}/messages")).json()
    rows = [(m["role"], m["content"], m["finish_reason"]) for m in page["data"]]
    assert [role for role, _, _ in rows] == ["user", "assistant", "user", "assistant"]
    assert rows[1][2] == "interrupted" and rows[3][2] != "interrupted"
    assert rows[1][1] == shown and shown.startswith("Echo:")
    assert rows[3][1] == "Echo: again (turn 2)"


async def test_multimodal_message(session_api: TestClient, session_worker: Any) -> None:
    sid = await new_session(session_api)
    message = [
        {"type": "input_text", "text": "see"},
        {"type": "input_image", "image_url": "https://example.com/cat.png"},
    ]
    body = await (
        await session_api.post(f"/api/sessions/{sid}/chat", json={"message": message})
    ).json()
    assert body["message"]["content"] == "Echo: see [image]"  # the agent saw the image
    # Stored as Hermes' agent stores it (upstream): the text, [screenshot] for the image.
    page = await (await session_api.get(f"/api/sessions/{sid}/messages")).json()
    assert page["data"][0]["content"] == "see\n[screenshot]"
    bad = await session_api.post(
        f"/api/sessions/{sid}/chat",
        json={"message": [{"type": "image_url", "image_url": "javascript:alert(1)"}]},
    )
    assert bad.status == 400 and (await bad.json())["error"]["code"] == "invalid_image_url"


async def test_chat_validation_errors(session_api: TestClient) -> None:
    sid = await new_session(session_api)
    cases = [
        ({}, 400, "missing_message"),
        ({"message": ""}, 400, "missing_message"),
        ({"message": "x", "system_message": 3}, 400, "invalid_system_message"),
        ({"message": "x", "multitask_strategy": "yolo"}, 400, "invalid_multitask_strategy"),
    ]
    for body, status, code in cases:
        response = await session_api.post(f"/api/sessions/{sid}/chat/stream", json=body)
        assert response.status == status and (await response.json())["error"]["code"] == code
    missing = await session_api.post("/api/sessions/nope/chat", json={"message": "x"})
    assert missing.status == 404 and (await missing.json())["error"]["code"] == "session_not_found"


async def test_session_key_header_rules(session_api: TestClient, session_worker: Any) -> None:
    sid = await new_session(session_api)
    echoed = await session_api.post(
        f"/api/sessions/{sid}/chat",
        json={"message": "k"},
        headers={"X-Hermes-Session-Key": "webui:1"},
    )
    assert echoed.headers["X-Hermes-Session-Key"] == "webui:1"
    too_long = await session_api.post(
        f"/api/sessions/{sid}/chat",
        json={"message": "k"},
        headers={"X-Hermes-Session-Key": "k" * 300},
    )
    assert too_long.status == 400


async def test_session_key_without_api_key_is_403(settings: Settings) -> None:
    async with running_api(settings.replace(api_key="")) as api:
        await api.post("/api/sessions", json={"id": "open"})
        response = await api.post(
            "/api/sessions/open/chat", json={"message": "x"}, headers={"X-Hermes-Session-Key": "a"}
        )
        assert response.status == 403
        assert "requires API key authentication" in (await response.json())["error"]["message"]


PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADElEQVR4nGNgYGAAAAAEAAH2FzhVAAAAAElFTkSuQmCC"
)


async def test_a_media_tag_in_a_reply_is_inlined_where_upstream_inlines_it(
    session_api: TestClient, session_worker: Any, tmp_path: Path
) -> None:
    """The worker reads the file its agent named (``MEDIA:/abs/path.png``) and the reply as
    shown carries it as a ``data:`` image: session chat and the session stream's
    ``assistant.completed``. The streamed deltas and the run's output keep the tag, as
    upstream's."""
    image = tmp_path / "chart.png"
    image.write_bytes(PIXEL)
    sid = await new_session(session_api)
    inline = "![image](data:image/png;base64," + base64.b64encode(PIXEL).decode() + ")"
    answer = await session_api.post(f"/api/sessions/{sid}/chat", json={"message": f"MEDIA:{image}"})
    assert (await answer.json())["message"]["content"] == f"Echo: {inline}"
    run = await (await session_api.get(f"/v1/runs/{answer.headers['X-Hermes-Run-Id']}")).json()
    assert run["output"] == f"Echo: MEDIA:{image}"
    _, frames = await stream_turn(session_api, sid, message=f"MEDIA:{image}")
    deltas = "".join(f.json()["delta"] for f in frames if f.event == "assistant.delta")
    completed = next(f.json() for f in frames if f.event == "assistant.completed")
    assert f"MEDIA:{image}" in deltas and inline in completed["content"]


@contextlib.asynccontextmanager
async def on_private_redis(
    settings: Settings,
) -> AsyncIterator[tuple[TestClient, aioredis.Redis, Settings]]:
    """An API and a worker on a Redis of their own, and a client of it: its command counts
    and keys are these turns' alone."""
    server = EmbeddedRedis.start()
    private = aioredis.Redis.from_url(server.url)
    settings = settings.replace(redis_url=server.url)
    try:
        async with running_api(settings) as api, running_worker(settings):
            yield api, private, settings
    finally:
        await private.aclose()
        server.stop()


async def test_a_new_turns_stream_reads_no_history_and_a_resume_does(settings: Settings) -> None:
    """The request that creates a turn follows it from its first event without a replay read
    (the follower reads the stream from its start); a client resuming the turn replays it. On a
    private Redis, whose command counts are this turn's alone."""
    async with on_private_redis(settings) as (api, private, _):
        sid = await new_session(api)
        created: list[Any] = []

        async def new_turn() -> None:
            created.append(await stream_turn(api, sid, message="hello"))

        calls = await commands_for(private, new_turn)
        response, frames = created[0]
        assert frames[-1].event == "done" and "Echo: hello" in frames[-2].data
        assert calls["xrange"] == 0
        run_id = response.headers["X-Hermes-Run-Id"]

        async def resume() -> None:
            got = await api.get(f"/api/sessions/{sid}/chat/stream", params={"run_id": run_id})
            assert got.status == 200
            assert (await frames_of(got))[-1].event == "done"

        assert (await commands_for(private, resume))["xrange"] > 0


async def test_a_turn_read_to_its_end_leaves_its_reader_entry_to_lapse(
    settings: Settings,
) -> None:
    """A reader that saw its run end removes nothing from the run's readers set (an ended run
    is never judged abandoned): the entry lapses by itself, and the session's next turn waits
    for no removal before its create (which flushes this process's pending presence changes
    first, ``runs/start.py``)."""
    async with on_private_redis(settings) as (api, private, settings):
        sid = await new_session(api)
        run_ids: list[str] = []
        for message in ("one", "two"):
            response, frames = await stream_turn(api, sid, message=message)
            assert frames[-1].event == "done"
            run_ids.append(response.headers["X-Hermes-Run-Id"])
        keys = settings.redis.keys
        assert await private.zcard(keys.readers(run_ids[0])) == 1  # lapses, not removed
        assert await private.pttl(keys.readers(run_ids[0])) > 0
