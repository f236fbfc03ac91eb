"""``/v1/runs``: start a run (enqueue), poll it, follow its events, stop it — from any replica."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from hermes_queue.api.errors import run_not_found
from hermes_queue.api.hermes.render import render_runs
from hermes_queue.api.hermes.run_bodies import RunBody
from hermes_queue.api.http.bodies import json_object
from hermes_queue.api.http.fields import session_key_header
from hermes_queue.api.http.sse import STREAM_CLOSED, open_stream, resume_cursor
from hermes_queue.api.http.tenancy import owns, tenant
from hermes_queue.api.state import STATE
from hermes_queue.api.turns.idempotency import REPLAYED_HEADER, replay_gone
from hermes_queue.api.turns.runtime_selection import select_for_body
from hermes_queue.api.turns.starter import NewTurn, RunSession
from hermes_queue.routing import RoutingConfig
from hermes_queue.runs.model import RunRecord
from hermes_queue.runs.repository import RunRepository
from hermes_queue.runs.turn_request import TurnRequest
from hermes_queue.webhooks.messages import run_delivery_id
from hermes_queue.webhooks.outbox import Outbox

MAX_RUN_ID_LENGTH = 128
REFUSED_FOR_CLIENTS = "target refused: its address is not public (and not allow-listed)"
# What GET /v1/runs/{id} shows of the delivery to the run's own webhook.
RUN_WEBHOOK_FIELDS = (
    "id",
    "state",
    "attempt_count",
    "last_status",
    "last_error",
    "next_attempt_at",
    "ended_at",
)


def parse_run_body(body: dict[str, Any], routing: RoutingConfig) -> NewTurn:
    """Validate a ``POST /v1/runs`` body (upstream-api.md §4.1) into the turn it starts."""
    fields = RunBody.parse(body)
    message, history = fields.input
    return NewTurn(
        TurnRequest(
            message,
            fields.conversation_history + history,
            fields.instructions,
            policy=fields.execution_policy,
        ),
        select_for_body(routing, body),
        # Saved to its session (the run id's when the body names none), as upstream's agent
        # saves it; its history stays the one the body sent.
        RunSession(fields.session_id, persisted=True),
        named_model=fields.model or "",
        webhook=fields.webhook,
    )


async def start_run(request: web.Request) -> web.Response:
    state = request.app[STATE]
    # Checked first, as upstream: 403 without an API key, 400 malformed; echoed on the 202.
    session_key = session_key_header(request, state.settings.api.api_key)
    # Upstream's wording for a body that is not JSON, on this endpoint.
    body = await json_object(request, state.settings.api.body_timeout_seconds, "Invalid JSON")
    turn = parse_run_body(body, state.routing)
    key_header = {"X-Hermes-Session-Key": session_key} if session_key else {}
    async with await state.idempotency.begin(
        request.headers, "runs", body, tenant=tenant(request)
    ) as idem:
        # Records are the tenant's own (turns/idempotency.py): a replay names its run.
        if idem.replay_of is not None:  # nothing is admitted or created again
            return await _replay_start(state.runs, idem.replay_of, key_header)
        started = await state.turns.enqueue_turn(turn, tenant=tenant(request), created=idem.record)
    answer: dict[str, Any] = {"run_id": started.run_id, "status": "started"}
    if idem.used:
        answer["replayed"] = False
    return web.json_response(answer, status=202, headers=key_header)


async def _replay_start(runs: RunRepository, run_id: str, headers: dict[str, str]) -> web.Response:
    """The run an earlier request with this Idempotency-Key started, with its current status."""
    record = await runs.get(run_id)
    if record is None:
        raise replay_gone(run_id)
    return web.json_response(
        {"run_id": run_id, "status": record.status, "replayed": True},
        status=202,
        headers={**headers, REPLAYED_HEADER: "true"},
    )


async def _load(request: web.Request, runs: RunRepository) -> RunRecord:
    run_id = request.match_info["run_id"]
    record = None
    if len(run_id) <= MAX_RUN_ID_LENGTH:
        record = await runs.get(run_id)
    # Another tenant's run is not found, as a run that does not exist.
    if record is None or not owns(request, record.tenant):
        raise run_not_found(run_id[:MAX_RUN_ID_LENGTH])
    return record


async def get_run(request: web.Request) -> web.Response:
    state = request.app[STATE]
    record = await _load(request, state.runs)
    body = record.to_status()
    if record.webhook:  # ours (not upstream's): the delivery of its end to its webhook
        body["webhook"] = await _webhook_state(state.webhooks, record)
    return web.json_response(body)


async def _webhook_state(outbox: Outbox, record: RunRecord) -> dict[str, Any]:
    """Where the delivery of the run's end to its own webhook is: ``awaiting_end`` while the
    run is live, then ``pending`` (queued, or retrying), ``delivered``, ``dead`` or ``gone``."""
    delivery = await outbox.run_delivery(record.run_id)
    if delivery is None:
        return {
            "id": run_delivery_id(record.run_id),
            "state": "pending" if record.terminal else "awaiting_end",
            "attempt_count": 0,
        }
    shown = delivery.to_json()
    if delivery.attempts and delivery.attempts[-1].outcome == "refused":
        # Which address a name resolved to stays with the operator (GET
        # /v1/webhooks/deliveries): told to whoever started the run, it would map internal
        # names to addresses.
        shown["last_error"] = REFUSED_FOR_CLIENTS
    return {name: shown[name] for name in RUN_WEBHOOK_FIELDS}


async def run_events(request: web.Request) -> web.StreamResponse:
    cursor = resume_cursor(request)
    run_id = request.match_info["run_id"]
    if len(run_id) > MAX_RUN_ID_LENGTH:
        raise run_not_found(run_id[:MAX_RUN_ID_LENGTH])
    feed = request.app[STATE].feed
    # Run record, cursor check and first replay page: one round trip.
    found = await feed.prefetch(run_id, cursor)
    record = found.record
    if record is None or not owns(request, record.tenant):
        raise run_not_found(run_id)
    at_end = found.at_end()
    response = await open_stream(request)
    if at_end and record.terminal:
        await response.write_eof(STREAM_CLOSED)
    else:
        await feed.pump(
            request,
            response,
            record.run_id,
            cursor,
            render_runs,
            page=found.page,
            end=STREAM_CLOSED,
        )
    return response


async def stop_run(request: web.Request) -> web.Response:
    runs = request.app[STATE].runs
    record = await _load(request, runs)
    if record.terminal:
        return web.json_response(record.to_status())
    outcome = await runs.request_stop(record.run_id)
    if not outcome.found:
        raise run_not_found(record.run_id)
    if outcome.status not in ("stopping", "cancelled"):
        refreshed = await runs.get(record.run_id)
        if refreshed is not None:
            return web.json_response(refreshed.to_status())
    return web.json_response({"run_id": record.run_id, "status": outcome.status})
