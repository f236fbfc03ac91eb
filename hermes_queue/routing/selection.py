"""The per-turn runtime decision (§6.3 rules 3-5) and the checks after the turn (rule 6)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hermes_queue.routing.parsing import (
    LOCK_KEY,
    PROVIDER_MAX_LEN,
    LockMismatch,
    RequestedRuntime,
    RoutingConfig,
    clean_runtime_id,
)
from hermes_queue.routing.routes import (
    Route,
    build_lock,
    parse_model_config,
    resolve_alias,
    resolve_route,
    stored_lock,
    validate_lock,
)


@dataclass(frozen=True)
class Selection:
    """The runtime for one turn, decided on the API side and carried in the job.

    ``confirmed_lock`` obliges the worker to use no fallback model, resolve credentials of
    ``provider`` only (fail closed otherwise) and verify the actual runtime afterwards.
    ``persist_lock`` tells the caller to write :meth:`lock_record` before enqueueing.
    """

    provider: str = ""
    model: str = ""
    route_source: str = "global"
    model_options: Mapping[str, Any] = field(default_factory=dict)
    requested: Mapping[str, str] | None = None
    confirmed_lock: bool = False
    persist_lock: bool = False
    fallback_model: str | None = None
    route: Route | None = field(default=None, compare=False, repr=False)
    request: RequestedRuntime | None = field(default=None, compare=False, repr=False)

    @property
    def lock_state(self) -> str:
        return "accepted" if self.confirmed_lock else ""

    def lock_record(self, now: float) -> dict[str, Any]:
        """The confirmed ``browser_model_lock`` to persist (only valid when ``persist_lock``)."""
        if not self.persist_lock or self.route is None or self.request is None:
            raise ValueError("this selection carries no lock to persist")
        return build_lock(self.route, self.request, confirmed=True, now=now)

    def as_dict(self) -> dict[str, Any]:
        return {
            "provider": self.provider,
            "model": self.model,
            "route_source": self.route_source,
            "model_options": dict(self.model_options),
            "requested": dict(self.requested) if self.requested is not None else None,
            "lock_state": self.lock_state,
            "confirmed_lock": self.confirmed_lock,
            "fallback_model": self.fallback_model,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Selection:
        requested = data.get("requested")
        return cls(
            provider=str(data.get("provider") or ""),
            model=str(data.get("model") or ""),
            route_source=str(data.get("route_source") or "global"),
            model_options=dict(data.get("model_options") or {}),
            requested=dict(requested) if isinstance(requested, Mapping) else None,
            confirmed_lock=bool(data.get("confirmed_lock")),
            fallback_model=data.get("fallback_model") or None,
        )


# -- per-turn selection ------------------------------------------------------------------------


def _merged(base: Mapping[str, Any], override: Mapping[str, Any] | None) -> dict[str, Any]:
    return {**base, **(override or {})}


def select_request(
    requested: RequestedRuntime, config: RoutingConfig, *, openai_compat: bool = False
) -> Selection:
    """The runtime from the body alone (no session state); validates a requested lock."""
    route = resolve_route(requested, config, openai_compat=openai_compat)
    validate_lock(requested, route)
    locked = requested.require_model_lock
    return Selection(
        provider=route.provider,
        model=route.model,
        route_source=route.route_source,
        model_options=_merged(route.model_options, requested.model_options),
        requested=requested.as_requested(),
        confirmed_lock=locked,
        persist_lock=locked,
        fallback_model=None if locked else config.fallback_model,
        route=route,
        request=requested,
    )


def _lock_selection(
    lock: Mapping[str, Any], requested: RequestedRuntime, config: RoutingConfig
) -> Selection:
    provider = clean_runtime_id(lock.get("provider"), PROVIDER_MAX_LEN)
    model = clean_runtime_id(lock.get("model"))
    base: Mapping[str, Any] = {}
    if lock.get("route_source") == "model_routes" and model in config.model_routes:
        route = resolve_alias(model, config)
        run_provider = provider or route.provider or config.default_provider
        run_model, base = route.model, route.model_options
    else:
        run_provider = provider or config.default_provider
        run_model = model or config.default_model
    stored_options = lock.get("model_options")
    options = requested.model_options
    if options is None:
        options = stored_options if isinstance(stored_options, Mapping) else {}
    return Selection(
        provider=run_provider,
        model=run_model,
        route_source="session_model_lock",
        model_options=_merged(base, options),
        requested={"provider": provider, "model": model},
        confirmed_lock=True,
        request=requested,
    )


def _column_selection(
    selection: Selection, column: str, model_config: Mapping[str, Any], config: RoutingConfig
) -> Selection:
    request_options = selection.request.model_options if selection.request else None
    if column in config.model_routes:
        route = resolve_alias(column, config)
        provider, model = route.provider or config.default_provider, route.model
        options = _merged(route.model_options, request_options)
    else:
        provider, model, options = config.default_provider, column, dict(request_options or {})
        lock = model_config.get(LOCK_KEY)
        if isinstance(lock, Mapping) and clean_runtime_id(lock.get("model")) == column:
            provider = clean_runtime_id(lock.get("provider"), PROVIDER_MAX_LEN) or provider
    return Selection(
        provider=provider,
        model=model,
        route_source=selection.route_source,
        model_options=options,
        requested=selection.requested,
        fallback_model=selection.fallback_model,
        route=selection.route,
        request=selection.request,
    )


def select_runtime(
    body_requested: RequestedRuntime,
    session_model_config: Mapping[str, Any] | str | None,
    session_model_column: str | None,
    config: RoutingConfig,
    *,
    openai_compat: bool = False,
) -> Selection:
    """The per-turn decision for a session turn (§6.3 rules 3-5).

    A body naming no model/provider runs under the stored confirmed lock, if any. A body that
    sets ``require_model_lock`` runs under (and persists) its own lock. Otherwise the session's
    ``model`` column (an alias is used as a route; the advertised alias counts as empty) beats
    the body's one-off route, which beats the global default.
    """
    model_config = parse_model_config(session_model_config)
    if not body_requested.names_runtime:
        lock = stored_lock(model_config)
        if lock is not None:
            return _lock_selection(lock, body_requested, config)
    selection = select_request(body_requested, config, openai_compat=openai_compat)
    if selection.confirmed_lock:
        return selection
    column = clean_runtime_id(session_model_column)
    if not column or column == config.model_name:
        return selection
    return _column_selection(selection, column, model_config, config)


# -- after the turn ----------------------------------------------------------------------------


def runtime_metadata(selection: Selection, actual: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``runtime`` object of responses and events; ``actual`` is None before the turn."""
    provider, model = selection.provider, selection.model
    if actual is not None:
        provider = clean_runtime_id(actual.get("provider"), PROVIDER_MAX_LEN) or provider
        model = clean_runtime_id(actual.get("model")) or model
    meta: dict[str, Any] = {
        "provider": provider,
        "model": model,
        "route_source": selection.route_source,
    }
    if selection.requested is not None:
        meta["requested"] = dict(selection.requested)
    lock = ""
    if selection.confirmed_lock:
        lock = "confirmed" if actual is not None else "accepted"
    meta["model_lock"] = lock
    return meta


def check_lock_runtime(selection: Selection, actual_provider: str, actual_model: str) -> None:
    """Rule 6: under a confirmed lock the agent must have run on the locked provider/model.

    A lock that names no provider (a model-only lock where no default provider is configured)
    constrains the model alone: whichever provider the worker resolved for it is the one it
    ran on, so comparing it with the empty name would fail every such turn."""
    if not selection.confirmed_lock:
        return
    provider_ok = not selection.provider or actual_provider == selection.provider
    if provider_ok and actual_model == selection.model:
        return
    raise LockMismatch(
        "confirmed model lock runtime mismatch: "
        f"expected provider={selection.provider} model={selection.model}; "
        f"actual provider={actual_provider or '<unknown>'} model={actual_model or '<unknown>'}"
    )
