"""Request parsing for model routing: body fields and ``model_options``.

Also the shared types (settings, errors) and the translation of ``model_options`` into
agent settings. Bad input raises :class:`RoutingError` before anything is enqueued.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hermes_queue.booleans import coerce_bool

MODEL_MAX_LEN = 200
PROVIDER_MAX_LEN = 80
SERVICE_TIER_MAX_LEN = 64
MAX_ROUTE_DEPTH = 8
LOCK_KEY = "browser_model_lock"
REASONING_EFFORTS = frozenset({"none", "minimal", "low", "medium", "high", "xhigh", "max", "ultra"})
PROVIDER_AUTH_FAILED_TEMPLATE = "⚠️ Provider authentication failed: {reason}"
MISSING_MODEL_MESSAGE = "require_model_lock was set but no model/provider was provided"
LOCK_UNAVAILABLE_MESSAGE = (
    "Requested Browser model lock cannot be routed; refusing silent global fallback"
)
ROUTE_SOURCES = frozenset({"model_routes", "raw_request", "global", "session_model_lock"})

_PREFIX_RE = re.compile(r"[A-Za-z0-9_.-]{2,64}")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f]")


class RoutingError(Exception):
    """A request that cannot be routed: answer ``status`` with error ``code`` (and ``param``)."""

    def __init__(self, status: int, code: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.param = param


class LockMismatch(RuntimeError):
    """The agent ran on another provider/model than the confirmed lock names."""


@dataclass(frozen=True)
class RouteTarget:
    """One ``model_routes`` entry: the alias's model, its provider ("" = default) and options.

    ``model`` may name another alias (aliases chain); an alias whose model is its own name ends
    the chain.
    """

    model: str
    provider: str = ""
    model_options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RoutingConfig:
    model_name: str = "hermes-agent"
    model_routes: Mapping[str, RouteTarget] = field(default_factory=dict)
    providers: frozenset[str] = frozenset()
    default_provider: str = ""
    default_model: str = ""
    fallback_model: str | None = None
    direct_model_requests: bool = False

    def knows_provider(self, name: str) -> bool:
        return name in self.providers or (bool(name) and name == self.default_provider)


@dataclass(frozen=True)
class RequestedRuntime:
    """What a body asked for. ``model_options`` is None when the body sent none."""

    model: str = ""
    provider: str = ""
    raw_model: str = ""
    model_options: Mapping[str, Any] | None = None
    require_model_lock: bool = False

    @property
    def names_runtime(self) -> bool:
        return bool(self.model or self.provider)

    def as_requested(self) -> dict[str, str] | None:
        return {"provider": self.provider, "model": self.model} if self.names_runtime else None


# -- request parsing ---------------------------------------------------------------------------


def clean_runtime_id(value: Any, max_len: int = MODEL_MAX_LEN) -> str:
    """Lenient cleaning for stored values: strip; non-strings, over-long or control → ""."""
    if not isinstance(value, str):
        return ""
    text = value.strip()
    if len(text) > max_len or _CONTROL_RE.search(text):
        return ""
    return text


def _body_id(body: Mapping[str, Any], keys: tuple[str, str], max_len: int, code: str) -> str:
    for key in keys:
        value = body.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            raise RoutingError(400, code, f"{key} must be a string", key)
        text = value.strip()
        if not text:
            continue
        if len(text) > max_len:
            raise RoutingError(400, code, f"{key} is longer than {max_len} characters", key)
        if _CONTROL_RE.search(text):
            raise RoutingError(400, code, f"{key} contains control characters", key)
        return text
    return ""


def split_provider_prefix(model: str) -> tuple[str, str]:
    """``"nous::x-ai/grok"`` → ``("nous", "x-ai/grok")``; anything else → ``("", model)``."""
    head, sep, rest = model.partition("::")
    if sep and _PREFIX_RE.fullmatch(head) and rest.strip():
        return head, rest.strip()
    return "", model


def _options_error(message: str, param: str) -> RoutingError:
    return RoutingError(400, "invalid_model_options", message, param)


def _check_effort(value: Any, param: str) -> None:
    if not isinstance(value, str) or value.strip().lower() not in REASONING_EFFORTS:
        allowed = "|".join(sorted(REASONING_EFFORTS))
        raise _options_error(f"{param} must be one of {allowed}", param)


def parse_model_options(value: Any) -> dict[str, Any] | None:
    """Validate ``model_options`` and return it unchanged (unknown keys kept); None if absent."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise _options_error("model_options must be an object", "model_options")
    options = dict(value)
    reasoning = options.get("reasoning")
    if reasoning is not None:
        if not isinstance(reasoning, Mapping):
            raise _options_error("reasoning must be an object", "model_options.reasoning")
        enabled = reasoning.get("enabled")
        if enabled is not None and not isinstance(enabled, bool):
            raise _options_error("enabled must be a boolean", "model_options.reasoning.enabled")
        if reasoning.get("effort") is not None:
            _check_effort(reasoning["effort"], "model_options.reasoning.effort")
    if options.get("reasoning_effort") is not None:
        _check_effort(options["reasoning_effort"], "model_options.reasoning_effort")
    tier = options.get("service_tier")
    if tier is not None and (
        not isinstance(tier, str) or len(tier) > SERVICE_TIER_MAX_LEN or _CONTROL_RE.search(tier)
    ):
        raise _options_error("service_tier must be a short string", "model_options.service_tier")
    fast = options.get("fast")
    if fast is not None and coerce_bool(fast, True) != coerce_bool(fast, False):
        raise _options_error("fast must be a boolean", "model_options.fast")
    return options


def parse_requested(body: Mapping[str, Any], *, force_lock: bool = False) -> RequestedRuntime:
    """Parse the runtime fields of a request body (``force_lock`` for the ``/model`` endpoint)."""
    raw_model = _body_id(body, ("model", "model_id"), MODEL_MAX_LEN, "invalid_model")
    provider = _body_id(body, ("provider", "provider_id"), PROVIDER_MAX_LEN, "invalid_provider")
    prefix, model = split_provider_prefix(raw_model)
    return RequestedRuntime(
        model=model,
        provider=provider or prefix,
        raw_model=raw_model,
        model_options=parse_model_options(body.get("model_options")),
        require_model_lock=force_lock or coerce_bool(body.get("require_model_lock")),
    )


def agent_options(model_options: Mapping[str, Any] | None) -> dict[str, Any]:
    """Translate ``model_options`` into agent settings: ``reasoning_config`` and/or
    ``service_tier`` (present only when the options set them; a None tier clears it)."""
    result: dict[str, Any] = {}
    if not model_options:
        return result
    reasoning = model_options.get("reasoning")
    enabled: Any = None
    effort: Any = model_options.get("reasoning_effort")
    if isinstance(reasoning, Mapping):
        enabled = reasoning.get("enabled")
        effort = reasoning.get("effort", effort)
    effort = effort.strip().lower() if isinstance(effort, str) else ""
    if enabled is False or effort == "none":
        result["reasoning_config"] = {"enabled": False}
    elif effort in REASONING_EFFORTS:
        result["reasoning_config"] = {"enabled": True, "effort": effort}
    elif enabled is True:
        result["reasoning_config"] = {"enabled": True}
    if "service_tier" in model_options:
        tier = model_options["service_tier"]
        result["service_tier"] = (tier.strip() or None) if isinstance(tier, str) else None
    elif "fast" in model_options:
        result["service_tier"] = "priority" if coerce_bool(model_options["fast"]) else None
    return result
