"""All the settings, by group, and the one table between the outside's flat names
(``redis_url``, ``HERMES_QUEUE_REDIS_URL``) and the groups' fields: :meth:`Settings.replace`
and :meth:`Settings.of` take flat names, as the file and the environment do
(``config/__init__.py`` reads those).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields
from typing import Any

from hermes_queue.config.groups import (
    AgentSettings,
    ApiSettings,
    MetricsSettings,
    ProcessSettings,
    RedisSettings,
    RoutingSettings,
    RunSettings,
    ScheduleSettings,
    StoreSettings,
    StreamSettings,
    WorkerSettings,
)
from hermes_queue.config.webhook_config import WebhookSettings


@dataclass(frozen=True)
class Settings:
    """Every setting, by group; the groups' reprs mask secrets."""

    redis: RedisSettings = field(default_factory=RedisSettings)
    runs: RunSettings = field(default_factory=RunSettings)
    api: ApiSettings = field(default_factory=ApiSettings)
    streams: StreamSettings = field(default_factory=StreamSettings)
    worker: WorkerSettings = field(default_factory=WorkerSettings)
    agents: AgentSettings = field(default_factory=AgentSettings)
    routing: RoutingSettings = field(default_factory=RoutingSettings)
    schedules: ScheduleSettings = field(default_factory=ScheduleSettings)
    store: StoreSettings = field(default_factory=StoreSettings)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    process: ProcessSettings = field(default_factory=ProcessSettings)
    webhooks: WebhookSettings = field(default_factory=WebhookSettings)

    @classmethod
    def of(cls, **flat: Any) -> Settings:
        """The defaults with ``flat`` (flat names: ``redis_url=…``) changed."""
        return cls().replace(**flat)

    def replace(self, **flat: Any) -> Settings:
        """A copy with the settings named by flat name changed (not validated)."""
        changes: dict[str, dict[str, Any]] = {}
        for name, value in flat.items():
            if name not in FLAT:
                raise TypeError(f"unknown setting {name!r}")
            group, attr = FLAT[name]
            changes.setdefault(group, {})[attr] = value
        groups = {g: dataclasses.replace(getattr(self, g), **c) for g, c in changes.items()}
        return dataclasses.replace(self, **groups)

    def flat(self) -> dict[str, Any]:
        """Every setting by its flat name."""
        return {name: getattr(getattr(self, g), attr) for name, (g, attr) in FLAT.items()}

    def validate(self) -> Settings:
        for group in fields(self):
            getattr(self, group.name).validate()
        return self


def _flat_name(f: dataclasses.Field[Any]) -> str:
    return str(f.metadata.get("name", f.name))


# flat name -> (group, field): the one table between the outside's names and the groups.
FLAT: dict[str, tuple[str, str]] = {
    _flat_name(f): (group.name, f.name)
    for group in fields(Settings)
    for f in fields(getattr(Settings(), group.name))
}
