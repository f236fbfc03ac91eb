"""``/api/sessions``: session rows and transcripts in the SQL store (upstream-api.md §2, §6),
and the session's turns in flight, from Redis."""

from __future__ import annotations

import asyncio
import secrets
import time
from typing import Any

from aiohttp import web

from hermes_queue.api.errors import ApiError, session_not_found
from hermes_queue.api.hermes.session_bodies import (
    ForkBody,
    MessageListQuery,
    ModelLockBody,
    SessionCreateBody,
    SessionListQuery,
    SessionPatchBody,
)
from hermes_queue.api.http.bodies import json_object
from hermes_queue.api.http.tenancy import owns, tenant
from hermes_queue.api.state import STATE
from hermes_queue.api.turns.runtime_selection import creation_lock, lock_selection, persist_lock
from hermes_queue.routing import runtime_metadata
from hermes_queue.store import (
    UNSET,
    InvalidTitle,
    SessionExists,
    SessionRow,
    project_message,
    project_session,
)
from hermes_queue.store.base import DEFAULT_SESSION_SOURCE, TitleConflict
from hermes_queue.store.lineage import tip_of
from hermes_queue.store.protocol import SessionStore

MAX_MESSAGES_LIMIT = 500
PATCHABLE_FIELDS = frozenset(SessionPatchBody.model_fields)


def new_session_id() -> str:
    return f"api_{int(time.time())}_{secrets.token_hex(4)}"


def session_body(row: SessionRow) -> dict[str, Any]:
    return {"object": "hermes.session", "session": project_session(row)}


async def title_error(
    store: SessionStore, exc: InvalidTitle, tenant: str, *, created: bool
) -> ApiError:
    """400 ``invalid_title`` in upstream's words: a taken title names the session holding it
    ("Title already in use by session …" on create, hermes_state's sentence on a rename)."""
    message = str(exc)
    if isinstance(exc, TitleConflict) and exc.title:
        holder = await store.title_holder(exc.title, tenant)
        if created:
            message = f"Title already in use by session {holder}"
        else:
            message = f"Title '{exc.title}' is already in use by session {holder}"
    return ApiError(400, "invalid_title", message, param="title")


async def load_session(request: web.Request, session_id: str) -> SessionRow:
    """The request's tenant's session; another tenant's is not found, as one that does not
    exist (the same answer)."""
    row = await request.app[STATE].store.get_session(session_id)
    if row is None or not owns(request, row.tenant):
        raise session_not_found(session_id)
    return row


async def list_sessions(request: web.Request) -> web.Response:
    query = SessionListQuery.parse(request.query)
    limit, offset = query.limit or 50, query.offset or 0
    rows = await request.app[STATE].store.list_sessions(
        limit,
        offset,
        source=query.source or None,
        include_children=query.include_children,
        tenant=tenant(request),
    )
    return web.json_response(
        {
            "object": "list",
            "data": [project_session(row) for row in rows],
            "limit": limit,
            "offset": offset,
            "has_more": len(rows) == limit,
        }
    )


async def create_session(request: web.Request) -> web.Response:
    state = request.app[STATE]
    timeout = state.settings.api.body_timeout_seconds
    body = await json_object(request, timeout) if request.can_read_body else {}
    fields = SessionCreateBody.parse(body)
    session_id = fields.id or new_session_id()
    title, system_prompt, model = fields.title, fields.system_prompt, fields.model
    source = fields.source or DEFAULT_SESSION_SOURCE
    model_config, locked_model = creation_lock(state.routing, body)
    try:
        row = await state.store.create_session(
            session_id,
            source=source,
            model=locked_model or model,
            model_config=model_config,
            system_prompt=system_prompt,
            title=title,
            tenant=tenant(request),
        )
    except SessionExists:
        raise ApiError(409, "session_exists", f"Session already exists: {session_id}") from None
    except InvalidTitle as exc:
        raise await title_error(state.store, exc, tenant(request), created=True) from None
    return web.json_response(session_body(row), status=201)


async def get_session(request: web.Request) -> web.Response:
    row = await load_session(request, request.match_info["session_id"])
    return web.json_response(session_body(row))


async def update_session(request: web.Request) -> web.Response:
    state = request.app[STATE]
    store = state.store
    row = await load_session(request, request.match_info["session_id"])
    body = await json_object(request, state.settings.api.body_timeout_seconds)
    unknown = sorted(set(body) - PATCHABLE_FIELDS)
    if unknown:
        raise ApiError(
            400,
            "unsupported_session_field",
            f"Unsupported session fields: {', '.join(unknown)}",
            param=unknown[0],
        )
    fields = SessionPatchBody.parse(body)
    changes: dict[str, Any] = {}
    if "title" in fields.model_fields_set:
        changes["title"] = fields.title
    if "end_reason" in fields.model_fields_set:
        changes["end_reason"] = fields.end_reason if fields.end_reason else UNSET
    try:
        updated = await store.update_session(row.id, **changes)
    except InvalidTitle as exc:
        raise await title_error(store, exc, tenant(request), created=False) from None
    return web.json_response(session_body(updated))


async def delete_session(request: web.Request) -> web.Response:
    state = request.app[STATE]
    row = await load_session(request, request.match_info["session_id"])
    active, waiting = await state.runs.session_runs(row.id)
    if active or waiting:
        raise ApiError(
            409,
            "session_active_turn",
            "The session has a turn in progress; stop it first",
            extra={"run_id": active or waiting[0]},
        )
    if not await state.store.delete_session(row.id):
        raise session_not_found(row.id)
    return web.json_response({"object": "hermes.session.deleted", "id": row.id, "deleted": True})


async def list_messages(request: web.Request) -> web.Response:
    store = request.app[STATE].store
    row = await load_session(request, request.match_info["session_id"])
    resolved = await tip_of(store, row)
    query = MessageListQuery.parse(request.query)
    limit = MAX_MESSAGES_LIMIT if query.limit is None else (query.limit or 1)
    offset, order = query.offset or 0, query.order
    messages = await store.get_messages(
        resolved, limit=limit, offset=offset, order="oldest" if order == "oldest" else "latest"
    )
    return web.json_response(
        {
            "object": "list",
            "session_id": resolved,
            "data": [project_message(message) for message in messages],
            "pagination": {
                "limit": limit,
                "offset": offset,
                "order": order,
                "returned": len(messages),
            },
        }
    )


async def list_session_runs(request: web.Request) -> web.Response:
    """The session's active turn, then the turns queued behind it (``enqueue``), in order, as
    ``hermes.run`` objects: what a new turn would wait behind, and which run ids to follow or
    stop. Read from Redis on the session's live tip, where its turns run; a run that ends
    between the two reads is listed with the status it ended in."""
    state = request.app[STATE]
    row = await load_session(request, request.match_info["session_id"])
    resolved = await tip_of(state.store, row)
    active, waiting = await state.runs.session_runs(resolved)
    run_ids = [active, *waiting] if active else waiting
    records = await asyncio.gather(*(state.runs.get(run_id) for run_id in run_ids))
    return web.json_response(
        {
            "object": "list",
            "session_id": resolved,
            "data": [record.to_status() for record in records if record is not None],
        }
    )


async def fork_session(request: web.Request) -> web.Response:
    state = request.app[STATE]
    store = state.store
    source = await load_session(request, request.match_info["session_id"])
    timeout = state.settings.api.body_timeout_seconds
    body = await json_object(request, timeout) if request.can_read_body else {}
    fields = ForkBody.parse(body)
    new_id, title = fields.id or new_session_id(), fields.title
    try:
        child = await store.fork_session(source.id, new_id, title=title)
    except SessionExists:
        raise ApiError(409, "session_exists", f"Session already exists: {new_id}") from None
    except InvalidTitle as exc:
        raise await title_error(store, exc, tenant(request), created=False) from None
    return web.json_response(session_body(child), status=201)


async def set_model_lock(request: web.Request) -> web.Response:
    """Persist a confirmed model lock (upstream-api.md §2, §6.3 rule 2)."""
    state = request.app[STATE]
    row = await load_session(request, request.match_info["session_id"])
    body = await json_object(request, state.settings.api.body_timeout_seconds)
    ModelLockBody.parse(body)  # the runtime fields themselves are routing's to check
    selection = lock_selection(state.routing, body)
    await persist_lock(state.store, row, selection)
    runtime = {**runtime_metadata(selection, None), "model_lock": "accepted"}
    return web.json_response(
        {"object": "hermes.session.model_lock", "session_id": row.id, "runtime": runtime}
    )
