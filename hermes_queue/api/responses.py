"""``/v1/responses`` (HERMES_API §2.3, §3.4): each response a queued run, stored in SQL.

Upstream keeps stored responses and conversation names in one host's SQLite file; here they
live in the shared session store, so chaining, ``GET`` and resume work on any replica.

Storing: with ``store`` (the default) a ``queued`` row is written before the run is enqueued,
and the final object is written when the run ends by :func:`settle`, which replays the run's
canonical events through :class:`ResponseFold`. The creating process runs ``settle`` in a
watcher task that outlives the client's connection; should that process die first, the next
``GET`` (or a chained request) on any replica finds the run terminal and settles it itself.
Re-settling is harmless (an upsert of the same object), so no coordination is needed.

A failed non-stream response answers 500 (the JSON envelope with the response id), because
HERMES_API does not record upstream's status for it; the stored object says ``failed``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from hermes_queue.api import idempotency
from hermes_queue.api.appkeys import HUB, RUNS, SETTINGS, STORE
from hermes_queue.api.content import flatten_text, has_visible_payload, normalize_content
from hermes_queue.api.errors import ApiError
from hermes_queue.api.operations import admit
from hermes_queue.api.responses_render import (
    FINAL_RESPONSE_STATUSES,
    ResponseFold,
    ResponseMeta,
    response_id_for,
    stream_renderer,
)
from hermes_queue.api.runtime_selection import select_for_body
from hermes_queue.api.sse import open_stream, pump_run_events
from hermes_queue.api.validation import (
    json_object,
    message_list,
    optional_string,
    session_key_header,
)
from hermes_queue.booleans import coerce_bool
from hermes_queue.runs.repository import new_run_id
from hermes_queue.runs.turn_request import ResponseSettings, TurnRequest
from hermes_queue.store import ResponseRow

WATCHERS: web.AppKey[set[asyncio.Task[Any]]] = web.AppKey("response_watchers")
TRUNCATE_TO = 100  # truncation "auto": the last 100 history items, as upstream


@dataclass
class Plan:
    """A validated request: the turn, its history and where that history came from."""

    message: Any
    history: list[dict[str, Any]]
    instructions: str | None
    previous: ResponseRow | None
    conversation: str | None


def parse_input(value: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """``input`` as messages (the last one this turn's user message) and any system texts."""
    if isinstance(value, str) and value.strip():
        return [{"role": "user", "content": value}], []
    if not isinstance(value, list) or not value:
        raise ApiError(400, "missing_input", "Missing 'input' field", param="input")
    messages: list[dict[str, Any]] = []
    system: list[str] = []
    for index, item in enumerate(value):
        where = f"input[{index}]"
        if isinstance(item, str):
            messages.append({"role": "user", "content": item})
            continue
        role = item.get("role") if isinstance(item, dict) else None
        if role in ("system", "developer"):
            system.append(flatten_text(item.get("content")))
        elif role in ("user", "assistant"):
            content = normalize_content(item.get("content"), f"{where}.content")
            messages.append({"role": role, "content": content})
        else:
            raise ApiError(
                400,
                "invalid_input",
                f"{where} must be a string or a message with role user or assistant",
                param=where,
            )
    if not messages or messages[-1]["role"] != "user":
        raise ApiError(400, "missing_input", "No user message found in input", param="input")
    if not has_visible_payload(messages[-1]["content"]):
        raise ApiError(400, "missing_input", "No user message found in input", param="input")
    return messages, [text for text in system if text]


def not_found(response_id: str, code: str | None = None) -> ApiError:
    return ApiError(404, code, f"Response not found: {response_id}")


async def settle(app: web.Application, run_id: str) -> dict[str, Any]:
    """Replay the run to its terminal event; store the final object (with ``store``)."""
    record = await app[RUNS].get(run_id)
    if record is None:
        raise ApiError(500, "internal_error", f"Run {run_id} of this response has expired")
    meta = ResponseMeta.from_request(run_id, record.request)
    fold = ResponseFold(meta)
    async with app[HUB].subscribe(run_id, None) as subscription:
        async for event in subscription:
            fold.feed(event)
            if event.terminal:
                break
    final = fold.snapshot()
    if meta.store and final["status"] in FINAL_RESPONSE_STATUSES:
        turn = record.request
        user = {"role": "user", "content": turn.message}
        transcript = [*turn.history, user, *fold.messages]
        store = app[STORE]
        await store.put_response(
            ResponseRow(
                id=meta.id,
                run_id=run_id,
                session_id=record.session_id,
                status=final["status"],
                response=final,
                transcript=transcript,
                previous_response_id=meta.previous_response_id,
                conversation=meta.conversation,
                model=meta.model,
                instructions=meta.instructions,
                created_at=float(meta.created_at),
            )
        )
        if meta.conversation and final["status"] == "completed":
            await store.set_conversation_head(meta.conversation, meta.id)
    return final


def _watch(app: web.Application, run_id: str) -> asyncio.Task[dict[str, Any]]:
    """Settle the run in the background, whether or not its client stays."""
    task = asyncio.create_task(settle(app, run_id))
    app[WATCHERS].add(task)
    task.add_done_callback(app[WATCHERS].discard)
    return task


async def load(app: web.Application, response_id: str) -> ResponseRow | None:
    """The stored response, settled first if its run has ended (from any replica)."""
    row = await app[STORE].get_response(response_id)
    if row is None or row.status in FINAL_RESPONSE_STATUSES or not row.run_id:
        return row
    record = await app[RUNS].get(row.run_id)
    if record is None:
        return row
    if record.terminal:
        await settle(app, row.run_id)
        return await app[STORE].get_response(response_id)
    if record.status != "queued" and row.response.get("status") == "queued":
        live = {**row.response, "status": "in_progress"}
        return dataclasses.replace(row, status="in_progress", response=live)
    return row


async def _plan(request: web.Request, body: dict[str, Any]) -> Plan:
    messages, system = parse_input(body.get("input"))
    instructions = optional_string(body, "instructions", "invalid_instructions")
    previous_id = optional_string(body, "previous_response_id", "invalid_previous_response_id")
    conversation = optional_string(body, "conversation", "invalid_conversation")
    if previous_id and conversation:
        raise ApiError(
            400,
            "conflicting_history",
            "'conversation' and 'previous_response_id' are mutually exclusive",
            param="conversation",
        )
    previous: ResponseRow | None = None
    if previous_id:
        previous = await load(request.app, previous_id)
        if previous is None:
            raise not_found(previous_id, "response_not_found")
    elif conversation:
        head = await request.app[STORE].conversation_head(conversation)
        previous = await load(request.app, head) if head else None
    history: list[dict[str, Any]] = []
    if "conversation_history" in body and body["conversation_history"] is not None:
        history = message_list(body["conversation_history"], "conversation_history")
    elif previous is not None:
        history = list(previous.transcript)
    if instructions is None and previous is not None:
        instructions = previous.instructions
    if system:
        instructions = "\n\n".join([*([instructions] if instructions else []), *system])
    history += messages[:-1]
    if body.get("truncation") == "auto":
        history = history[-TRUNCATE_TO:]
    return Plan(messages[-1]["content"], history, instructions, previous, conversation)


async def _start(
    request: web.Request, body: dict[str, Any], plan: Plan, meta: ResponseSettings
) -> str:
    """Store the ``queued`` response (with ``store``), then enqueue its run; the run id."""
    await admit(request)  # backpressure: 429 before anything is written
    selection = select_for_body(request, body)
    run_id = new_run_id()
    session_id = plan.previous.session_id if plan.previous else str(uuid.uuid4())
    turn = TurnRequest(plan.message, plan.history, plan.instructions, response=meta)
    store = request.app[STORE]
    if meta.store:
        info = ResponseMeta.from_request(run_id, turn)
        await store.put_response(
            ResponseRow(
                id=info.id,
                run_id=run_id,
                session_id=session_id,
                status="queued",
                response=info.envelope("queued"),
                transcript=[*plan.history, {"role": "user", "content": plan.message}],
                previous_response_id=info.previous_response_id,
                conversation=info.conversation,
                model=info.model,
                instructions=info.instructions,
                created_at=float(info.created_at),
            )
        )
    try:
        await request.app[RUNS].create(
            run_id=run_id,
            session_id=session_id,
            request=turn.to_json(),
            route=selection.as_dict(),
            model=selection.model or meta.model,
        )
    except BaseException:
        if meta.store:
            await store.delete_response(response_id_for(run_id))
        raise
    return run_id


async def create_response(request: web.Request) -> web.StreamResponse:
    session_key = session_key_header(request)
    body = await json_object(request)
    plan = await _plan(request, body)
    stream = coerce_bool(body.get("stream"), False)
    background = coerce_bool(body.get("background"), False)
    stored = coerce_bool(body.get("store"), True)
    if background and not stored:
        raise ApiError(400, "invalid_request", "background requires store=true", param="store")
    model = body.get("model") if isinstance(body.get("model"), str) else ""
    meta = ResponseSettings(
        created_at=int(time.time()),
        model=model or request.app[SETTINGS].model_name,
        previous_response_id=plan.previous.id if plan.previous else None,
        conversation=plan.conversation,
        store=stored,
        background=background,
    )
    headers: dict[str, str] = {}
    async with await idempotency.begin(request, "responses", body) as idem:
        if idem.replay_of is None:
            run_id = await _start(request, body, plan, meta)
            idem.record(run_id)
    if idem.replay_of is not None:
        run_id = idem.replay_of
        headers[idempotency.REPLAYED_HEADER] = "true"
    record = await request.app[RUNS].get(run_id)
    if record is None:
        raise idempotency.replay_gone(run_id)
    headers = {"X-Hermes-Session-Id": record.session_id, "X-Hermes-Run-Id": run_id, **headers}
    if session_key:
        headers["X-Hermes-Session-Key"] = session_key
    info = ResponseMeta.from_request(run_id, record.request)
    watcher = _watch(request.app, run_id) if info.store else None
    if background:
        return web.json_response(info.envelope("queued"), headers=headers)
    if stream:
        response = await open_stream(request, headers)
        await pump_run_events(request, response, run_id, None, stream_renderer(info))
        return response
    final = await (asyncio.shield(watcher) if watcher else settle(request.app, run_id))
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
    raw = request.query.get("starting_after")
    if raw is None or raw == "":
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
    row = await load(request.app, response_id)
    if row is None:
        raise not_found(response_id)
    if not streaming:
        return web.json_response(row.response)
    record = await request.app[RUNS].get(row.run_id) if row.run_id else None
    if record is None:
        raise ApiError(
            404, "response_stream_expired", f"The event stream of {response_id} has expired"
        )
    meta = ResponseMeta.from_request(record.run_id, record.request)
    response = await open_stream(request, {"X-Hermes-Run-Id": record.run_id})
    await pump_run_events(request, response, record.run_id, None, stream_renderer(meta, after))
    return response


async def delete_response(request: web.Request) -> web.Response:
    response_id = request.match_info["response_id"]
    if not await request.app[STORE].delete_response(response_id):
        raise not_found(response_id)
    return web.json_response({"id": response_id, "object": "response", "deleted": True})


async def _watchers(app: web.Application) -> AsyncIterator[None]:
    """Watchers end with the app; a run they did not settle is settled by a later GET."""
    watchers: set[asyncio.Task[Any]] = set()
    app[WATCHERS] = watchers
    yield
    tasks = list(watchers)
    for task in tasks:
        task.cancel()
    if tasks:
        # Bounded: a subscription may be mid-read when cancelled; once the hub closes right
        # after this, every subscription ends anyway, and an unsettled run is no loss.
        await asyncio.wait(tasks, timeout=1.0)


def add_routes(app: web.Application) -> None:
    app.cleanup_ctx.append(_watchers)
    app.router.add_post("/v1/responses", create_response)
    app.router.add_get("/v1/responses/{response_id}", get_response)
    app.router.add_delete("/v1/responses/{response_id}", delete_response)
