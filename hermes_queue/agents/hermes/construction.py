"""What a turn's Hermes ``AIAgent`` is built from and how one is built: the turn's runtime
(provider endpoint and key, resolved here in the worker for that provider only, the model, the
fallback model), the agent itself, the per-turn callbacks put on a new or warm agent and taken
off a kept one, and what is read back from it (the runtime it ended on, its cost estimate).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from hermes_queue.agents.base import AgentError, AgentRequest
from hermes_queue.agents.hermes import process
from hermes_queue.agents.hermes.bridge import TurnBridge
from hermes_queue.agents.hermes.conversation import PLATFORM, model_options
from hermes_queue.agents.hermes.durable import DurableTurn
from hermes_queue.agents.provider_config import ProviderConfig, with_credentials

log = logging.getLogger(__name__)

_CALLBACKS = (
    "stream_delta_callback",
    "reasoning_callback",
    "tool_progress_callback",
    "tool_start_callback",
    "tool_complete_callback",
)


@dataclass(frozen=True)
class Runtime:
    """Where one turn's agent talks to, with the key (never logged: see ProviderConfig)."""

    provider: ProviderConfig
    model: str
    fallback: dict[str, Any] | None

    def construction(self, toolsets: list[str] | None, instructions: str | None) -> dict[str, Any]:
        """What the agent is built from, minus secrets (the warm-agent signature's input)."""
        fallback = dict(self.fallback or {})
        fallback.pop("api_key", None)
        return {
            "provider": self.provider.name,
            "base_url": self.provider.base_url,
            "api_mode": self.provider.api_mode,
            "model": self.model,
            "toolsets": toolsets,
            "instructions": instructions or "",
            "fallback": fallback,
        }


@dataclass(frozen=True)
class AgentFactory:
    """The configured providers and defaults a turn's runtime is resolved from, and the
    agent built for it."""

    providers: Mapping[str, ProviderConfig]
    default_provider: str
    default_model: str = ""
    credentials: Callable[[str], str] | None = None
    max_iterations: int = 90

    def runtime(self, request: AgentRequest) -> Runtime:
        route = request.route
        model = route.model or self.default_model
        if not model:
            raise AgentError("no model was resolved for this turn")
        provider = self.provider(route.provider or self.default_provider)
        fallback = route.fallback_model
        return Runtime(provider, model, self._fallback(fallback) if fallback else None)

    def provider(self, name: str) -> ProviderConfig:
        provider = self.providers.get(name)
        if provider is None:
            raise AgentError(f"unknown provider {name!r}")
        return with_credentials(provider, self.credentials)

    def _fallback(self, spec: str) -> dict[str, Any] | None:
        """``provider::model`` or a bare model on the default provider; None when the fallback
        provider's key is unavailable (the turn then runs without a fallback)."""
        name, _, model = spec.rpartition("::")
        try:
            provider = self.provider(name or self.default_provider)
        except AgentError as exc:  # unknown provider, or its key unavailable
            log.warning("hermes: fallback model %r unusable: %s", spec, exc)
            return None
        return {
            "provider": "custom",
            "model": model,
            "base_url": provider.base_url,
            "api_key": provider.api_key,
        }

    def build(self, runtime: Runtime, request: AgentRequest, toolsets: list[str]) -> Any:
        from run_agent import AIAgent

        provider = runtime.provider
        agent = AIAgent(
            model=runtime.model,
            base_url=provider.base_url,
            api_key=provider.api_key,
            # Hermes' generic OpenAI-compatible provider: endpoint and key are given.
            provider="custom",
            api_mode=provider.api_mode,
            max_iterations=self.max_iterations,
            quiet_mode=True,
            verbose_logging=False,
            enabled_toolsets=toolsets,
            ephemeral_system_prompt=request.instructions or None,
            session_id=request.session_id,
            platform=PLATFORM,
            fallback_model=runtime.fallback,
        )
        process.route_console(agent)
        return agent

    def actual_runtime(self, agent: Any, runtime: Runtime) -> dict[str, Any]:
        """The provider and model the turn ended on (a fallback may have taken over)."""
        base_url = str(getattr(agent, "base_url", "") or "").rstrip("/")
        name = runtime.provider.name
        if base_url != runtime.provider.base_url:
            name = next(
                (p.name for p in self.providers.values() if p.base_url == base_url), base_url
            )
        return {"provider": name, "model": str(getattr(agent, "model", "") or runtime.model)}


def prepare_turn(agent: Any, bridge: TurnBridge, options: Any) -> None:
    """Per-turn settings on a new or warm agent (Hermes' gateway does the same)."""
    agent.stream_delta_callback = bridge.on_delta
    agent.reasoning_callback = bridge.on_reasoning
    agent.tool_progress_callback = bridge.on_progress
    agent.tool_start_callback = bridge.on_tool_start
    agent.tool_complete_callback = bridge.on_tool_complete
    agent.reasoning_config, agent.service_tier = model_options(options)
    agent._api_call_count = 0


def detach(agent: Any) -> None:
    """A kept agent must not hold the last turn's bridge (and through it, its sink), nor its
    durable seams."""
    DurableTurn.remove(agent)
    for name in _CALLBACKS:
        setattr(agent, name, None)


def platform_toolsets() -> list[str]:
    """What Hermes enables for its API server when settings name no toolsets."""
    from hermes_cli.config import load_config
    from hermes_cli.tools_config import _get_platform_tools

    return sorted(_get_platform_tools(load_config(), PLATFORM, include_default_mcp_servers=False))


def release_clients(agent: Any) -> None:
    with contextlib.suppress(Exception):
        agent.release_clients()


def estimated_cost(agent: Any) -> float:
    """Hermes' running estimate of the agent's spend (0 for a model it has no price for)."""
    try:
        return float(getattr(agent, "session_estimated_cost_usd", 0.0) or 0.0)
    except (TypeError, ValueError):
        return 0.0
