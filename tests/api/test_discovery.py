"""Discovery documents: capabilities tell the truth about the routes, readiness never hangs."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import pytest
import redis.asyncio as aioredis
from aiohttp import web
from aiohttp.test_utils import TestClient, make_mocked_request

from hermes_queue.api.ops.discovery import features as derive_features
from hermes_queue.api.ops.discovery import routed_endpoints
from hermes_queue.config import Settings
from hermes_queue.keys import Keys
from hermes_queue.providers import ProviderSettings, RouteSettings
from hermes_queue.redisio.embedded import free_port
from hermes_queue.store.migrations import LATEST_VERSION
from tests.support.inprocess import running_api
from tests.support.polling import eventually

UPSTREAM_NAMES = {
    "chat_completions",
    "responses",
    "session_model_lock",
    "health",
    "health_detailed",
    "models",
    "runs",
    "run_status",
    "run_events",
    "run_approval",
    "run_stop",
    "run_steer",
    "sessions",
    "session_create",
    "session",
    "session_update",
    "session_delete",
    "session_messages",
    "session_fork",
    "session_chat",
    "session_chat_stream",
    "session_chat_resume",
    "skills",
    "toolsets",
    # Ours (upstream names none for its jobs routes).
    "jobs",
    "job_create",
    "job",
    "job_update",
    "job_delete",
    "job_pause",
    "job_resume",
    "job_run",
}
TRUE_FEATURES = {
    "run_submission",
    "run_approval_response",
    "approval_events",
    "run_status",
    "run_events_sse",
    "run_stop",
    "run_steer",
    "session_resources",
    "session_chat",
    "session_chat_streaming",
    "session_fork",
    "tool_progress_events",
    "resumable_streams",
    "chat_completions",
    "chat_completions_streaming",
    "session_model_lock",
    "model_options",
    "responses_api",
    "responses_streaming",
    "jobs_admin",
}
FALSE_FEATURES = {
    "skills_api",
    "admin_config_rw",
    "memory_write_api",
    "audio_api",
    "realtime_voice",
    "cors",
}


def concrete(path: str) -> str:
    path = path.replace("{run_id}", "run_missing").replace("{session_id}", "sess_missing")
    return path.replace("{job_id}", "0123456789ab")


async def detailed(api: TestClient) -> dict[str, Any]:
    response = await api.get("/health/detailed")
    assert response.status == 200
    assert response.content_type == "application/json"
    return await response.json()


async def test_capabilities_document(api: TestClient, settings: Settings) -> None:
    response = await api.get("/v1/capabilities")
    assert response.status == 200
    body = await response.json()
    assert body["object"] == "hermes.api_server.capabilities"
    assert body["platform"] == "hermes-agent"
    assert body["model"] == settings.routing.model_name
    assert body["auth"] == {"type": "bearer", "required": True}
    runtime = body["runtime"]
    assert runtime["mode"] == "server_agent" and runtime["tool_execution"] == "server"
    assert runtime["split_runtime"] is False and runtime["description"]
    features = body["features"]
    assert {name for name, value in features.items() if value is True} == TRUE_FEATURES
    assert all(features[name] is False for name in FALSE_FEATURES)
    assert features["session_key_header"] == "X-Hermes-Session-Key"
    assert features["session_continuity_header"] == "X-Hermes-Session-Id"
    assert set(body["endpoints"]) == UPSTREAM_NAMES
    assert body["endpoints"]["run_status"] == {"method": "GET", "path": "/v1/runs/{run_id}"}
    assert body["endpoints"]["session_chat_resume"] == {
        "method": "GET",
        "path": "/api/sessions/{session_id}/chat/stream",
    }


async def test_every_listed_endpoint_is_routed(api: TestClient) -> None:
    endpoints = (await (await api.get("/v1/capabilities")).json())["endpoints"]
    app = api.server.app
    assert app is not None
    for name, endpoint in endpoints.items():
        method, path = endpoint["method"], concrete(endpoint["path"])
        match = await app.router.resolve(make_mocked_request(method, path, app=app))
        assert match.http_exception is None, name
        assert match.route.method == method, name
        if method == "GET":
            # Through the server too: a missing route would be the generic 404 "not_found".
            response = await api.get(path, params={"run_id": "run_missing"})
            if response.status >= 400:
                error = (await response.json())["error"]
                # The generic 404/405 is the standard envelope; the jobs API answers a string.
                generic = isinstance(error, dict) and error["code"] in (
                    "not_found",
                    "method_not_allowed",
                )
                assert not generic, (name, error)
            response.close()


def test_a_new_route_flips_its_feature(settings: Settings) -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.json_response({})

    # A bare application: every route the real one serves is already in create_app's.
    app = web.Application()
    assert derive_features(routed_endpoints(app))["responses_api"] is False
    app.router.add_post("/v1/responses", handler)
    app.router.add_post("/v1/runs/{run_id}/approval", handler)
    endpoints = routed_endpoints(app)
    assert endpoints["responses"] == {"method": "POST", "path": "/v1/responses"}
    flags = derive_features(endpoints)
    assert flags["responses_api"] is flags["responses_streaming"] is True
    assert flags["run_approval_response"] is flags["approval_events"] is True
    assert flags["skills_api"] is False


async def test_auth_required_without_key_setting(settings: Settings) -> None:
    async with running_api(settings.replace(api_key="")) as api:
        body = await (await api.get("/v1/capabilities")).json()
    assert body["auth"] == {"type": "bearer", "required": False}


@pytest.mark.parametrize("path", ["/v1/capabilities", "/v1/models", "/health/detailed"])
async def test_discovery_needs_the_key(api: TestClient, path: str) -> None:
    response = await api.get(path, headers={"Authorization": "Bearer wrong"})
    assert response.status == 401
    assert (await response.json())["error"]["code"] == "gateway_auth_failed"
    del api.session.headers["Authorization"]
    assert (await api.get(path)).status == 401
    assert (await api.get("/health")).status == 200  # liveness stays open


async def test_models(api: TestClient, settings: Settings) -> None:
    before = int(time.time())
    body = await (await api.get("/v1/models")).json()
    assert body["object"] == "list" and len(body["data"]) == 1
    model = body["data"][0]
    assert before <= model.pop("created") <= int(time.time())
    assert model == {
        "id": settings.routing.model_name,
        "object": "model",
        "owned_by": "hermes",
        "permission": [],
        "root": settings.routing.model_name,
        "parent": None,
    }


async def test_models_list_the_route_aliases(settings: Settings) -> None:
    """Each ``model_routes`` alias after the advertised name, as upstream lists them: its
    route's model as ``root``, the advertised name as ``parent``, nothing about the provider."""
    routed = settings.replace(
        providers={"p": ProviderSettings("p", "http://127.0.0.1:9/v1", api_key_env="UNSET_KEY")},
        model_routes={"fast": RouteSettings("fast", "p", "small-model")},
    )
    async with running_api(routed) as api:
        data = (await (await api.get("/v1/models")).json())["data"]
    assert [(m["id"], m["root"], m["parent"]) for m in data] == [
        (settings.routing.model_name, settings.routing.model_name, None),
        ("fast", "small-model", settings.routing.model_name),
    ]
    assert "127.0.0.1:9" not in json.dumps(data)  # nothing about the provider


async def test_ready_with_a_live_worker(api: TestClient, worker: Any, settings: Settings) -> None:
    # The worker's first heartbeat comes from its lease-keeper thread: await it, bounded.
    body = await eventually(
        lambda: detailed(api), lambda b: b["readiness"]["checks"]["workers"]["count"] >= 1
    )
    assert body["status"] == body["readiness"]["status"] == "ok"
    checks = body["readiness"]["checks"]
    assert checks["redis"]["status"] == "ok" and checks["redis"]["latency_ms"] >= 0
    # Where the store is (the SQLite file's path) and what it holds: a mistyped path shows as
    # an empty store somewhere unexpected.
    assert checks["session_store"] == {
        "status": "ok",
        "schema_version": LATEST_VERSION,
        "location": settings.store.url.removeprefix("sqlite:///"),  # the file's absolute path
        "sessions": 0,
        "messages": 0,
    }
    assert checks["workers"] == {
        "status": "ok",
        "count": 1,
        "slots": settings.worker.concurrency,
        "busy": 0,
    }
    assert body["queue"] == {"ready": 0}
    assert body["platform"] == "hermes-agent" and body["version"] and body["pid"] > 0
    assert datetime.fromisoformat(body["updated_at"]).tzinfo is not None


async def test_degraded_without_live_workers(
    api: TestClient, redis: aioredis.Redis, keys: Keys, settings: Settings
) -> None:
    # A worker whose last beat is older than one lease counts as gone.
    stale_ms = int((time.time() - settings.runs.lease_seconds - 1) * 1000)
    await redis.zadd(keys.workers, {"w-stale": stale_ms})
    await redis.hset(keys.worker("w-stale"), mapping={"slots": 4, "busy": 0})
    await api.post("/v1/runs", json={"input": "waits"})
    body = await detailed(api)
    assert body["status"] == body["readiness"]["status"] == "degraded"
    checks = body["readiness"]["checks"]
    assert checks["workers"] == {"status": "error", "count": 0, "slots": 0, "busy": 0}
    assert checks["redis"]["status"] == checks["session_store"]["status"] == "ok"
    assert body["queue"] == {"ready": 1}


async def test_detailed_counts_the_stores_sessions(api: TestClient) -> None:
    created = await api.post("/api/sessions", json={"id": "counted"})
    assert created.status in (200, 201), await created.text()
    store = (await detailed(api))["readiness"]["checks"]["session_store"]
    assert (store["sessions"], store["messages"]) == (1, 0)


async def test_store_down_is_reported_not_raised(settings: Settings) -> None:
    broken = settings.replace(
        store_url="postgresql://nobody@127.0.0.1:1/none", migrate_on_start=False
    )
    async with running_api(broken) as api:
        body = await detailed(api)
    checks = body["readiness"]["checks"]
    assert checks["session_store"]["status"] == "error"
    assert checks["session_store"]["schema_version"] is None
    # Where it is, without the user name or a password of its URL.
    assert checks["session_store"]["location"] == "postgresql://127.0.0.1:1/none"
    assert checks["session_store"]["sessions"] is None
    assert checks["redis"]["status"] == "ok"
    assert body["status"] == "degraded"


@contextlib.asynccontextmanager
async def silent_server() -> AsyncIterator[int]:
    """A TCP port that accepts connections and never answers: a hung Redis."""
    writers: list[asyncio.StreamWriter] = []

    async def accept(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        for writer in writers:
            writer.close()
        server.close()
        await server.wait_closed()


@pytest.mark.parametrize("failure", ["refused", "silent"])
async def test_redis_down_is_reported_not_raised(settings: Settings, failure: str) -> None:
    async with contextlib.AsyncExitStack() as stack:
        if failure == "refused":
            port = free_port()
        else:
            port = await stack.enter_async_context(silent_server())
        dead = settings.replace(redis_url=f"redis://127.0.0.1:{port}/0")
        api = await stack.enter_async_context(running_api(dead))
        started = time.monotonic()
        body = await detailed(api)
        assert time.monotonic() - started < 5
    checks = body["readiness"]["checks"]
    assert checks["redis"] == {
        "status": "error",
        "latency_ms": None,
        "error": checks["redis"]["error"],
    }
    assert checks["workers"]["status"] == "error" and checks["workers"]["count"] is None
    assert checks["session_store"]["status"] == "ok"
    assert body["status"] == "degraded" and body["queue"] == {"ready": None}


async def test_cors_feature_follows_the_allowed_origins(settings: Settings) -> None:
    async with running_api(settings.replace(cors_origins=("https://app.example",))) as api:
        body = await (await api.get("/v1/capabilities")).json()
    assert body["features"]["cors"] is True
