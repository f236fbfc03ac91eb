"""``/v1/responses`` (upstream-api.md §2.3, §3.4): each response a queued run, stored in SQL.

Upstream keeps stored responses and conversation names in one host's SQLite file; here they
live in the shared session store, so chaining, ``GET`` and resume work on any replica.

Storing: with ``store`` (the default) a ``queued`` row is written before the run is enqueued,
and the final object when the run ends (``openai/response_records.py``).

A failed non-stream response answers 500 (the JSON envelope with the response id), because
docs/upstream-api.md does not record upstream's status for it; the stored object says ``failed``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from hermes_queue.api.errors import ApiError
from hermes_queue.api.http.bodies import json_object
from hermes_queue.api.http.fields import session_key_header
from hermes_queue.api.http.sse import open_stream
from hermes_queue.api.http.tenancy import owns, tenant
from hermes_queue.api.openai.bodies import ResponseBody
from hermes_queue.api.openai.response_records import StoredResponses
from hermes_queue.api.openai.responses_render import ResponseMeta, stream_renderer
from hermes_queue.api.state import STATE, ApiState
from hermes_queue.api.turns.idempotency import REPLAYED_HEADER, replay_gone
from hermes_queue.api.turns.runtime_selection import select_for_body
from hermes_queue.api.turns.starter import Enqueued, NewTurn, RunSession, turn_headers
from hermes_queue.booleans import coerce_bool
from hermes_queue.runs.turn_request import ResponseSettings, TurnRequest
from hermes_queue.store import ResponseRow

TRUNCATE_TO = 100  # truncation "auto": the last 100 history items, as upstream


@dataclass
class Plan:
    """The turn's content and history, from the body and the response it continues."""

    message: Any
    history: list[dict[str, Any]]
    instructions: str | None
    previous: ResponseRow | None
    conversation: str | None


def not_found(response_id: str, code: str | None = None) -> ApiError:
    return ApiError(404, code, f"Response not found: {response_id}")


async def _plan(state: ApiState, fields: ResponseBody, tenant: str) -> Plan:
    """``tenant``'s: a ``previous_response_id`` or conversation of another tenant's is not
    found (a chain never crosses tenants)."""
    responses, store = StoredResponses.of(state), state.store
    messages, system = fields.input
    instructions = fields.instructions
    previous_id, conversation = fields.previous_response_id, fields.conversation
    if previous_id and conversation:
        raise ApiError(
            400,
            "conflicting_history",
            "Cannot use both 'conversation' and 'previous_response_id'",
            param="conversation",
        )
    previous: ResponseRow | None = None
    if previous_id:
        previous = await responses.load(previous_id, tenant)
        if previous is None:
            raise ApiError(404, "response_not_found", f"Previous response not found: {previous_id}")
    elif conversation:
        head = await store.conversation_head(conversation, tenant)
        previous = await responses.load(head, tenant) if head else None
    history: list[dict[str, Any]] = []
    if fields.conversation_history is not None:
        history = fields.conversation_history
    elif previous is not None:
        history = list(previous.transcript)
    if instructions is None and previous is not None:
        instructions = previous.instructions
    if system:
        instructions = "\n\n".join([*([instructions] if instructions else []), *system])
    history += messages[:-1]
    if fields.truncation == "auto":
        history = history[-TRUNCATE_TO:]
    return Plan(messages[-1]["content"], history, instructions, previous, conversation)


async def parse_response_body(state: ApiState, body: dict[str, Any], tenant: str) -> NewTurn:
    """The turn a ``POST /v1/responses`` body starts for ``tenant``, with its history
    resolved."""
    fields = ResponseBody.parse(body)
    plan = await _plan(state, fields, tenant)
    background, stored = fields.background, fields.store
    if background and not stored:
        raise ApiError(400, "invalid_request", "background requires store=true", param="store")
    settings = ResponseSettings(
        created_at=int(time.time()),
        model=fields.model or state.settings.routing.model_name,
        previous_response_id=plan.previous.id if plan.previous else None,
        conversation=plan.conversation,
        store=stored,
        background=background,
    )
    return NewTurn(
        TurnRequest(plan.message, plan.history, plan.instructions, response=settings),
        select_for_body(state.routing, body),
        # A chained response continues its predecessor's session.
        RunSession(plan.previous.session_id if plan.previous else str(uuid.uuid4())),
        named_model=settings.model,
        webhook=fields.webhook,
    )


async def create_response(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    responses = StoredResponses.of(state)
    session_key = session_key_header(request, state.settings.api.api_key)
    body = await json_object(request, state.settings.api.body_timeout_seconds)
    turn = await parse_response_body(state, body, tenant(request))
    stream = coerce_bool(body.get("stream"), False)
    if stream and turn.request.response is not None:  # its stored object is the stream's
        settings = dataclasses.replace(turn.request.response, stream=True)
        turn = dataclasses.replace(
            turn, request=dataclasses.replace(turn.request, response=settings), openai_stream=True
        )
    replayed: dict[str, str] = {}
    enqueued: Enqueued | None = None  # None: a retry of an earlier request (a replay)
    async with await state.idempotency.begin(
        request.headers, "responses", body, tenant=tenant(request)
    ) as idem:
        if idem.replay_of is None:
            queued = responses.queued(turn.request, tenant(request))
            enqueued = await state.turns.enqueue_turn(
                turn, tenant=tenant(request), beside=queued, created=idem.record
            )
    if enqueued is not None:
        run_id, session_id, turn_request = enqueued.run_id, enqueued.session_id, turn.request
    else:
        assert idem.replay_of is not None  # only a replay enqueues nothing
        run_id = idem.replay_of
        replayed[REPLAYED_HEADER] = "true"
        record = await state.runs.get(run_id)
        if record is None:
            raise replay_gone(run_id)
        session_id, turn_request = record.session_id, record.request
    headers = {**turn_headers(session_id, run_id, session_key), **replayed}
    info = ResponseMeta.from_request(run_id, turn_request)
    watcher = responses.watch(run_id) if info.store else None
    if info.background:
        return web.json_response(info.envelope("queued"), headers=headers)
    if stream:
        response = await open_stream(request, headers)
        await state.feed.pump(
            request, response, run_id, None, stream_renderer(info), created=enqueued
        )
        return response
    final = await (asyncio.shield(watcher) if watcher else responses.settle(run_id))
    if final["status"] == "failed":
        error = final["error"] or {}
        raise ApiError(
            500,
            "response_failed",
            str(error.get("message") or "agent error"),
            headers=headers,
            extra={"response_id": final["id"]},
        )
    return web.json_response(final, headers=headers)


def _starting_after(request: web.Request) -> int:
    """The resume cursor: ``?starting_after=N``, else ``Last-Event-ID`` (a Responses frame's
    ``id:`` is its sequence number)."""
    raw = request.query.get("starting_after")
    if raw is None or raw == "":
        raw = request.headers.get("Last-Event-ID", "").strip()
    if raw == "":
        return -1
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise ApiError(
            400,
            "invalid_starting_after",
            "'starting_after' must be a non-negative integer sequence number",
            param="starting_after",
        )
    return value


async def get_response(request: web.Request) -> web.StreamResponse:
    response_id = request.match_info["response_id"]
    streaming = coerce_bool(request.query.get("stream"), False)
    after = _starting_after(request) if streaming else -1
    state = request.app[STATE]
    row = await StoredResponses.of(state).load(response_id, tenant(request))
    if row is None:
        raise not_found(response_id)
    if not streaming:
        return web.json_response(row.response)
    record = await state.runs.get(row.run_id) if row.run_id else None
    if record is None:
        raise ApiError(
            404, "response_stream_expired", f"The event stream of {response_id} has expired"
        )
    meta = ResponseMeta.from_request(record.run_id, record.request)
    response = await open_stream(request, {"X-Hermes-Run-Id": record.run_id})
    await state.feed.pump(request, response, record.run_id, None, stream_renderer(meta, after))
    return response


async def delete_response(request: web.Request) -> web.Response:
    response_id = request.match_info["response_id"]
    store = request.app[STATE].store
    row = await store.get_response(response_id)
    # Another tenant's is not found, as one that does not exist.
    if row is None or not owns(request, row.tenant):
        raise not_found(response_id)
    if not await store.delete_response(response_id):
        raise not_found(response_id)
    return web.json_response({"id": response_id, "object": "response", "deleted": True})
