"""Routes (§6.3: alias, raw request, global), lock validation and the stored lock record."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hermes_queue.booleans import coerce_bool
from hermes_queue.routing.parsing import (
    LOCK_KEY,
    LOCK_UNAVAILABLE_MESSAGE,
    MAX_ROUTE_DEPTH,
    MISSING_MODEL_MESSAGE,
    PROVIDER_MAX_LEN,
    RequestedRuntime,
    RoutingConfig,
    RoutingError,
    clean_runtime_id,
)


@dataclass(frozen=True)
class Route:
    """A concrete provider/model; ``alias`` is the ``model_routes`` name that selected it."""

    provider: str
    model: str
    route_source: str
    alias: str = ""
    model_options: Mapping[str, Any] = field(default_factory=dict)


# -- routes ------------------------------------------------------------------------------------


def _route_error(message: str) -> RoutingError:
    return RoutingError(400, "invalid_model_route", message, "model")


def resolve_alias(alias: str, config: RoutingConfig) -> Route:
    """Follow ``alias`` through ``model_routes``; loops, deep chains and bad targets → 400."""
    chain, targets, provider = [alias], [], ""
    while True:
        target = config.model_routes[chain[-1]]
        targets.append(target)
        if not target.model:
            raise _route_error(f"model route '{chain[-1]}' has no model")
        if target.provider:
            if provider and provider != target.provider:
                raise _route_error(f"model route '{alias}' chains conflicting providers")
            provider = target.provider
        following = target.model
        if following == chain[-1] or following not in config.model_routes:
            break
        if following in chain:
            raise _route_error("model route loop: " + " -> ".join([*chain, following]))
        if len(chain) >= MAX_ROUTE_DEPTH:
            raise _route_error(f"model route '{alias}' chains more than {MAX_ROUTE_DEPTH} aliases")
        chain.append(following)
    if provider and not config.knows_provider(provider):
        raise _route_error(f"model route '{alias}' names unknown provider '{provider}'")
    options: dict[str, Any] = {}
    for target in reversed(targets):  # the outer alias's options win
        options.update(target.model_options)
    return Route(provider, targets[-1].model, "model_routes", alias, options)


def resolve_route(
    requested: RequestedRuntime, config: RoutingConfig, *, openai_compat: bool = False
) -> Route:
    """Route a request per §6.3. ``openai_compat`` (``/v1/chat/completions``, ``/v1/responses``)
    ignores a bare model without a provider unless ``direct_model_requests`` is set."""
    if requested.provider and not config.knows_provider(requested.provider):
        raise RoutingError(
            400, "unknown_provider", f"Unknown provider '{requested.provider}'", "provider"
        )
    for name in dict.fromkeys((requested.raw_model, requested.model)):
        if name and name in config.model_routes:
            route = resolve_alias(name, config)
            if requested.provider and route.provider and requested.provider != route.provider:
                raise RoutingError(
                    400,
                    "route_provider_conflict",
                    f"Model route '{name}' is pinned to provider '{route.provider}'. "
                    f"Remove 'provider' or use '{route.provider}'.",
                    "provider",
                )
            provider = requested.provider or route.provider or config.default_provider
            return Route(provider, route.model, "model_routes", name, route.model_options)
    model = requested.model
    if openai_compat and not requested.provider and not config.direct_model_requests:
        model = ""
    provider = requested.provider or config.default_provider
    if model and model != config.model_name:
        return Route(provider, model, "raw_request")
    if model and requested.provider:  # provider + the advertised alias: the default model
        return Route(provider, config.default_model, "raw_request")
    return Route(provider, config.default_model, "global")


def column_model(route: Route) -> str | None:
    """The session ``model`` column value for a route (the alias for alias routes; none when
    global, so the advertised alias is never stored)."""
    if route.alias:
        return route.alias
    return route.model if route.route_source != "global" else None


def validate_lock(requested: RequestedRuntime, route: Route) -> None:
    """Rule 1: a requested lock needs a model/provider (400) that is routable (409)."""
    if not requested.require_model_lock:
        return
    if not requested.names_runtime:
        raise RoutingError(400, "missing_model", MISSING_MODEL_MESSAGE)
    if route.route_source == "global":
        raise RoutingError(409, "model_lock_unavailable", LOCK_UNAVAILABLE_MESSAGE)


# -- the stored lock ---------------------------------------------------------------------------


def parse_model_config(model_config: Mapping[str, Any] | str | bytes | None) -> dict[str, Any]:
    """A session's ``model_config`` as a dict (JSON text accepted; anything unreadable → {})."""
    if isinstance(model_config, Mapping):
        return dict(model_config)
    if isinstance(model_config, str | bytes) and model_config.strip():
        try:
            parsed = json.loads(model_config)
        except ValueError:
            return {}
        return parsed if isinstance(parsed, dict) else {}
    return {}


def build_lock(
    route: Route, requested: RequestedRuntime, confirmed: bool, now: float
) -> dict[str, Any]:
    """The ``browser_model_lock`` value. Alias locks store the alias (re-resolved on use);
    other locks store the concrete provider and model they were accepted on."""
    provider, model = (
        (requested.provider, route.alias) if route.alias else (route.provider, route.model)
    )
    return {
        "provider": provider,
        "model": model,
        "model_options": dict(requested.model_options or {}),
        "route_source": route.route_source,
        "confirmed": bool(confirmed),
        "updated_at": float(now),
    }


def merge_lock(
    model_config: Mapping[str, Any] | str | None, lock: Mapping[str, Any]
) -> dict[str, Any]:
    """``model_config`` with ``browser_model_lock`` set; every other key kept."""
    merged = parse_model_config(model_config)
    merged[LOCK_KEY] = dict(lock)
    return merged


def stored_lock(model_config: Mapping[str, Any] | str | None) -> dict[str, Any] | None:
    """The session's lock if it is confirmed and names a model or provider, else None."""
    lock = parse_model_config(model_config).get(LOCK_KEY)
    if not isinstance(lock, Mapping) or not coerce_bool(lock.get("confirmed")):
        return None
    if not clean_runtime_id(lock.get("model")) and not clean_runtime_id(
        lock.get("provider"), PROVIDER_MAX_LEN
    ):
        return None
    return dict(lock)


def route_problems(config: RoutingConfig) -> list[str]:
    """Configuration problems for ``hermes-queue config check`` (empty when routing is sound)."""
    problems = []
    if config.providers and config.default_provider not in config.providers:
        problems.append(f"default provider '{config.default_provider}' is not configured")
    for alias in config.model_routes:
        try:
            resolve_alias(alias, config)
        except RoutingError as exc:
            problems.append(exc.message)
    return problems
