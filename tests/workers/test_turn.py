"""The run job in one process: timeouts, redelivery, batching, Redis going away."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from hermes_queue.agents.base import CancelToken
from hermes_queue.agents.echo import EchoBackend
from hermes_queue.client import HermesQueueClient
from hermes_queue.config import Settings
from hermes_queue.events import RunEvent
from hermes_queue.keys import Keys
from hermes_queue.redisio.embedded import EmbeddedRedis, free_port
from hermes_queue.runs.model import NewRun, Persist
from hermes_queue.runs.placement import new_run_id
from hermes_queue.runs.repository import RunRepository
from hermes_queue.runs.turn_request import TurnRequest
from hermes_queue.store import open_store
from hermes_queue.streams.codec import decode_entry
from hermes_queue.workers.lease_keeper import LeaseKeeper
from hermes_queue.workers.sink import RunEventSink
from hermes_queue.workers.turn import WorkerRuntime, run_turn
from tests.support.inprocess import running_api, running_worker
from tests.support.polling import eventually


async def test_turn_over_its_time_limit_fails_with_timeout(settings: Settings) -> None:
    limited = settings.replace(job_timeout_seconds=1)
    async with running_api(limited) as api, running_worker(limited):
        run_id = (await (await api.post("/v1/runs", json={"input": "long [slow:0.5]"})).json())[
            "run_id"
        ]
        async with HermesQueueClient(str(api.make_url("")), limited.api.api_key) as client:
            client.base_url = client.base_url.rstrip("/")
            events = [p async for _, p in client.iter_events(run_id)]
        status = await (await api.get(f"/v1/runs/{run_id}")).json()
    assert events[-1]["event"] == "run.failed" and events[-1]["reason"] == "timeout"
    assert status["status"] == "failed"


class SignallingEcho(EchoBackend):
    """Echo that says when each attempt has started."""

    def __init__(self, token_delay: float) -> None:
        super().__init__(token_delay)
        self.started: dict[int, asyncio.Event] = {1: asyncio.Event(), 2: asyncio.Event()}

    async def run_turn(self, request: Any, sink: Any, cancel: CancelToken) -> Any:
        self.started[request.attempt].set()
        return await super().run_turn(request, sink, cancel)


async def test_stale_attempt_ending_does_not_untrack_the_live_one(
    redis: Any, settings: Settings
) -> None:
    repo = RunRepository(redis, settings.redis.keys, settings.runs)
    backend = SignallingEcho(0.05)
    runtime = WorkerRuntime(worker_id="w", repository=repo, backend=backend)
    run_id = new_run_id()
    await repo.create(NewRun(run_id, "s", TurnRequest("a b c d e f g h i j")))
    first = asyncio.create_task(run_turn(runtime, run_id))
    await backend.started[1].wait()
    # Its lease lapses (say the process froze) and the reaper puts the run back in the queue;
    # the same worker takes it again as attempt 2.
    await redis.zadd(Keys(settings.redis.namespace).leases, {run_id: 0})
    assert await repo.leases.reap(run_id) == "requeued"
    second = asyncio.create_task(run_turn(runtime, run_id))
    await backend.started[2].wait()
    assert await first == "lease_lost"
    assert runtime.active[run_id].attempt.number == 2
    assert await run_turn(runtime, run_id) == "skipped"
    assert await second == "completed"
    assert run_id not in runtime.active


async def test_fast_backend_events_are_batched_in_order(redis: Any, settings: Settings) -> None:
    """Without a window (``stream_coalesce_ms`` 0), deltas merge only behind an append in
    flight: what that merging alone does."""
    settings = settings.replace(stream_coalesce_ms=0)
    repo = RunRepository(redis, settings.redis.keys, settings.runs)
    run_id = new_run_id()
    await repo.create(NewRun(run_id, "s", TurnRequest()))
    attempt = await repo.claim(run_id, "w")
    assert attempt is not None
    calls = 0
    original = attempt.scripts.appends.evalsha

    async def counting(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        return await original(*args, **kwargs)

    attempt.scripts.appends.evalsha = counting  # type: ignore[method-assign]
    sink = RunEventSink(attempt)
    await sink.delta("first ")
    await sink.flush()  # an idle sink appends at once: the token does not wait for company
    for index in range(200):
        await sink.delta(f"t{index} ")
        if index % 20 == 0:
            await asyncio.sleep(0)  # let the flusher send what piled up so far
    await sink.reasoning("why")
    await sink.delta("last")
    await sink.flush()
    entries = await redis.xrange(Keys(settings.redis.namespace).events(run_id))
    events = [decode_entry(run_id, i, f) for i, f in entries]
    assert [e.type for e in events[:2]] == ["message.started", "message.delta"]
    assert events[1].data == {"delta": "first "}
    # Deltas that piled up behind an append in flight went out merged, in order, text intact;
    # a reasoning event between deltas is kept in its place.
    assert [e.type for e in events[-2:]] == ["reasoning.available", "message.delta"]
    middle = events[2:-2]
    assert {e.type for e in middle} == {"message.delta"}
    assert "".join(e.data["delta"] for e in middle) == "".join(f"t{i} " for i in range(200))
    assert 1 < len(middle) < 200
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert calls < 50


async def test_coalescing_window_holds_only_deltas_that_follow_a_delta(
    redis: Any, settings: Settings
) -> None:
    """With stream_coalesce_ms, the first delta goes at once; later ones wait for the window
    (long here, so only the waiting can be seen) unless another event or flush() comes, which
    take them along at once, merged and in order."""
    settings = settings.replace(stream_coalesce_ms=30_000)
    repo = RunRepository(redis, settings.redis.keys, settings.runs)
    run_id = new_run_id()
    await repo.create(NewRun(run_id, "s", TurnRequest()))
    attempt = await repo.claim(run_id, "w")
    assert attempt is not None
    stream = Keys(settings.redis.namespace).events(run_id)

    async def stream_events(count: int) -> list[RunEvent]:
        """The stream once it holds ``count`` entries (10 s at most, far below the window)."""
        entries = await eventually(
            lambda: redis.xrange(stream), lambda got: len(got) >= count, within=10
        )
        return [decode_entry(run_id, i, f) for i, f in entries]

    sink = RunEventSink(attempt)
    await sink.delta("a")
    assert [e.type for e in await stream_events(2)] == ["message.started", "message.delta"]
    await sink.delta("b")
    await sink.delta("c")
    await asyncio.sleep(0.2)
    assert await redis.xlen(stream) == 2  # held: the window since "a" is not over
    await sink.tool_started("search", "call_1")
    got = await stream_events(4)
    assert [(e.type, e.data.get("delta")) for e in got[2:]] == [
        ("message.delta", "bc"),
        ("tool.started", None),
    ]
    await sink.delta("d")
    await sink.delta("e")
    await asyncio.wait_for(sink.flush(), 10)
    got = await stream_events(5)
    assert [(e.type, e.data.get("delta")) for e in got[4:]] == [("message.delta", "de")]
    assert [e.seq for e in got] == [1, 2, 3, 4, 5]


async def test_a_progress_note_waits_for_the_next_event_or_the_terminal_write(
    redis: Any, settings: Settings
) -> None:
    """The agent's progress note (told right after a reply) waits in the delta window: it goes
    out in the same append as the ``tool.started`` that follows, or, at the end of a turn that
    writes no transcript, in the terminal script with the deltas still held: one round trip
    less per reply, for the worker, Redis and every API process following the run."""
    settings = settings.replace(stream_coalesce_ms=30_000)
    repo = RunRepository(redis, settings.redis.keys, settings.runs)
    stream = Keys(settings.redis.namespace).events
    appends: list[str] = []

    async def claimed_sink(run_id: str) -> RunEventSink:
        await repo.create(NewRun(run_id, "s", TurnRequest()))
        attempt = await repo.claim(run_id, "w")
        assert attempt is not None
        original = attempt.scripts.appends.evalsha

        async def counting(*args: Any, **kwargs: Any) -> Any:
            appends.append(run_id)
            return await original(*args, **kwargs)

        attempt.scripts.appends.evalsha = counting  # type: ignore[method-assign]
        return RunEventSink(attempt)

    async def events(run_id: str) -> list[tuple[str, Any]]:
        entries = await redis.xrange(stream(run_id))
        decoded = [decode_entry(run_id, i, f) for i, f in entries]
        assert [e.seq for e in decoded] == list(range(1, len(decoded) + 1))
        return [(e.type, e.data.get("delta") or e.data.get("text")) for e in decoded]

    with_tools = new_run_id()
    sink = await claimed_sink(with_tools)
    await sink.delta("a")
    await sink.flush()
    await sink.thinking("calling a tool")
    await asyncio.sleep(0.2)
    assert await redis.xlen(stream(with_tools)) == 2  # the note waits
    written = len(appends)
    await sink.tool_started("search", "call_1")
    await asyncio.wait_for(sink.flush(), 10)
    assert len(appends) == written + 1  # one append for the two
    assert [kind for kind, _ in await events(with_tools)][2:] == ["progress.note", "tool.started"]

    completed = new_run_id()
    sink = await claimed_sink(completed)
    await sink.delta("a")
    await sink.flush()
    written = len(appends)
    await sink.delta("b")
    await sink.delta("c")
    await sink.thinking("done thinking")
    await asyncio.sleep(0.2)
    assert await redis.xlen(stream(completed)) == 2  # the note waits with the deltas
    unwritten = await sink.take_unwritten()
    assert await sink.attempt.complete(
        output="abc", usage={}, messages=[], runtime=None, unwritten=unwritten
    )
    assert len(appends) == written  # no append after the first delta's
    assert await events(completed) == [
        ("message.started", None),
        ("message.delta", "a"),
        ("message.delta", "bc"),
        ("progress.note", "done thinking"),
        ("assistant.completed", None),
        ("run.completed", None),
    ]


class NotingEcho(EchoBackend):
    """Echo whose turn, once its reply streamed, tells a progress note (it waits in the delta
    window) and then, if ``hold`` is set, holds until the test releases it: a state in which
    nothing is left to send, where the test can take the run's lease away."""

    def __init__(self, hold: bool = False) -> None:
        super().__init__(0.0)
        self.hold = hold
        self.streamed = asyncio.Event()
        self.release = asyncio.Event()

    async def run_turn(self, request: Any, sink: Any, cancel: CancelToken) -> Any:
        result = await super().run_turn(request, sink, cancel)
        if self.hold:
            await sink.flush()
            self.streamed.set()
            await self.release.wait()
        else:
            await sink.thinking("all done")
        return result


async def test_a_reply_reaches_the_transcript_only_while_its_attempt_holds_the_run(
    redis: Any, settings: Settings
) -> None:
    """While the lease keeper vouches for the lease by the clock (``surely_held``), a turn
    that writes a transcript sends what is still waiting with its terminal write, not in an
    append of its own before the transcript write (one script call less per turn). When it
    cannot vouch (a process that froze past its lease, thawed), a fenced call comes first, even
    with nothing left to send: an attempt that lost its run never writes its reply into the
    session."""
    # A lease the keeper vouches for long after the claim (its thread is not started: the
    # claim alone vouches); the lost attempt's below is the tests' 3 s one.
    long = settings.replace(stream_coalesce_ms=30_000, lease_seconds=600)
    repo = RunRepository(redis, long.redis.keys, long.runs)
    store = await open_store(settings.store, redis_url=settings.redis.url)
    appends: list[str] = []
    scripts = repo._fenced  # what every attempt of this repository writes through
    original = scripts.appends.evalsha

    async def counting(script: Any, *args: Any, **kwargs: Any) -> Any:
        if script is scripts.append:
            appends.append("append")
        return await original(script, *args, **kwargs)

    scripts.appends.evalsha = counting  # type: ignore[method-assign]

    def keeper(repository: RunRepository) -> LeaseKeeper:
        loop = asyncio.get_running_loop()
        return LeaseKeeper(
            settings.redis, repository.leases, "w", loop, lambda *_: None, 4, presence=redis
        )

    async def turn(backend: EchoBackend, vouching: LeaseKeeper | None) -> tuple[str, str, int]:
        runtime = WorkerRuntime("w", repo, backend, keeper=vouching, store=store)
        run_id = new_run_id()
        await repo.create(NewRun(run_id, run_id, TurnRequest("a b c"), persist=Persist.TURN))
        before = len(appends)
        return run_id, await run_turn(runtime, run_id), len(appends) - before

    async def replies(session_id: str) -> list[Any]:
        rows = await store.get_messages(session_id)
        return [row.content for row in rows if row.role == "assistant"]

    watching = keeper(repo)
    short = RunRepository(
        redis, settings.redis.keys, settings.replace(stream_coalesce_ms=30_000).runs
    )
    lapsing = keeper(short)
    try:
        vouched, ended, vouched_appends = await turn(NotingEcho(), watching)
        assert ended == "completed" and await replies(vouched) == ["Echo: a b c"]
        unvouched, ended, unvouched_appends = await turn(NotingEcho(), None)
        assert ended == "completed" and await replies(unvouched) == ["Echo: a b c"]
        assert unvouched_appends == vouched_appends + 1
        for run_id in (vouched, unvouched):
            events = await _stream_types(redis, settings, run_id)
            assert events[-3:] == ["progress.note", "assistant.completed", "run.completed"]

        # Frozen after its reply streamed: the lease lapsed and the run went back to the queue.
        backend = NotingEcho(hold=True)
        runtime = WorkerRuntime("w", short, backend, keeper=lapsing, store=store)
        lost = new_run_id()
        await short.create(NewRun(lost, lost, TurnRequest("d e f"), persist=Persist.TURN))
        running = asyncio.create_task(run_turn(runtime, lost))
        await backend.streamed.wait()
        attempt = runtime.active[lost].attempt
        await redis.zadd(settings.redis.keys.leases_of(lost), {lost: 0})
        assert await short.leases.reap(lost) == "requeued"
        await eventually(lambda: not lapsing.surely_held(attempt), within=10)
        backend.release.set()
        assert await running == "lease_lost"
        assert await replies(lost) == []
    finally:
        await watching.aclose()
        await lapsing.aclose()
        await store.close()


async def _stream_types(redis: Any, settings: Settings, run_id: str) -> list[str]:
    stream = Keys(settings.redis.namespace).events(run_id)
    return [decode_entry(run_id, i, fields).type for i, fields in await redis.xrange(stream)]


async def test_a_windowed_sink_tells_its_watcher_when_each_deltas_window_ends(
    redis: Any, settings: Settings
) -> None:
    """``watch_deltas`` (agents.base.WindowedSink, what the hermes bridge holds deltas by): told
    the window's end each time deltas go out, and never without a window."""
    loop = asyncio.get_running_loop()
    for window_ms, expected in ((30_000, 2), (0, 0)):
        windowed = settings.replace(stream_coalesce_ms=window_ms)
        repo = RunRepository(redis, windowed.redis.keys, windowed.runs)
        run_id = new_run_id()
        await repo.create(NewRun(run_id, "s", TurnRequest()))
        attempt = await repo.claim(run_id, "w")
        assert attempt is not None
        sink = RunEventSink(attempt)
        ends: list[float] = []
        sink.watch_deltas(ends.append)
        await sink.delta("a")
        await asyncio.wait_for(sink.flush(), 10)
        if window_ms:
            assert len(ends) == 1 and 29 < ends[0] - loop.time() <= 30
        await sink.tool_started("search", "call_1")
        await sink.delta("b")
        await asyncio.wait_for(sink.flush(), 10)  # flush() takes "b" along at once
        assert len(ends) == expected
        sink.watch_deltas(None)
        await sink.delta("c")
        await asyncio.wait_for(sink.flush(), 10)
        assert len(ends) == expected


async def test_default_window_sends_the_first_delta_at_once_and_merges_the_next(
    redis: Any, settings: Settings
) -> None:
    """The default delta window (80 ms): a reply's first delta is appended at once (time to
    first token unchanged); deltas emitted within the window after it go out merged into one
    entry, by themselves when the window ends (no flush needed), the text intact."""
    window = Settings.of().runs.stream_coalesce_ms
    assert window == 80.0
    assert settings.runs.stream_coalesce_ms == window  # the tests run with the default
    repo = RunRepository(redis, settings.redis.keys, settings.runs)
    stream_key = Keys(settings.redis.namespace).events
    loop = asyncio.get_running_loop()
    for _ in range(3):  # a machine stalled past the window sends the next delta alone: retry
        run_id = new_run_id()
        await repo.create(NewRun(run_id, "s", TurnRequest()))
        attempt = await repo.claim(run_id, "w")
        assert attempt is not None
        sink = RunEventSink(attempt)
        key = stream_key(run_id)
        await sink.delta("a ")
        await eventually(lambda key=key: redis.xrange(key), lambda got: len(got) >= 2, within=10)
        for text in ("b ", "c ", "d "):
            await sink.delta(text)
        assert sink._last_delta_append is not None
        in_window = loop.time() - sink._last_delta_append < window / 1000
        # The held deltas go out by themselves once the window ends: wait for all their text.
        entries = await eventually(
            lambda key=key: redis.xrange(key),
            lambda got, run_id=run_id: (
                "".join(decode_entry(run_id, i, f).data.get("delta", "") for i, f in got)
                == "a b c d "
            ),
            within=10,
        )
        events = [decode_entry(run_id, i, f) for i, f in entries]
        assert [(e.type, e.data.get("delta")) for e in events[:2]] == [
            ("message.started", None),
            ("message.delta", "a "),
        ]
        assert "".join(e.data["delta"] for e in events[2:]) == "b c d "
        if in_window:
            assert [e.data["delta"] for e in events[2:]] == ["b c d "]
            return
    pytest.fail("three stalls past the window in a row")


async def test_cancel_token_sleep_is_interruptible() -> None:
    token = CancelToken()
    loop = asyncio.get_running_loop()
    loop.call_soon(token.cancel, "stop")
    try:
        await token.sleep(30)
    except Exception as exc:
        assert type(exc).__name__ == "TurnCancelled"
    else:
        raise AssertionError("sleep ignored the cancel")


async def test_redis_restart_api_answers_503_then_everything_recovers(settings: Settings) -> None:
    port = free_port()
    server = EmbeddedRedis.start(port)
    local = settings.replace(redis_url=server.url)
    try:
        async with running_api(local) as api, running_worker(local) as worker:
            first = await api.post("/v1/runs", json={"input": "before"})
            assert first.status == 202
            await _wait_finished(api, (await first.json())["run_id"])

            server.stop()
            down = await api.post("/v1/runs", json={"input": "while away"})
            assert down.status == 503
            assert (await down.json())["error"]["code"] == "redis_unavailable"
            health = await api.get("/health")
            assert health.status == 200

            worker.listening.clear()
            server = EmbeddedRedis.start(port)
            await asyncio.wait_for(worker.listening.wait(), 20)
            after = await api.post("/v1/runs", json={"input": "after"})
            assert after.status == 202
            status = await _wait_finished(api, (await after.json())["run_id"])
            assert status["output"] == "Echo: after"
    finally:
        server.stop()


async def _wait_finished(api: Any, run_id: str) -> dict[str, Any]:
    response = await api.get(f"/v1/runs/{run_id}/events")
    async for _ in response.content:
        pass
    return dict(await (await api.get(f"/v1/runs/{run_id}")).json())


async def test_only_a_run_that_wants_webhook_deliveries_wakes_the_sender(
    redis: Any, settings: Settings
) -> None:
    """The webhook sender reads a shard's outbox at once after a run of this worker ended
    there only when that run's end queued deliveries (a webhook of its own): a worker without
    webhooks costs Redis no outbox read per run."""
    repo = RunRepository(redis, settings.redis.keys, settings.runs)
    told: list[str] = []
    runtime = WorkerRuntime(
        worker_id="w", repository=repo, backend=EchoBackend(0), deliveries_queued=told.append
    )
    plain, hooked = new_run_id(), new_run_id()
    await repo.create(NewRun(plain, plain, TurnRequest("hi")))
    await repo.create(NewRun(hooked, hooked, TurnRequest("hi"), webhook="http://127.0.0.1:9/hook"))
    assert await run_turn(runtime, plain) == "completed"
    assert await run_turn(runtime, hooked) == "completed"
    assert told == [hooked]
