"""The session model lock over HTTP: an API process and a worker process (the openai or the
hermes backend) talking to fake LLM providers in the test process. Every test runs on both
backends, except where a backend cannot express the case."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis

from hermes_queue.client import iter_sse
from hermes_queue.config import Settings
from hermes_queue.providers import ProviderSettings, RouteSettings
from tests.conftest import store_variant
from tests.support.fake_llm import FakeLLM
from tests.support.processes import Cluster, ProcessApi

ALPHA_KEY = "sk-alpha-0123456789abcdef-secret"
BETA_KEY = "sk-beta-0123456789abcdef-secret"


@dataclass
class Setup:
    api: ProcessApi
    alpha: FakeLLM
    beta: FakeLLM
    settings: Settings


# The lock is kept by the store and enforced by the worker: openai runs on both stores, hermes
# on PostgreSQL (the scale-out store), which keeps the matrix's process start-ups in check.
@pytest.fixture(params=["openai-sqlite", "openai-postgres", "hermes-postgres"])
def variant(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def locked(
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    variant: str,
    request: pytest.FixtureRequest,
) -> AsyncIterator[Setup]:
    backend_name, store = variant.split("-")
    backend: dict[str, Any] = {"agent_backend": backend_name}
    if backend_name == "hermes":
        hermes_home = request.getfixturevalue("hermes_home")
        backend.update(hermes_home=hermes_home, hermes_toolsets=("todo",))
    monkeypatch.setenv("HQ_TEST_ALPHA_KEY", ALPHA_KEY)
    monkeypatch.setenv("HQ_TEST_BETA_KEY", BETA_KEY)
    monkeypatch.delenv("HQ_TEST_GAMMA_KEY", raising=False)
    async with contextlib.AsyncExitStack() as stack:
        alpha = await stack.enter_async_context(FakeLLM(expected_key=ALPHA_KEY))
        beta = await stack.enter_async_context(FakeLLM(expected_key=BETA_KEY))
        store_settings = await stack.enter_async_context(store_variant(settings, store))
        settings = store_settings.replace(
            **backend,
            providers={
                "alpha": ProviderSettings("alpha", alpha.base_url, api_key_env="HQ_TEST_ALPHA_KEY"),
                "beta": ProviderSettings("beta", beta.base_url, api_key_env="HQ_TEST_BETA_KEY"),
                "gamma": ProviderSettings("gamma", beta.base_url, api_key_env="HQ_TEST_GAMMA_KEY"),
            },
            model_routes={"fast": RouteSettings("fast", "beta", "beta-fast")},
            default_provider="alpha",
            default_model="alpha-default",
            metrics_port=0,
        ).validate()
        cluster = Cluster(settings)
        stack.callback(cluster.stop_all)
        url = await cluster.start_api()
        await cluster.start_worker()
        headers = {"Authorization": f"Bearer {settings.api.api_key}"}
        session = await stack.enter_async_context(aiohttp.ClientSession(headers=headers))
        yield Setup(ProcessApi(session, url), alpha, beta, settings)


async def chat(api: ProcessApi, session_id: str, **body: Any) -> Any:
    response = await api.post(f"/api/sessions/{session_id}/chat", json=body)
    return response.status, await response.json()


async def test_lock_endpoint_then_chat_and_stream_reuse_it(locked: Setup) -> None:
    api = locked.api
    assert (await api.post("/api/sessions", json={"id": "s1"})).status == 201
    response = await api.post(
        "/api/sessions/s1/model", json={"provider": "beta", "model": "beta-large"}
    )
    assert response.status == 200
    body = await response.json()
    assert body["object"] == "hermes.session.model_lock" and body["session_id"] == "s1"
    assert body["runtime"]["model_lock"] == "accepted"
    assert body["runtime"]["provider"] == "beta" and body["runtime"]["model"] == "beta-large"

    status, reply = await chat(api, "s1", message="hello")
    assert status == 200
    assert reply["message"]["content"] == locked.beta.reply_for("hello")
    assert reply["runtime"]["route_source"] == "session_model_lock"
    assert reply["runtime"]["model_lock"] == "confirmed"
    request = locked.beta.chat_requests[-1]
    assert request.body["model"] == "beta-large"
    assert request.headers["Authorization"] == f"Bearer {BETA_KEY}"
    assert locked.alpha.chat_requests == []

    stream = await api.post("/api/sessions/s1/chat/stream", json={"message": "again"})
    frames = [f async for f in iter_sse(stream) if f.data]
    started = frames[0].json()
    assert frames[0].event == "run.started"
    assert started["runtime"]["route_source"] == "session_model_lock"
    completed = next(f.json() for f in frames if f.event == "assistant.completed")
    assert completed["runtime"]["model_lock"] == "confirmed"
    assert locked.beta.chat_requests[-1].body["model"] == "beta-large"


async def test_lock_at_creation_and_one_off_override_keeps_it(locked: Setup) -> None:
    api = locked.api
    created = await api.post(
        "/api/sessions",
        json={"id": "s2", "provider": "beta", "model": "beta-x", "require_model_lock": "true"},
    )
    assert created.status == 201
    assert (await created.json())["session"]["has_model_config"] is True
    status, _ = await chat(api, "s2", message="one", provider="alpha", model="alpha-y")
    assert status == 200
    status, reply = await chat(api, "s2", message="two")
    assert status == 200 and reply["runtime"]["route_source"] == "session_model_lock"
    assert locked.beta.chat_requests[-1].body["model"] == "beta-x"


async def test_lock_validation_errors(locked: Setup) -> None:
    api = locked.api
    await api.post("/api/sessions", json={"id": "s3"})
    missing = await api.post(
        "/api/sessions/s3/chat", json={"message": "x", "require_model_lock": True}
    )
    assert missing.status == 400 and (await missing.json())["error"]["code"] == "missing_model"
    unavailable = await api.post(
        "/api/sessions/s3/chat",
        json={"message": "x", "model": "hermes-agent", "require_model_lock": True},
    )
    assert unavailable.status == 409
    assert (await unavailable.json())["error"]["code"] == "model_lock_unavailable"
    unknown = await api.post("/api/sessions/s3/model", json={"provider": "nope", "model": "m"})
    assert unknown.status == 400 and (await unknown.json())["error"]["code"] == "unknown_provider"
    bad_options = await api.post(
        "/v1/runs", json={"input": "x", "model": "fast", "model_options": "fast please"}
    )
    assert bad_options.status == 400
    assert (await bad_options.json())["error"]["code"] == "invalid_model_options"
    assert locked.alpha.chat_requests == [] and locked.beta.chat_requests == []


async def test_credentials_fail_closed_with_the_controlled_reply(locked: Setup) -> None:
    api = locked.api
    await api.post("/api/sessions", json={"id": "s4"})
    await api.post("/api/sessions/s4/model", json={"provider": "gamma", "model": "g-1"})
    status, reply = await chat(api, "s4", message="hi")
    assert status == 200
    assert reply["message"]["content"].startswith("⚠️ Provider authentication failed:")
    assert "HQ_TEST_GAMMA_KEY" in reply["message"]["content"]
    assert reply["usage"] == {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}
    # No other provider's credentials were used instead.
    assert locked.alpha.chat_requests == [] and locked.beta.chat_requests == []

    run = await api.post("/v1/runs", json={"input": "hi", "provider": "gamma", "model": "g-1"})
    run_id = (await run.json())["run_id"]
    events = [
        f.json() async for f in iter_sse(await api.get(f"/v1/runs/{run_id}/events")) if f.data
    ]
    assert events[-1]["event"] == "run.failed"
    assert events[-1]["error"].startswith("⚠️ Provider authentication failed:")


# The hermes backend reports the runtime its agent ran on (its model changes only through a
# fallback, which a confirmed lock turns off), not the model name a provider echoes back.
@pytest.mark.parametrize("variant", ["openai-sqlite", "openai-postgres"])
async def test_runtime_mismatch_under_a_lock_fails_the_turn(locked: Setup) -> None:
    api = locked.api
    await api.post("/api/sessions", json={"id": "s5"})
    await api.post("/api/sessions/s5/model", json={"provider": "beta", "model": "beta-large"})
    locked.beta.actual_model = "beta-substitute"
    status, reply = await chat(api, "s5", message="hi")
    assert status == 500
    assert reply["error"]["message"].startswith("confirmed model lock runtime mismatch: expected")
    assert "beta-substitute" in reply["error"]["message"]


async def test_route_alias_and_direct_provider_on_runs(locked: Setup) -> None:
    api = locked.api
    for body, fake, model in (
        ({"input": "a", "model": "fast"}, locked.beta, "beta-fast"),
        ({"input": "b", "provider": "alpha", "model": "alpha-z"}, locked.alpha, "alpha-z"),
        ({"input": "c"}, locked.alpha, "alpha-default"),
    ):
        run_id = (await (await api.post("/v1/runs", json=body)).json())["run_id"]
        events = [f async for f in iter_sse(await api.get(f"/v1/runs/{run_id}/events")) if f.data]
        assert events[-1].json()["event"] == "run.completed", events[-1].data
        assert fake.chat_requests[-1].body["model"] == model


async def test_provider_keys_never_reach_redis(locked: Setup) -> None:
    api = locked.api
    await api.post("/api/sessions", json={"id": "s6"})
    await api.post("/api/sessions/s6/model", json={"provider": "beta", "model": "beta-large"})
    assert (await chat(api, "s6", message="secret check"))[0] == 200
    assert await keys_holding(locked.settings, ALPHA_KEY, BETA_KEY) == []


async def keys_holding(settings: Settings, *secrets: str) -> list[bytes]:
    """Every Redis key of the deployment (its namespace and arq's keys) whose stored bytes
    contain one of ``secrets``."""
    client = aioredis.Redis.from_url(settings.redis.url)
    found = []
    try:
        for pattern in (f"{settings.redis.namespace}:*", "arq:*"):
            async for key in client.scan_iter(match=pattern, count=500):
                blob = b"".join(await values_of(client, key))
                if any(secret.encode() in blob for secret in secrets):
                    found.append(key)
    finally:
        await client.aclose()
    return found


async def values_of(client: aioredis.Redis, key: bytes) -> list[bytes]:
    """Every stored byte of a key, read by type (DUMP may compress and hide a match)."""
    kind = (await client.type(key)).decode()
    if kind == "string":
        return [await client.get(key) or b""]
    if kind == "hash":
        return [b for pair in (await client.hgetall(key)).items() for b in pair]
    if kind == "stream":
        return [b for _, fields in await client.xrange(key) for p in fields.items() for b in p]
    if kind == "zset":
        return list(await client.zrange(key, 0, -1))
    if kind == "list":
        return list(await client.lrange(key, 0, -1))
    if kind == "set":
        return list(await client.smembers(key))
    return []
