"""Discovery documents (upstream-api.md §5): health, capabilities, models and readiness.

Clients (hermes-webui, desktop apps) read ``/v1/capabilities`` to decide which UI to offer, so a
claim this server cannot honour breaks them. Upstream keeps its endpoint list and feature flags
by hand and they drift from the routes it really serves. Here both are derived from the app's
router at request time: an endpoint is listed only if a route for it is registered, and a
feature tied to a route flips to true the moment that route is added. ``skills_api`` also
needs a worker to have published its backend's catalog (``catalog.py``), read per request.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from hermes_queue import __version__
from hermes_queue.api.ops.unsupported import is_not_implemented
from hermes_queue.api.state import STATE
from hermes_queue.catalog import CachedCatalog
from hermes_queue.keyguard import OPEN_WARNING
from hermes_queue.queueview.snapshot import live_workers
from hermes_queue.store import store_location
from hermes_queue.store.migrations import LATEST_VERSION

log = logging.getLogger(__name__)

PLATFORM = "hermes-agent"
# Each readiness check gets this long; a blackholed Redis or database must not hang a probe.
CHECK_TIMEOUT_SECONDS = 2.0

# (method, canonical path) -> upstream endpoint name (upstream-api.md §5.1). Upstream names for
# routes we do not serve yet are here on purpose: adding the route is all it takes to list it.
# ``/v1/health`` is upstream's mirror of ``/health`` and has no name of its own.
ENDPOINT_NAMES: dict[tuple[str, str], str] = {
    ("GET", "/health"): "health",
    ("GET", "/health/detailed"): "health_detailed",
    ("GET", "/v1/models"): "models",
    ("GET", "/api/model/options"): "model_options",
    ("POST", "/v1/chat/completions"): "chat_completions",
    ("POST", "/v1/responses"): "responses",
    ("GET", "/v1/skills"): "skills",
    ("GET", "/v1/toolsets"): "toolsets",
    ("POST", "/v1/runs"): "runs",
    ("GET", "/v1/runs/{run_id}"): "run_status",
    ("GET", "/v1/runs/{run_id}/events"): "run_events",
    ("POST", "/v1/runs/{run_id}/approval"): "run_approval",
    ("POST", "/v1/runs/{run_id}/stop"): "run_stop",
    ("POST", "/v1/runs/{run_id}/steer"): "run_steer",
    ("GET", "/api/sessions"): "sessions",
    ("POST", "/api/sessions"): "session_create",
    ("GET", "/api/sessions/{session_id}"): "session",
    ("PATCH", "/api/sessions/{session_id}"): "session_update",
    ("DELETE", "/api/sessions/{session_id}"): "session_delete",
    ("GET", "/api/sessions/{session_id}/messages"): "session_messages",
    ("POST", "/api/sessions/{session_id}/fork"): "session_fork",
    ("POST", "/api/sessions/{session_id}/chat"): "session_chat",
    ("POST", "/api/sessions/{session_id}/chat/stream"): "session_chat_stream",
    ("GET", "/api/sessions/{session_id}/chat/stream"): "session_chat_resume",
    ("POST", "/api/sessions/{session_id}/model"): "session_model_lock",
    # Ours: upstream lists no names for its jobs routes.
    ("GET", "/api/jobs"): "jobs",
    ("POST", "/api/jobs"): "job_create",
    ("GET", "/api/jobs/{job_id}"): "job",
    ("PATCH", "/api/jobs/{job_id}"): "job_update",
    ("DELETE", "/api/jobs/{job_id}"): "job_delete",
    ("POST", "/api/jobs/{job_id}/pause"): "job_pause",
    ("POST", "/api/jobs/{job_id}/resume"): "job_resume",
    ("POST", "/api/jobs/{job_id}/run"): "job_run",
    # VN names. The 501 placeholders in unsupported.py route these paths but are never listed.
    ("POST", "/v1/browser-control/register"): "browser_control_register",
    ("GET", "/v1/browser-control/ws"): "browser_control_ws",
    ("POST", "/v1/artifacts/upload"): "artifact_upload",
    ("GET", "/v1/artifacts/download/{artifact_id}"): "artifact_download",
}

# Feature -> the endpoints that must all be routed for it to be true. Streaming variants share
# their route with the non-streaming call (upstream's ``stream: true``), so whoever adds such a
# route owes both. Approval events only make sense with a way to answer them.
ROUTE_FEATURES: dict[str, tuple[str, ...]] = {
    "chat_completions": ("chat_completions",),
    "chat_completions_streaming": ("chat_completions",),
    "responses_api": ("responses",),
    "responses_streaming": ("responses",),
    "run_submission": ("runs",),
    "run_status": ("run_status",),
    "run_events_sse": ("run_events",),
    "run_stop": ("run_stop",),
    "run_approval_response": ("run_approval",),
    "run_steer": ("run_steer",),
    "approval_events": ("run_approval",),
    "session_resources": (
        "sessions",
        "session_create",
        "session",
        "session_update",
        "session_delete",
        "session_messages",
    ),
    "session_chat": ("session_chat",),
    "session_chat_streaming": ("session_chat_stream",),
    "session_fork": ("session_fork",),
    "session_model_lock": ("session_model_lock",),
    # Bodies take model_options wherever a runtime can be chosen; the lock route marks that.
    "model_options": ("session_model_lock",),
    "jobs_admin": (
        "jobs",
        "job_create",
        "job",
        "job_update",
        "job_delete",
        "job_pause",
        "job_resume",
        "job_run",
    ),
}

# Upstream also reports these as false; nothing here implements them and no route implies them.
UNSUPPORTED_FEATURES = (
    "admin_config_rw",
    "memory_write_api",
    "audio_api",
    "realtime_voice",
)

RUNTIME_DESCRIPTION = (
    "Agent turns run server-side on queue workers; tools execute on the worker. Run and session "
    "event streams are stored in Redis and resumable from any replica with Last-Event-ID."
)


def routed_endpoints(app: web.Application) -> dict[str, dict[str, str]]:
    """The upstream-named endpoints this app really serves, read from its router.

    Routes whose handler only answers 501 (``unsupported.py``) are skipped: they exist so that
    upstream clients get a clear error, not to claim the endpoint.
    """
    found: dict[str, dict[str, str]] = {}
    for route in app.router.routes():
        resource = route.resource
        if resource is None or is_not_implemented(route.handler):
            continue
        name = ENDPOINT_NAMES.get((route.method, resource.canonical))
        if name is not None:
            found[name] = {"method": route.method, "path": resource.canonical}
    return found


def features(endpoints: dict[str, Any], *, catalog: bool = False) -> dict[str, Any]:
    """Feature flags that follow from ``endpoints`` plus the few facts no route expresses;
    ``catalog``: whether a worker published its backend's skills and toolsets."""
    flags: dict[str, Any] = {
        name: all(e in endpoints for e in needs) for name, needs in ROUTE_FEATURES.items()
    }
    # /v1/skills always answers, but only a published catalog makes a skills UI worth offering.
    flags["skills_api"] = catalog and "skills" in endpoints
    streams = {"run_events", "session_chat_stream", "session_chat_resume"} & endpoints.keys()
    # Tool progress rides on every event stream we serve (tool.started / tool.completed).
    flags["tool_progress_events"] = bool(streams & {"run_events", "session_chat_stream"})
    # Ours: every stream frame carries an id and can be resumed (Last-Event-ID / ?after=).
    flags["resumable_streams"] = bool(streams)
    flags.update(dict.fromkeys(UNSUPPORTED_FEATURES, False))
    # Session continuity via X-Hermes-Session-Id is a /v1/chat/completions feature.
    completions = "chat_completions" in endpoints
    flags["session_continuity_header"] = "X-Hermes-Session-Id" if completions else None
    # Session chat and chat completions validate and echo X-Hermes-Session-Key.
    chat = {"session_chat", "session_chat_stream", "chat_completions"} & endpoints.keys()
    flags["session_key_header"] = "X-Hermes-Session-Key" if chat else None
    return flags


async def health(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok", "platform": PLATFORM, "version": __version__})


async def ready(request: web.Request) -> web.Response:
    """Whether a load balancer should send this replica new work, asked without the key: 200
    ``ready`` while it serves, 503 ``draining`` from the moment it was told to stop
    (``api/drain.py``: it still serves what reaches it meanwhile). Touches no dependency: in a
    Redis outage every replica would fail the check at once and the balancer would have no
    backend left, whereas the replicas themselves answer 503 ``redis_unavailable`` with
    ``Retry-After``, and serve what needs no Redis."""
    if request.app[STATE].drain.draining:
        return web.json_response({"status": "draining"}, status=503)
    return web.json_response({"status": "ready"})


async def _catalog_published(catalog: CachedCatalog) -> bool:
    """Whether a worker's catalog is in Redis. Capabilities must answer even when Redis cannot
    (clients read it before anything else), so a failed or slow read counts as no catalog."""
    try:
        async with asyncio.timeout(CHECK_TIMEOUT_SECONDS):
            return await catalog.get() is not None
    except Exception as exc:
        log.warning("capabilities: backend catalog unavailable (%r); skills_api false", exc)
        return False


async def capabilities(request: web.Request) -> web.Response:
    state = request.app[STATE]
    settings = state.settings
    endpoints = routed_endpoints(request.app)
    catalog = "skills" in endpoints and await _catalog_published(state.catalog)
    return web.json_response(
        {
            "object": "hermes.api_server.capabilities",
            "platform": PLATFORM,
            "model": settings.routing.model_name,
            "auth": {"type": "bearer", "required": bool(settings.api.api_key)},
            "runtime": {
                "mode": "server_agent",
                "tool_execution": "server",
                "split_runtime": False,
                "description": RUNTIME_DESCRIPTION,
            },
            # Upstream's ``cors``: whether any browser origin is allowed (cors_middleware).
            "features": {
                **features(endpoints, catalog=catalog),
                "cors": bool(settings.api.cors_origins),
            },
            "endpoints": endpoints,
        }
    )


async def models(request: web.Request) -> web.Response:
    """OpenAI model list: the advertised name, then each ``model_routes`` alias (its ``root``
    the route's model, its ``parent`` the advertised name), as upstream lists them. Provider
    details and keys never leave."""
    settings = request.app[STATE].settings
    name, now = settings.routing.model_name, int(time.time())

    def entry(model_id: str, root: str, parent: str | None) -> dict[str, Any]:
        return {
            "id": model_id,
            "object": "model",
            "created": now,
            "owned_by": "hermes",
            "permission": [],
            "root": root,
            "parent": parent,
        }

    data = [entry(name, name, None)]
    data += [
        entry(alias, route.model or alias, name)
        for alias, route in settings.routing.model_routes.items()
        if alias != name
    ]
    return web.json_response({"object": "list", "data": data})


Check = Callable[[], Awaitable[dict[str, Any]]]


async def _guarded(name: str, check: Check, *fields: str) -> dict[str, Any]:
    """Run one check under its own timeout, turning any failure into ``status: error``.

    A readiness probe must answer even (above all) when a backend is down, so failures stay
    inside the check instead of reaching the error middleware, which would answer 503. The
    check's ``fields`` are still present (null) so dashboards need no second schema.
    """
    try:
        async with asyncio.timeout(CHECK_TIMEOUT_SECONDS):
            return await check()
    except Exception as exc:
        log.warning("readiness check %s failed: %r", name, exc)
        # The class name only: messages may carry hosts or database names.
        reason = "timeout" if isinstance(exc, TimeoutError) else type(exc).__name__
        return {"status": "error", **dict.fromkeys(fields), "error": reason}


async def health_detailed(request: web.Request) -> web.Response:
    state = request.app[STATE]
    settings, redis, keys = state.settings, state.redis, state.keys
    location = store_location(settings.store.url, settings.store.schema)

    async def check_redis() -> dict[str, Any]:
        started = time.perf_counter()
        await redis.ping()
        latency = round((time.perf_counter() - started) * 1000, 2)
        return {"status": "ok", "latency_ms": latency}

    async def check_store() -> dict[str, Any]:
        store = state.store
        await store.ping()
        version = await store.schema_version()
        # A reachable but unmigrated database still fails every session request.
        status = "ok" if version >= LATEST_VERSION else "error"
        # Where it is and what it holds: an empty store behind a mistyped path shows here.
        counts = await store.row_counts() if version else {"sessions": 0, "messages": 0}
        return {"status": status, "schema_version": version, "location": location, **counts}

    async def check_workers() -> dict[str, Any]:
        workers = await live_workers(redis, keys, settings.runs.lease_seconds)
        slots, busy = sum(w.slots for w in workers), sum(w.busy for w in workers)
        status = "ok" if workers else "error"
        return {"status": status, "count": len(workers), "slots": slots, "busy": busy}

    async def check_queue() -> dict[str, Any]:
        async with redis.pipeline(transaction=False) as pipe:  # a round trip per node
            for shard in keys.shard_ids:
                pipe.zcard(keys.queue_at(shard))
            ready = await pipe.execute()
        return {"status": "ok", "ready": sum(ready)}

    redis_check, store_check, workers_check, queue_check = await asyncio.gather(
        _guarded("redis", check_redis, "latency_ms"),
        _guarded("session_store", check_store, "schema_version", "sessions", "messages"),
        _guarded("workers", check_workers, "count", "slots", "busy"),
        _guarded("queue", check_queue, "ready"),
    )
    store_check.setdefault("location", location)  # known even when the store is not
    checks = {"redis": redis_check, "session_store": store_check, "workers": workers_check}
    status = "ok" if all(c["status"] == "ok" for c in checks.values()) else "degraded"
    return web.json_response(
        {
            "status": status,
            "readiness": {"status": status, "checks": checks},
            "platform": PLATFORM,
            "version": __version__,
            "updated_at": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
            "pid": os.getpid(),
            "queue": {"ready": queue_check.get("ready")},
            # An API without a key is open to anyone who reaches it (keyguard.OPEN_WARNING).
            "warnings": [] if settings.api.api_key else [OPEN_WARNING],
        }
    )
