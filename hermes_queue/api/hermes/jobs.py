"""``/api/jobs``: upstream's cron job admin, on the queue (upstream-api.md §2, the jobs row).

Same routes, bodies, job object and ``{"error": "<string>"}`` envelope as upstream; auth,
CORS and the body limit as on every route. Jobs live in the SQL store, so any replica serves
any job; workers fire them (``schedules/scheduler.py``). Reads first copy the end of finished
fires into their records, so ``last_run`` and ``runs`` are current even between scheduler
passes. ``POST …/run`` creates the run here and now (and answers its ``run_id`` beside the job).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from redis.exceptions import RedisError

from hermes_queue.api.errors import ApiError
from hermes_queue.api.http.bodies import read_body
from hermes_queue.api.http.json_body import BodyError, decode
from hermes_queue.api.http.tenancy import owns, tenant
from hermes_queue.api.state import STATE
from hermes_queue.schedules.definitions import (
    JobInputError,
    job_json,
    parse_create,
    patch_changes,
    pause_changes,
    resume_changes,
)
from hermes_queue.store.base import StoreError
from hermes_queue.store.jobs import JobRow

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.Response]]
JOB_ID = re.compile(r"[a-f0-9]{12}")
TRUE_QUERY = frozenset({"true", "1"})
RECENT_RUNS = 20


def _error(message: str, status: int, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response({"error": message}, status=status, headers=headers)


def jobs_endpoint(handler: Handler) -> Handler:
    """Upstream's envelope for this API: refusals, missing jobs and backend failures become
    ``{"error": "…"}`` (no traceback, no driver text). ``ApiError`` (429 backpressure) passes."""

    @functools.wraps(handler)
    async def wrapped(request: web.Request) -> web.Response:
        try:
            return await handler(request)
        except JobInputError as exc:
            return _error(str(exc), exc.status)
        except ApiError:
            raise
        except (StoreError, RedisError, OSError) as exc:
            log.warning("jobs API: backend unavailable (%s: %s)", type(exc).__name__, exc)
            unavailable = "The job store is unavailable; retry shortly"
            return _error(unavailable, 503, {"Retry-After": "1"})
        except Exception:
            log.exception("jobs API: unhandled error serving %s %s", request.method, request.path)
            return _error("Internal server error", 500)

    return wrapped


def _job_id(request: web.Request) -> str:
    job_id = request.match_info["job_id"]
    if not JOB_ID.fullmatch(job_id):
        # Upstream audits these: a malformed id is a probe more often than a typo.
        log.warning("jobs API rejected invalid job_id %r from %s", job_id[:64], request.remote)
        raise JobInputError("Invalid job ID format")
    return job_id


async def _body(request: web.Request) -> dict[str, Any]:
    timeout = request.app[STATE].settings.api.body_timeout_seconds
    try:
        body = decode(await read_body(request, timeout))
    except BodyError as exc:
        raise JobInputError("Invalid JSON body" if exc.syntax else exc.message) from None
    if not isinstance(body, dict):
        raise JobInputError("Request body must be a JSON object")
    return body


async def _load(request: web.Request) -> JobRow:
    """The request's tenant's job; another tenant's is not found, as one that does not exist."""
    job = await request.app[STATE].store.get_job(_job_id(request))
    if job is None or not owns(request, job.tenant):
        raise JobInputError("Job not found", 404)
    return job


def _answer(request: web.Request, job: JobRow | None, **extra: Any) -> web.Response:
    if job is None:  # deleted meanwhile
        raise JobInputError("Job not found", 404)
    tz = request.app[STATE].firing.tz
    return web.json_response({"job": job_json(job, tz), **extra})


@jobs_endpoint
async def list_jobs(request: web.Request) -> web.Response:
    include_disabled = request.query.get("include_disabled", "").lower() in TRUE_QUERY
    firing = request.app[STATE].firing
    await firing.settle_open()
    jobs = await request.app[STATE].store.list_jobs(
        include_disabled=include_disabled, tenant=tenant(request)
    )
    return web.json_response({"jobs": [job_json(job, firing.tz) for job in jobs]})


@jobs_endpoint
async def create_job(request: web.Request) -> web.Response:
    body = await _body(request)
    origin = {"platform": "api_server", "chat_id": "api", "source_ip": request.remote}
    tz = request.app[STATE].firing.tz
    job = parse_create(body, now=time.time(), tz=tz, origin=origin)
    job = dataclasses.replace(job, tenant=tenant(request))  # its session and runs: the same
    return _answer(request, await request.app[STATE].store.create_job(job))


@jobs_endpoint
async def get_job(request: web.Request) -> web.Response:
    store, firing = request.app[STATE].store, request.app[STATE].firing
    job_id = (await _load(request)).id
    await firing.settle(await store.job_runs(job_id, RECENT_RUNS))
    job = await store.get_job(job_id)
    if job is None:
        raise JobInputError("Job not found", 404)
    runs = await store.job_runs(job_id, RECENT_RUNS)
    return web.json_response({"job": job_json(job, firing.tz, runs)})


@jobs_endpoint
async def update_job(request: web.Request) -> web.Response:
    job = await _load(request)
    tz = request.app[STATE].firing.tz
    changes = patch_changes(job, await _body(request), now=time.time(), tz=tz)
    return _answer(request, await request.app[STATE].store.update_job(job.id, changes))


@jobs_endpoint
async def delete_job(request: web.Request) -> web.Response:
    job = await _load(request)
    if not await request.app[STATE].store.delete_job(job.id):
        raise JobInputError("Job not found", 404)
    return web.json_response({"ok": True})


@jobs_endpoint
async def pause_job(request: web.Request) -> web.Response:
    job = await _load(request)
    changes = pause_changes(job, time.time())
    return _answer(request, await request.app[STATE].store.update_job(job.id, changes))


@jobs_endpoint
async def resume_job(request: web.Request) -> web.Response:
    job = await _load(request)
    changes = resume_changes(job, time.time(), request.app[STATE].firing.tz)
    return _answer(request, await request.app[STATE].store.update_job(job.id, changes))


@jobs_endpoint
async def run_job(request: web.Request) -> web.Response:
    """Fire now; the schedule, its next tick and ``repeat`` are left as they were."""
    job = await _load(request)
    await request.app[STATE].backpressure.admit(job.tenant)  # 429 before anything is written
    run_id = await request.app[STATE].firing.fire_now(job, time.time())
    return _answer(request, await request.app[STATE].store.get_job(job.id), run_id=run_id)
