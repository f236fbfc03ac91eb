"""The routing rules as this deployment's settings configure them.

``routing`` itself is pure (it never reads settings); this is the one place that builds its
:class:`RoutingConfig` from the settings' ``routing`` group, for the API (every turn it
accepts) and the workers' scheduler (every job it fires).
"""

from __future__ import annotations

from hermes_queue.config import RoutingSettings
from hermes_queue.routing.parsing import RouteTarget, RoutingConfig


def routing_config(settings: RoutingSettings) -> RoutingConfig:
    return RoutingConfig(
        model_name=settings.model_name,
        model_routes={
            alias: RouteTarget(
                model=route.model,
                provider=route.provider,
                model_options=dict(route.model_options or {}),
            )
            for alias, route in settings.model_routes.items()
        },
        providers=frozenset(settings.providers),
        default_provider=settings.default_provider,
        default_model=settings.default_model,
        fallback_model=settings.fallback_model or None,
        direct_model_requests=settings.direct_model_requests,
    )
