"""Routing on the API side: which provider/model a turn runs on, decided before it is enqueued.

The decision itself lives in :mod:`hermes_queue.routing` (pure); this module feeds it the
request and the session row, persists newly confirmed locks, and turns routing errors into the
JSON envelope. The resulting :class:`Selection` travels in the run record; credentials never do.
"""

from __future__ import annotations

import time
from typing import Any

from hermes_queue.api.errors import ApiError
from hermes_queue.routing import (
    LOCK_KEY,
    RoutingConfig,
    RoutingError,
    Selection,
    build_lock,
    column_model,
    merge_lock,
    parse_model_config,
    parse_requested,
    select_request,
    select_runtime,
)
from hermes_queue.store import SessionRow, StoreError
from hermes_queue.store.protocol import SessionStore


def _api_error(exc: RoutingError) -> ApiError:
    return ApiError(exc.status, exc.code, exc.message, param=exc.param)


def select_for_body(routing: RoutingConfig, body: dict[str, Any]) -> Selection:
    """``/v1/*`` endpoints: the body alone decides (no session state)."""
    try:
        return select_request(parse_requested(body), routing, openai_compat=True)
    except RoutingError as exc:
        raise _api_error(exc) from None


def select_for_session(routing: RoutingConfig, row: SessionRow, body: dict[str, Any]) -> Selection:
    """Session chat: stored confirmed lock, session model, body, defaults (upstream-api.md §6.3).
    When ``selection.persist_lock`` the caller persists it (``persist_lock``) before enqueueing."""
    try:
        return select_runtime(parse_requested(body), row.model_config, row.model, routing)
    except RoutingError as exc:
        raise _api_error(exc) from None


async def persist_lock(store: SessionStore, row: SessionRow, selection: Selection) -> SessionRow:
    """Merge the selection's confirmed lock into the session's ``model_config``."""
    lock = selection.lock_record(time.time())
    model_config = merge_lock(parse_model_config(row.model_config), lock)
    try:
        return await store.set_model_config(
            row.id,
            model_config,
            model=column_model(selection.route) if selection.route else None,
            clear_system_prompt=True,
        )
    except StoreError as exc:
        raise ApiError(
            500, "model_lock_persistence_failed", f"Could not persist the model lock: {exc}"
        ) from None


def creation_lock(
    routing: RoutingConfig, body: dict[str, Any]
) -> tuple[dict[str, Any] | None, str | None]:
    """``POST /api/sessions``: the lock to store (confirmed iff ``require_model_lock``) and the
    ``model`` column, when the body names a model or provider."""
    try:
        requested = parse_requested(body)
        if not requested.names_runtime and not requested.require_model_lock:
            return None, None
        selection = select_request(requested, routing)
    except RoutingError as exc:
        raise _api_error(exc) from None
    if selection.route is None:
        return None, None
    lock = build_lock(
        selection.route, requested, confirmed=requested.require_model_lock, now=time.time()
    )
    return {LOCK_KEY: lock}, column_model(selection.route)


def lock_selection(routing: RoutingConfig, body: dict[str, Any]) -> Selection:
    """``POST /api/sessions/{id}/model``: the body's runtime, always as a confirmed lock."""
    try:
        return select_request(parse_requested(body, force_lock=True), routing)
    except RoutingError as exc:
        raise _api_error(exc) from None
