"""Typed settings, read once from the environment and an optional TOML file.

This is the only module that reads ``os.environ`` for configuration. Precedence, highest first:
``HERMES_QUEUE_<NAME>`` environment variables, then the TOML file named by
``HERMES_QUEUE_CONFIG`` (flat keys, named like the variables), then the groups' defaults.
Unknown keys in the file and unknown ``HERMES_QUEUE_*`` variables are rejected, so a typo never
silently falls back to a default. In code the settings come in groups
(``settings.redis``, ``settings.runs``, ``settings.api``, …: ``groups.py``; the webhook group in
``webhook_config.py``), gathered in ``settings.py``; ``base.py`` is what every group shares.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hermes_queue.booleans import parse_bool
from hermes_queue.config.base import ENV_PREFIX, ConfigError, bad_value
from hermes_queue.config.groups import (
    EVENT_LOOPS,
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
from hermes_queue.config.settings import Settings
from hermes_queue.config.webhook_config import (
    WebhookConfigError,
    WebhookSettings,
    parse_subscriptions,
    subscriptions_json,
)
from hermes_queue.providers import ProviderConfigError, parse_providers, parse_routes, to_json

CONFIG_FILE_VAR = "HERMES_QUEUE_CONFIG"
# Variables under these prefixes belong to the test suite and tooling, not to the settings.
_RESERVED_ENV_PREFIXES = ("HERMES_QUEUE_TEST_", "HERMES_QUEUE_BENCH_")
_TABLE_PARSERS = {
    "providers": parse_providers,
    "model_routes": parse_routes,
    "webhook_subscriptions": parse_subscriptions,
}


def _cast(name: str, raw: Any, default: Any) -> Any:
    """Cast a raw env/file value to the type of the field's default; errors name the setting."""
    if name in _TABLE_PARSERS:
        try:
            return _TABLE_PARSERS[name](raw)
        except (ProviderConfigError, WebhookConfigError) as exc:
            raise ConfigError(str(exc)) from None
    kind = type(default)
    if kind is tuple:  # a list: TOML array, or a comma-separated string from the environment
        items = raw if isinstance(raw, list | tuple) else str(raw).split(",")
        return tuple(str(item).strip() for item in items if str(item).strip())
    if isinstance(raw, kind) and not (kind is int and isinstance(raw, bool)):
        return raw
    text = str(raw).strip()
    try:
        if kind is bool:
            parsed = parse_bool(text)
            if parsed is None:
                raise ValueError
            return parsed
        if kind is int:
            return int(text)
        if kind is float:
            return float(text)
    except ValueError:
        expected = {bool: "true or false", int: "a whole number", float: "a number"}[kind]
        raise bad_value(name, text, f"is not a valid {kind.__name__}", expected) from None
    return text


def load_settings(
    environ: Mapping[str, str] | None = None, config_file: str | Path | None = None
) -> Settings:
    """Build settings from a file and the environment. Call once per process."""
    env = os.environ if environ is None else environ
    known = Settings().flat()
    values: dict[str, Any] = {}

    path = config_file or env.get(CONFIG_FILE_VAR)
    if path:
        try:
            data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"cannot read config file {path}: {exc}") from None
        data = data.get("hermes_queue", data)
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise ConfigError(f"unknown setting(s) in {path}: {', '.join(unknown)}")
        for name, raw in data.items():
            values[name] = _cast(name, raw, known[name])

    for var, raw in env.items():
        if not var.startswith(ENV_PREFIX) or var == CONFIG_FILE_VAR:
            continue
        if var.startswith(_RESERVED_ENV_PREFIXES):
            continue
        name = var[len(ENV_PREFIX) :].lower()
        if name not in known:
            raise ConfigError(f"unknown setting {var}")
        values[name] = _cast(name, raw, known[name])

    # Upstream Hermes deployments configure the key as API_SERVER_KEY; honour it as a fallback.
    if "api_key" not in values and env.get("API_SERVER_KEY"):
        values["api_key"] = env["API_SERVER_KEY"]
    if "cors_origins" not in values and env.get("API_SERVER_CORS_ORIGINS"):
        values["cors_origins"] = _cast("cors_origins", env["API_SERVER_CORS_ORIGINS"], ())
    return Settings.of(**values).validate()


def setting_sources(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Where each explicitly set setting came from, by flat name: its variable
    (``HERMES_QUEUE_REDIS_URL``) or ``config file <path>``; a setting left at its default is
    absent. The CLI says which deployment it talks to with it, and only falls back to a running
    ``hermes-queue dev`` when ``redis_url`` was not set at all. Call after ``load_settings``
    succeeded (an unreadable file is its error to report)."""
    env = os.environ if environ is None else environ
    sources: dict[str, str] = {}
    path = env.get(CONFIG_FILE_VAR)
    if path:
        try:
            data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError):
            data = {}
        sources.update(dict.fromkeys(data.get("hermes_queue", data), f"config file {path}"))
    for var in env:
        if var.startswith(ENV_PREFIX) and not var.startswith(_RESERVED_ENV_PREFIXES):
            sources[var[len(ENV_PREFIX) :].lower()] = var
    if "api_key" not in sources and env.get("API_SERVER_KEY"):
        sources["api_key"] = "API_SERVER_KEY"
    sources.pop(CONFIG_FILE_VAR[len(ENV_PREFIX) :].lower(), None)
    return sources


def settings_env(settings: Settings) -> dict[str, str]:
    """The environment that reproduces ``settings`` in a child process (dev mode, tests)."""
    out: dict[str, str] = {}
    for name, value in settings.flat().items():
        if name == "webhook_subscriptions":
            text = subscriptions_json(value)
        elif name in _TABLE_PARSERS:
            text = to_json(value)
        elif isinstance(value, tuple):
            text = ",".join(value)
        else:
            text = str(value).lower() if isinstance(value, bool) else str(value)
        out[ENV_PREFIX + name.upper()] = text
    return out


__all__ = [
    "CONFIG_FILE_VAR",
    "ENV_PREFIX",
    "EVENT_LOOPS",
    "AgentSettings",
    "ApiSettings",
    "ConfigError",
    "MetricsSettings",
    "ProcessSettings",
    "RedisSettings",
    "RoutingSettings",
    "RunSettings",
    "ScheduleSettings",
    "Settings",
    "StoreSettings",
    "StreamSettings",
    "WebhookSettings",
    "WorkerSettings",
    "load_settings",
    "setting_sources",
    "settings_env",
]
