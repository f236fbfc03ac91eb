"""Idempotency-Key on POST /v1/runs and POST /v1/chat/completions (upstream-api.md §2.2, §4.1):
replays never enqueue, a different body is a 409, concurrent duplicates make one run."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

import pytest
import redis.asyncio as aioredis
from aiohttp.test_utils import TestClient

from hermes_queue.config import Settings
from hermes_queue.jobqueue.worker import WakeableWorker
from hermes_queue.keys import Keys
from tests.support.inprocess import running_api


async def run_records(redis: aioredis.Redis, keys: Keys) -> int:
    found = [k async for k in redis.scan_iter(match=f"{keys.namespace}:run:*", count=500)]
    return sum(1 for key in found if key.endswith(b"}"))  # records, not events/steps/readers


async def post_run(
    client: TestClient, body: dict[str, Any], key: str | None = "k-1", **headers: str
) -> tuple[int, dict[str, Any], Any]:
    if key is not None:
        headers["Idempotency-Key"] = key
    response = await client.post("/v1/runs", json=body, headers=headers)
    return response.status, await response.json(), response.headers


async def test_replay_returns_the_same_run_and_enqueues_nothing(
    api: TestClient, redis: aioredis.Redis, keys: Keys
) -> None:
    status, first, headers = await post_run(api, {"input": "hello", "instructions": "be brief"})
    assert status == 202
    assert first == {"run_id": first["run_id"], "status": "started", "replayed": False}
    assert "Idempotency-Replayed" not in headers
    # Same body, other key order and spacing: the canonical JSON is the same.
    status, again, headers = await post_run(api, {"instructions": "be brief", "input": "hello"})
    assert status == 202
    assert again == {"run_id": first["run_id"], "status": "queued", "replayed": True}
    assert headers["Idempotency-Replayed"] == "true"
    assert await run_records(redis, keys) == 1
    assert await redis.zcard(keys.queue) == 1


async def test_without_a_key_nothing_changes(api: TestClient, redis: aioredis.Redis) -> None:
    status, body, _ = await post_run(api, {"input": "hello"}, key=None)
    assert status == 202 and body == {"run_id": body["run_id"], "status": "started"}


async def test_same_key_different_body_is_a_409(
    api: TestClient, redis: aioredis.Redis, keys: Keys
) -> None:
    assert (await post_run(api, {"input": "hello"}))[0] == 202
    status, body, _ = await post_run(api, {"input": "something else"})
    assert status == 409
    assert body["error"]["code"] == "idempotency_key_conflict"
    # The session key header is part of the fingerprint.
    status, body, _ = await post_run(api, {"input": "hello"}, **{"X-Hermes-Session-Key": "s"})
    assert status == 409
    assert await run_records(redis, keys) == 1
    assert await redis.zcard(keys.queue) == 1


@pytest.mark.parametrize("key", ["", "has space", "x" * 256, "tab\there"])
async def test_invalid_key_is_a_400(api: TestClient, redis: aioredis.Redis, key: str) -> None:
    status, body, _ = await post_run(api, {"input": "hello"}, key=key)
    assert status == 400
    assert body["error"]["code"] == "invalid_idempotency_key"
    assert body["error"]["param"] == "Idempotency-Key"


async def test_longest_valid_key(api: TestClient, redis: aioredis.Redis) -> None:
    key = "~" + "k" * 253 + "!"
    assert (await post_run(api, {"input": "a"}, key=key))[0] == 202
    assert (await post_run(api, {"input": "a"}, key=key))[1]["replayed"] is True


async def test_concurrent_duplicates_create_one_run(
    api: TestClient, redis: aioredis.Redis, keys: Keys
) -> None:
    answers = await asyncio.gather(
        *(post_run(api, {"input": "race"}, key="k-race") for _ in range(5))
    )
    assert {status for status, _, _ in answers} == {202}
    assert len({body["run_id"] for _, body, _ in answers}) == 1
    assert sorted(body["replayed"] for _, body, _ in answers) == [False, True, True, True, True]
    assert await run_records(redis, keys) == 1
    assert await redis.zcard(keys.queue) == 1


async def test_keys_are_scoped_by_route_and_api_key(
    settings: Settings, redis: aioredis.Redis, keys: Keys
) -> None:
    # No configured key: any bearer passes, and each one is its own tenant.
    async with running_api(settings.replace(api_key="")) as client:
        one = await post_run(client, {"input": "a"}, Authorization="Bearer tenant-one")
        two = await post_run(client, {"input": "a"}, Authorization="Bearer tenant-two")
        assert one[1]["run_id"] != two[1]["run_id"]
        assert two[1]["replayed"] is False
        # No worker: a streamed completion sends its headers (with the run id) at once.
        async with client.post(
            "/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "a"}], "stream": True},
            headers={"Idempotency-Key": "k-1", "Authorization": "Bearer tenant-one"},
        ) as chat:
            assert chat.headers["X-Hermes-Run-Id"] not in (one[1]["run_id"], two[1]["run_id"])
            assert "Idempotency-Replayed" not in chat.headers
    assert await run_records(redis, keys) == 3


async def test_record_names_hold_nothing_computed_from_the_api_key(
    api: TestClient, redis: aioredis.Redis, keys: Keys, settings: Settings
) -> None:
    """Anyone reading Redis could test guesses of the key against a hash of it offline."""
    assert (await post_run(api, {"input": "a"}, key="k-name"))[0] == 202
    digest = hashlib.sha256(settings.api.api_key.encode()).hexdigest()
    names = [k.decode() async for k in redis.scan_iter(match=f"{keys.namespace}:*", count=500)]
    assert f"{keys.namespace}:idem:key:runs:{hashlib.sha256(b'k-name').hexdigest()}" in names
    for name in names:
        assert digest[:8] not in name and settings.api.api_key not in name
        if await redis.type(name) == b"string":
            assert digest[:8].encode() not in await redis.get(name)


async def test_a_refused_request_releases_its_key(
    settings: Settings, redis: aioredis.Redis, keys: Keys
) -> None:
    async with running_api(settings.replace(max_ready_depth=1)) as client:
        assert (await post_run(client, {"input": "fills the queue"}, key=None))[0] == 202
        status, body, _ = await post_run(client, {"input": "hello"}, key="k-busy")
        assert status == 429  # backpressure after the claim: the claim must not stay
        await redis.delete(keys.queue)  # the queue drains
        status, body, _ = await post_run(client, {"input": "hello"}, key="k-busy")
        assert status == 202 and body["replayed"] is False


# -- chat completions ---------------------------------------------------------------------------
CHAT = {"messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}]}


async def test_chat_completion_replays_the_same_completion(
    api: TestClient, worker: WakeableWorker, redis: aioredis.Redis, keys: Keys
) -> None:
    headers = {"Idempotency-Key": "chat-1"}
    first = await api.post("/v1/chat/completions", json=CHAT, headers=headers)
    assert first.status == 200
    body = await first.json()
    assert body["choices"][0]["message"]["content"] == "Echo: hi"
    again = await api.post("/v1/chat/completions", json=CHAT, headers=headers)
    assert again.status == 200
    assert await again.json() == body
    assert again.headers["Idempotency-Replayed"] == "true"
    assert again.headers["X-Hermes-Run-Id"] == first.headers["X-Hermes-Run-Id"]
    assert again.headers["X-Hermes-Session-Id"] == first.headers["X-Hermes-Session-Id"]
    assert await run_records(redis, keys) == 1
    conflict = await api.post(
        "/v1/chat/completions",
        json={**CHAT, "messages": [{"role": "user", "content": "other"}]},
        headers=headers,
    )
    assert conflict.status == 409
    assert (await conflict.json())["error"]["code"] == "idempotency_key_conflict"
    assert await run_records(redis, keys) == 1


async def test_chat_stream_replays_the_same_frames(
    api: TestClient, worker: WakeableWorker, redis: aioredis.Redis, keys: Keys
) -> None:
    body = {**CHAT, "stream": True}
    headers = {"Idempotency-Key": "chat-stream-1"}
    first = await api.post("/v1/chat/completions", json=body, headers=headers)
    assert first.status == 200
    frames = await first.read()
    assert frames.rstrip().endswith(b"data: [DONE]")
    again = await api.post("/v1/chat/completions", json=body, headers=headers)
    assert again.headers["Idempotency-Replayed"] == "true"
    assert again.headers["X-Hermes-Run-Id"] == first.headers["X-Hermes-Run-Id"]
    assert await again.read() == frames
    assert await run_records(redis, keys) == 1


async def test_concurrent_chat_duplicates_share_one_run(
    api: TestClient, worker: WakeableWorker, redis: aioredis.Redis, keys: Keys
) -> None:
    async def ask() -> tuple[str, dict[str, Any]]:
        response = await api.post(
            "/v1/chat/completions", json=CHAT, headers={"Idempotency-Key": "chat-race"}
        )
        assert response.status == 200
        return response.headers["X-Hermes-Run-Id"], await response.json()

    answers = await asyncio.gather(*(ask() for _ in range(5)))
    assert len({run_id for run_id, _ in answers}) == 1
    assert all(body == answers[0][1] for _, body in answers)
    assert await run_records(redis, keys) == 1
