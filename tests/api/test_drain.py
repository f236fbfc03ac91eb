"""Drain (api/drain.py): while an API process stops it reports not-ready, serves every request
that still reaches it (new turns included, with ``Connection: close``), and at its stream-drain
bound closes a Hermes stream with a frame its client resumes from on another replica and an
OpenAI stream with its error chunk, counting both."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from hermes_queue.api.app import create_app
from hermes_queue.api.drain import Drain, drain_api
from hermes_queue.api.http.sse import RESUME_FRAME
from hermes_queue.api.state import STATE
from hermes_queue.client import SSEFrame, iter_sse
from hermes_queue.config import Settings
from hermes_queue.jobqueue.worker import WakeableWorker
from hermes_queue.keys import Keys
from tests.support.inprocess import running_api
from tests.support.polling import eventually

# A turn long enough never to end within a test: each is stopped once it has been checked.
LONG = "long turn [slow:2]"


@contextlib.asynccontextmanager
async def draining_api(settings: Settings) -> AsyncIterator[tuple[TestClient, Drain]]:
    """The API as serve.py builds it, with the drain the test drives."""
    app = create_app(settings)
    client = TestClient(TestServer(app))
    await client.start_server()
    client.session.headers["Authorization"] = f"Bearer {settings.api.api_key}"
    try:
        yield client, app[STATE].drain
    finally:
        await client.close()


def _chat(text: str = "hi", **extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}], **extra}


async def _frames_until(response: Any, wanted: int) -> list[SSEFrame]:
    """The stream's data frames until ``wanted`` of them arrived."""
    got: list[SSEFrame] = []
    async for frame in iter_sse(response):
        if frame.data:
            got.append(frame)
        if len(got) >= wanted:
            break
    return got


async def test_readiness_flips_at_once_and_needs_no_key(settings: Settings) -> None:
    async with draining_api(settings) as (client, drain):
        ready = await client.get("/health/ready", headers={"Authorization": ""})
        assert ready.status == 200 and await ready.json() == {"status": "ready"}
        drain.begin()
        ready = await client.get("/health/ready", headers={"Authorization": ""})
        assert ready.status == 503 and await ready.json() == {"status": "draining"}
        assert ready.headers["Connection"] == "close"
        # Liveness is not readiness: a draining process is alive.
        assert (await client.get("/health")).status == 200


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        ("/v1/runs", {"input": "hi"}, 202),
        ("/v1/chat/completions", _chat(), 200),
        ("/v1/chat/completions", _chat(stream=True), 200),
        ("/api/sessions/s1/chat", {"message": "hi"}, 200),
        ("/api/sessions/s1/chat/stream", {"message": "hi"}, 200),
        ("/v1/responses", {"input": "hi"}, 200),
    ],
)
async def test_new_turns_are_served_while_draining(
    settings: Settings,
    worker: WakeableWorker,
    path: str,
    body: dict[str, Any],
    status: int,
) -> None:
    async with draining_api(settings) as (client, drain):
        if path.startswith("/api/sessions/"):
            assert (await client.post("/api/sessions", json={"id": "s1"})).status == 201
        drain.begin()
        response = await client.post(path, json=body)
        assert response.status == status, await response.text()
        # The client's next request opens a connection through the balancer, elsewhere.
        assert response.headers["Connection"] == "close"
        text = await response.text()
        assert "gateway_draining" not in text


async def test_reads_and_streams_go_on_and_count_as_in_flight(
    settings: Settings, keys: Keys, worker: WakeableWorker
) -> None:
    async with draining_api(settings.replace(echo_token_delay=0.02)) as (client, drain):
        created = await client.post("/v1/runs", json={"input": "one two three four five"})
        run_id = (await created.json())["run_id"]
        async with client.get(f"/v1/runs/{run_id}/events") as stream:
            assert stream.status == 200
            drain.begin()
            assert drain.in_flight >= 1
            assert (await client.get(f"/v1/runs/{run_id}")).status == 200
            body = await asyncio.wait_for(stream.read(), 20)
        assert b"run.completed" in body and body.endswith(b": stream closed\n\n")
        await asyncio.wait_for(drain.idle(), 5)


async def test_the_bound_closes_a_hermes_stream_with_a_frame_resumed_elsewhere(
    settings: Settings, worker: WakeableWorker
) -> None:
    async with draining_api(settings) as (old, drain), running_api(settings) as other:
        created = await old.post("/v1/runs", json={"input": LONG})
        run_id = (await created.json())["run_id"]
        stream = await old.get(f"/v1/runs/{run_id}/events")
        seen = await _frames_until(stream, 2)  # run.started and the first delta
        drain.begin()
        drain.stop_readers()
        rest = await asyncio.wait_for(stream.content.read(), 10)
        assert rest.endswith(RESUME_FRAME) and b"stream closed" not in rest
        assert b"run.completed" not in rest
        last = [frame.id for frame in seen if frame.id][-1]
        ids = [line for line in rest.decode().splitlines() if line.startswith("id: ")]
        if ids:
            last = ids[-1].removeprefix("id: ")
        # The client resumes where it was, on another replica, to the run's end.
        resumed = await other.get(f"/v1/runs/{run_id}/events", headers={"Last-Event-ID": last})
        first = await _frames_until(resumed, 1)
        assert first[0].id > last
        await other.post(f"/v1/runs/{run_id}/stop")
        tail = await asyncio.wait_for(resumed.content.read(), 20)
        assert b"run.cancelled" in tail and tail.endswith(b": stream closed\n\n")
        assert _cuts(old) == {"hermes": 1.0, "openai": 0.0}


async def test_the_bound_ends_openai_streams_with_an_error_chunk(
    settings: Settings, worker: WakeableWorker
) -> None:
    async with draining_api(settings) as (client, drain):
        chat = await client.post("/v1/chat/completions", json=_chat(LONG, stream=True))
        await _frames_until(chat, 2)
        assert (await client.post("/api/sessions", json={"id": "s2"})).status == 201
        session = await client.post("/api/sessions/s2/chat/stream", json={"message": LONG})
        await _frames_until(session, 2)
        drain.begin()
        drain.stop_readers()
        chat_rest = [f async for f in iter_sse(chat) if f.data]
        assert chat_rest[-1].data == "[DONE]"
        final = chat_rest[-2].json()
        assert final["choices"][0]["finish_reason"] == "error"
        assert final["error"]["type"] == "server_draining"
        assert final["hermes"]["error_code"] == "server_draining"
        run_id = chat.headers["X-Hermes-Run-Id"]
        assert f"/v1/runs/{run_id}/events" in final["error"]["message"]
        session_rest = await asyncio.wait_for(session.content.read(), 10)
        assert session_rest.endswith(RESUME_FRAME) and b"event: done" not in session_rest
        assert _cuts(client) == {"hermes": 1.0, "openai": 1.0}
        for run in (run_id, session.headers["X-Hermes-Run-Id"]):
            await client.post(f"/v1/runs/{run}/stop")


async def test_the_bound_answers_a_waiting_completion_503(
    settings: Settings, worker: WakeableWorker
) -> None:
    async with draining_api(settings) as (client, drain):
        waiting = asyncio.ensure_future(client.post("/v1/chat/completions", json=_chat(LONG)))
        await _await_readers(client, 1)
        drain.begin()
        drain.stop_readers()
        response = await asyncio.wait_for(waiting, 10)
        assert response.status == 503 and response.headers["Retry-After"] == "1"
        assert (await response.json())["error"]["code"] == "gateway_draining"
        assert _cuts(client)["openai"] == 1.0


async def test_drain_waits_for_the_grace_then_for_what_is_in_flight() -> None:
    drain, stop = Drain(), asyncio.Event()
    stop.set()
    stopped: list[bool] = []
    with drain.holding():
        forget = drain.watch(lambda: stopped.append(True))
        task = asyncio.ensure_future(drain_api(drain, stop, grace_seconds=0.05, stream_seconds=30))
        await asyncio.sleep(0)
        assert drain.draining and not task.done()
        forget()  # the request ends (its run did)
    # Nothing in flight any more: it ends without cutting anyone.
    await asyncio.wait_for(task, 5)
    assert stopped == []


def _reader(drain: Drain, stopped: list[bool]) -> None:
    """A request in flight whose reader, once stopped, ends it (as a stream's close does)."""
    hold = drain.holding()
    hold.__enter__()

    def stop_reading() -> None:
        stopped.append(True)
        hold.__exit__(None, None, None)

    drain.watch(stop_reading)


async def test_a_second_signal_ends_the_drain_and_stops_the_readers() -> None:
    drain, stop = Drain(), asyncio.Event()
    stop.set()
    stopped: list[bool] = []
    _reader(drain, stopped)
    task = asyncio.ensure_future(drain_api(drain, stop, grace_seconds=30, stream_seconds=30))
    await asyncio.sleep(0)
    assert not task.done() and stopped == []
    stop.set()
    await asyncio.wait_for(task, 1)
    assert stopped == [True] and drain.cutting and drain.in_flight == 0


async def test_the_bound_stops_the_readers_left() -> None:
    drain, stop = Drain(), asyncio.Event()
    stop.set()
    stopped: list[bool] = []
    _reader(drain, stopped)
    await asyncio.wait_for(drain_api(drain, stop, grace_seconds=0, stream_seconds=0.05), 5)
    assert stopped == [True] and drain.in_flight == 0
    # A reader that starts after the bound is stopped at once.
    drain.watch(lambda: stopped.append(True))
    assert stopped == [True, True]


def _cuts(client: TestClient) -> dict[str, float]:
    counter = client.server.app[STATE].metrics.drain_cuts_total  # type: ignore[union-attr]
    return {
        sample.labels["dialect"]: sample.value
        for metric in counter.collect()
        for sample in metric.samples
        if sample.name.endswith("_total")
    }


async def _await_readers(client: TestClient, count: int) -> None:
    hub = client.server.app[STATE].hub  # type: ignore[union-attr]
    await eventually(lambda: hub.stats()["subscribers"] >= count, what=f"{count} reader(s)")
