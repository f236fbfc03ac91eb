"""Backpressure: past the ready-queue limits, run creation answers 429 and writes nothing."""

from __future__ import annotations

import time

import pytest
import redis.asyncio as aioredis
from aiohttp.test_utils import TestClient

from hermes_queue.config import ConfigError, Settings
from hermes_queue.keys import Keys
from hermes_queue.queueview.figures import Depth, desired_workers, retry_after_seconds
from tests.ops.conftest import scrape_api, value
from tests.support.inprocess import running_api


async def run_records(redis: aioredis.Redis, keys: Keys) -> list[bytes]:
    """Test-only scan: every run record of this test's namespace."""
    found = redis.scan_iter(match=f"{keys.namespace}:run:*", count=1000)
    return [key async for key in found if key.endswith(b"}")]  # not events/steps/readers


def assert_queue_full(body: dict[str, object], status: int) -> None:
    assert status == 429
    error = body["error"]
    assert isinstance(error, dict)
    assert error["code"] == "queue_full"
    assert error["type"] == "rate_limit_error"


async def test_runs_past_the_depth_limit_get_429_and_nothing_is_enqueued(
    settings: Settings, redis: aioredis.Redis, keys: Keys
) -> None:
    async with running_api(settings.replace(max_ready_depth=2)) as api:
        for text in ("one", "two"):
            assert (await api.post("/v1/runs", json={"input": text})).status == 202
        refused = await api.post("/v1/runs", json={"input": "three"})
        assert_queue_full(await refused.json(), refused.status)
        # No worker has drained anything recently: the longest wait.
        assert refused.headers["Retry-After"] == "60"
        assert await redis.zcard(keys.queue) == 2
        assert len(await run_records(redis, keys)) == 2
        # An invalid request is still told what is wrong with it, not that the queue is full.
        assert (await api.post("/v1/runs", json={})).status == 400
        samples = await scrape_api(api)
        assert value(samples, "hermes_queue_backpressure_rejections_total", reason="depth") == 1


async def new_session(api: TestClient, session_id: str) -> None:
    assert (await api.post("/api/sessions", json={"id": session_id})).status == 201


async def test_session_chat_is_refused_before_anything_is_written(
    settings: Settings, redis: aioredis.Redis, keys: Keys
) -> None:
    async with running_api(settings.replace(max_ready_depth=1)) as api:
        await new_session(api, "bp-1")
        # One run waits ready (written straight into the queue): the queue is full.
        await redis.zadd(keys.queue, {"run_waiting": int(time.time() * 1000)})
        for path in ("/api/sessions/bp-1/chat", "/api/sessions/bp-1/chat/stream"):
            refused = await api.post(
                path, json={"message": "hello", "multitask_strategy": "enqueue"}
            )
            assert_queue_full(await refused.json(), refused.status)
            assert 1 <= int(refused.headers["Retry-After"]) <= 60
        assert await redis.zcard(keys.queue) == 1
        assert await run_records(redis, keys) == []
        assert await redis.exists(keys.session_active("bp-1"), keys.session_pending("bp-1")) == 0
        assert await redis.zcard(keys.blocked) == 0
        page = await (await api.get("/api/sessions/bp-1/messages")).json()
        assert page["data"] == []


async def test_the_age_limit_and_a_retry_after_from_the_drain_rate(
    settings: Settings, redis: aioredis.Redis, keys: Keys
) -> None:
    async with running_api(settings.replace(max_ready_age_seconds=60.0)) as api:
        assert (await api.post("/v1/runs", json={"input": "fresh"})).status == 202
        # A run that has waited two minutes: older than the limit.
        await redis.zadd(keys.queue, {"run_old": int((time.time() - 120) * 1000)})
        refused = await api.post("/v1/runs", json={"input": "late"})
        assert_queue_full(await refused.json(), refused.status)
        assert refused.headers["Retry-After"] == "60"
        # Workers claimed 3,000 runs this minute: over a window of at most five minutes that is
        # more than 10 per second, so the one overdue run clears within a second.
        await redis.hset(keys.stats(int(time.time() // 60)), "claimed", 3000)
        refused = await api.post("/v1/runs", json={"input": "late"})
        assert refused.status == 429
        assert refused.headers["Retry-After"] == "1"
        samples = await scrape_api(api)
        assert value(samples, "hermes_queue_backpressure_rejections_total", reason="age") == 2
        await redis.zrem(keys.queue, "run_old")
        assert (await api.post("/v1/runs", json={"input": "admitted again"})).status == 202
        assert await redis.zcard(keys.queue) == 2


def test_retry_after_formula() -> None:
    assert retry_after_seconds(10, 0.0) == 60  # nothing drains: the longest wait
    assert retry_after_seconds(10, 2.0) == 5
    assert retry_after_seconds(1, 100.0) == 1  # never below a second
    assert retry_after_seconds(10_000, 1.0) == 60  # never above a minute


def test_desired_workers_formula() -> None:
    def d(ready: int = 0, deferred: int = 0, running: int = 0, blocked: int = 0) -> Depth:
        return Depth(ready, deferred, running, blocked, 0.0)

    assert desired_workers(d(), 16) == 0
    assert desired_workers(d(ready=1), 16) == 1
    assert desired_workers(d(ready=20, running=13), 16) == 3
    assert desired_workers(d(deferred=5), 16) == 1  # something must pick them up later
    assert desired_workers(d(blocked=2), 16) == 1


def test_limits_are_validated(settings: Settings) -> None:
    with pytest.raises(ConfigError):
        settings.replace(max_ready_depth=-1).validate()
    with pytest.raises(ConfigError):
        settings.replace(metrics_port=70000).validate()


async def test_chat_completions_are_refused_before_a_session_is_created(
    settings: Settings, redis: aioredis.Redis, keys: Keys
) -> None:
    async with running_api(settings.replace(max_ready_depth=1)) as api:
        await redis.zadd(keys.queue, {"run_waiting": int(time.time() * 1000)})
        body = {"messages": [{"role": "user", "content": "hi"}]}
        for headers in ({}, {"X-Hermes-Session-Id": "bp-new"}):
            refused = await api.post("/v1/chat/completions", json=body, headers=headers)
            assert_queue_full(await refused.json(), refused.status)
        assert await run_records(redis, keys) == []
        assert (await api.get("/api/sessions/bp-new")).status == 404


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/runs", {"input": "hi"}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
        ("/v1/responses", {"input": "hi"}),
        ("/api/sessions/bp-2/chat", {"message": "hi"}),
    ],
)
async def test_a_turn_that_cannot_be_routed_is_told_so_even_when_the_queue_is_full(
    settings: Settings, redis: aioredis.Redis, keys: Keys, path: str, body: dict[str, object]
) -> None:
    """Every turn endpoint validates (routing included) before backpressure, so the client
    learns what is wrong with its request rather than to retry it later."""
    async with running_api(settings.replace(max_ready_depth=1)) as api:
        await new_session(api, "bp-2")
        await redis.zadd(keys.queue, {"run_waiting": int(time.time() * 1000)})
        refused = await api.post(path, json={**body, "provider": "nowhere"})
        assert refused.status == 400
        assert (await refused.json())["error"]["code"] == "unknown_provider"
        assert await run_records(redis, keys) == []
        samples = await scrape_api(api)
        assert value(samples, "hermes_queue_backpressure_rejections_total", reason="depth") == 0
