"""Model routing and the session model lock (upstream-api.md §6.3, §6.4), as pure functions.

One module decides, for every endpoint, which provider and model a turn runs on:

* :func:`parse_requested` reads ``model``/``model_id``, ``provider``/``provider_id`` (with the
  ``provider::model`` form), ``model_options`` and ``require_model_lock`` from a request body;
* :func:`resolve_route` maps that request onto a :class:`Route` and its ``route_source``;
* :func:`select_runtime` is the whole per-turn decision for session chat (stored confirmed lock,
  session ``model`` column, route, global default) and returns a :class:`Selection`, which
  travels in the job; :func:`select_request` is the body-only variant (``/v1/*``, ``POST
  /api/sessions``, ``POST /api/sessions/{id}/model``);
* :func:`build_lock`, :func:`merge_lock` and :func:`stored_lock` read and write the
  ``model_config.browser_model_lock`` record; :func:`runtime_metadata` and
  :func:`check_lock_runtime` serve the worker after the turn.

Every bad input raises :class:`RoutingError` (an HTTP status, an error code and a message), so
the API answers before anything is enqueued. Nothing here does I/O.
"""

from hermes_queue.booleans import coerce_bool
from hermes_queue.routing.parsing import (
    LOCK_KEY,
    LOCK_UNAVAILABLE_MESSAGE,
    MISSING_MODEL_MESSAGE,
    MODEL_MAX_LEN,
    PROVIDER_AUTH_FAILED_TEMPLATE,
    PROVIDER_MAX_LEN,
    REASONING_EFFORTS,
    ROUTE_SOURCES,
    LockMismatch,
    RequestedRuntime,
    RouteTarget,
    RoutingConfig,
    RoutingError,
    agent_options,
    clean_runtime_id,
    parse_model_options,
    parse_requested,
    split_provider_prefix,
)
from hermes_queue.routing.routes import (
    Route,
    build_lock,
    column_model,
    merge_lock,
    parse_model_config,
    resolve_alias,
    resolve_route,
    route_problems,
    stored_lock,
    validate_lock,
)
from hermes_queue.routing.selection import (
    Selection,
    check_lock_runtime,
    runtime_metadata,
    select_request,
    select_runtime,
)

__all__ = [
    "LOCK_KEY",
    "LOCK_UNAVAILABLE_MESSAGE",
    "MISSING_MODEL_MESSAGE",
    "MODEL_MAX_LEN",
    "PROVIDER_AUTH_FAILED_TEMPLATE",
    "PROVIDER_MAX_LEN",
    "REASONING_EFFORTS",
    "ROUTE_SOURCES",
    "LockMismatch",
    "RequestedRuntime",
    "Route",
    "RouteTarget",
    "RoutingConfig",
    "RoutingError",
    "Selection",
    "agent_options",
    "build_lock",
    "check_lock_runtime",
    "clean_runtime_id",
    "coerce_bool",
    "column_model",
    "merge_lock",
    "parse_model_config",
    "parse_model_options",
    "parse_requested",
    "resolve_alias",
    "resolve_route",
    "route_problems",
    "runtime_metadata",
    "select_request",
    "select_runtime",
    "split_provider_prefix",
    "stored_lock",
    "validate_lock",
]
