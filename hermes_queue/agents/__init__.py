"""Backends that run one chat turn, looked up by name from configuration.

The registry maps a name to an import path and imports lazily, so optional backends (whose
dependencies may not be installed) cost nothing until a worker is configured to use them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from .base import (
    AgentBackend,
    AgentError,
    AgentRequest,
    AgentResult,
    CancelToken,
    EventSink,
    TurnCancelled,
    Usage,
)


def _echo(options: dict[str, Any]) -> AgentBackend:
    module = importlib.import_module("hermes_queue.agents.echo")
    backend: AgentBackend = module.EchoBackend(
        token_delay=float(options.get("token_delay", 0.0)),
        tool_log=str(options.get("tool_log") or ""),
    )
    return backend


# Name -> factory taking the options dict.
_BACKENDS: dict[str, Callable[[dict[str, Any]], AgentBackend]] = {
    "echo": _echo,
    "openai": lambda options: importlib.import_module(
        "hermes_queue.agents.openai_compat"
    ).OpenAICompatBackend.from_options(options),
    # Needs the optional extra: pip install 'hermes-queue[hermes]'.
    "hermes": lambda options: importlib.import_module(
        "hermes_queue.agents.hermes.backend"
    ).HermesBackend.from_options(options),
}


def known_backends() -> list[str]:
    """The names ``load_backend`` accepts, for config validation and error messages."""
    return sorted(_BACKENDS)


def load_backend(name: str, **options: Any) -> AgentBackend:
    """Build the backend called ``name``; unknown names fail loudly instead of silently echoing."""
    factory = _BACKENDS.get(name)
    if factory is None:
        raise ValueError(
            f"unknown agent backend {name!r}; known backends: {', '.join(known_backends())}"
        )
    return factory(options)


__all__ = [
    "AgentBackend",
    "AgentError",
    "AgentRequest",
    "AgentResult",
    "CancelToken",
    "EventSink",
    "TurnCancelled",
    "Usage",
    "known_backends",
    "load_backend",
]
