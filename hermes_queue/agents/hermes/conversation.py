"""One turn inside Hermes, on the turn's thread: Hermes' per-turn context around
``run_conversation``, the turn's ``model_options`` in Hermes' terms, and what a failed result or
an exception out of Hermes becomes (split from ``backend``, which schedules turns)."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

from hermes_queue.agents.base import AgentError, ProviderAuthError
from hermes_queue.agents.hermes.bridge import TurnBridge
from hermes_queue.agents.provider_config import ProviderConfig

log = logging.getLogger("hermes_queue.agents.hermes.backend")

PLATFORM = "api_server"  # Hermes' name for this surface: its toolset defaults and approvals
_AUTH_FAILURE = re.compile(r"\bHTTP (401|403)\b")
_FAST_TIER = "priority"


def converse(
    agent: Any,
    bridge: TurnBridge,
    run_id: str,
    session_id: str,
    message: Any,
    history: list[dict[str, Any]],
) -> dict[str, Any]:
    """Runs on the turn's thread: bind Hermes' per-turn context, run, always unbind."""
    from gateway.session_context import clear_session_vars, set_session_vars
    from tools.approval import (
        register_gateway_notify,
        reset_current_session_key,
        set_current_session_key,
        unregister_gateway_notify,
    )

    # Approvals are keyed by run, as upstream does: consent for one run never frees another.
    key_token = set_current_session_key(run_id)
    session_tokens = set_session_vars(
        platform=PLATFORM, session_key=run_id, session_id=session_id, async_delivery=False
    )
    register_gateway_notify(run_id, bridge.on_approval)
    try:
        result = agent.run_conversation(
            user_message=message, conversation_history=history, task_id=session_id
        )
    finally:
        unregister_gateway_notify(run_id)
        clear_session_vars(session_tokens)
        reset_current_session_key(key_token)
    return result if isinstance(result, dict) else {"final_response": str(result or "")}


def failure(provider: ProviderConfig, result: Mapping[str, Any]) -> AgentError:
    message = provider.scrub(str(result.get("error") or result.get("final_response") or ""))
    message = message or "the agent failed without a message"
    if _AUTH_FAILURE.search(message):
        return ProviderAuthError(message)
    return AgentError(message)


def crashed(provider: ProviderConfig, what: str, exc: Exception) -> AgentError:
    """An exception out of Hermes itself (not a failed result): logged in full, shown short."""
    log.exception("hermes: the agent %s", what, exc_info=exc)
    return AgentError(provider.scrub(f"the Hermes agent {what}: {type(exc).__name__}: {exc}"))


def model_options(options: Any) -> tuple[dict[str, Any] | None, str | None]:
    """``model_options`` → Hermes' ``reasoning_config`` and ``service_tier``."""
    if not isinstance(options, Mapping):
        return None, None
    from hermes_constants import parse_reasoning_effort

    reasoning = options.get("reasoning")
    config: dict[str, Any] | None = None
    if isinstance(reasoning, Mapping):
        config = parse_reasoning_effort(reasoning.get("effort")) or (
            {"enabled": bool(reasoning["enabled"])} if "enabled" in reasoning else None
        )
        if config is not None and reasoning.get("enabled") is False:
            config = {"enabled": False}
    if options.get("reasoning_effort"):
        config = parse_reasoning_effort(options["reasoning_effort"]) or config
    tier = options.get("service_tier") or (_FAST_TIER if options.get("fast") else None)
    return config, str(tier) if tier else None
