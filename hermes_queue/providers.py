"""LLM providers and model routes as configured, and the worker-side credential lookup.

Settings name where a provider's key lives (an environment variable or a file), never the key
itself, so no key is ever part of the settings, a job, a run record or a log line. Only a worker
resolves it, at the moment it builds a turn.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermes_queue.logs import register_secret

_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,80}$")


class ProviderConfigError(ValueError):
    """A provider or route entry is malformed; the message names it."""


class CredentialsUnavailable(Exception):
    """A provider's key could not be resolved; the message names where it was looked for."""


@dataclass(frozen=True)
class ProviderSettings:
    name: str
    base_url: str
    api_key_env: str = ""
    api_key_file: str = ""
    api_mode: str = "chat_completions"
    timeout_seconds: float = 120.0
    max_retries: int = 3


@dataclass(frozen=True)
class RouteSettings:
    alias: str
    provider: str
    model: str
    model_options: Mapping[str, Any] | None = None


def _table(raw: Any, setting: str) -> dict[str, Any]:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except ValueError:
            raise ProviderConfigError(f"{setting} must be a JSON object or a TOML table") from None
    if not isinstance(raw, dict):
        raise ProviderConfigError(f"{setting} must be a table of named entries")
    return raw


def parse_providers(raw: Any) -> dict[str, ProviderSettings]:
    out: dict[str, ProviderSettings] = {}
    for name, entry in _table(raw, "providers").items():
        if not _NAME.match(name) or not isinstance(entry, dict):
            raise ProviderConfigError(f"provider {name!r} must be a table with a valid name")
        unknown = set(entry) - {f for f in ProviderSettings.__dataclass_fields__ if f != "name"}
        if unknown:
            raise ProviderConfigError(f"provider {name!r}: unknown key(s) {sorted(unknown)}")
        base_url = entry.get("base_url")
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ProviderConfigError(f"provider {name!r}: base_url must be an http(s) URL")
        try:
            out[name] = ProviderSettings(name=name, **entry)
        except TypeError as exc:
            raise ProviderConfigError(f"provider {name!r}: {exc}") from None
    return out


def parse_routes(raw: Any) -> dict[str, RouteSettings]:
    out: dict[str, RouteSettings] = {}
    for alias, entry in _table(raw, "model_routes").items():
        if not isinstance(entry, dict) or not isinstance(entry.get("model"), str):
            raise ProviderConfigError(f"model route {alias!r} needs at least a model")
        options = entry.get("model_options")
        if options is not None and not isinstance(options, dict):
            raise ProviderConfigError(f"model route {alias!r}: model_options must be a table")
        out[alias] = RouteSettings(
            alias=alias,
            provider=str(entry.get("provider", "")),
            model=entry["model"],
            model_options=options,
        )
    return out


def resolve_api_key(provider: ProviderSettings, environ: Mapping[str, str] | None = None) -> str:
    """The provider's key, from its environment variable or file (worker side only)."""
    env = os.environ if environ is None else environ
    if provider.api_key_env:
        value = env.get(provider.api_key_env, "").strip()
        if value:
            register_secret(value)  # masked in every log line from now on
            return value
    if provider.api_key_file:
        try:
            value = Path(provider.api_key_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise CredentialsUnavailable(
                f"cannot read the key file of provider {provider.name!r}: {exc.strerror}"
            ) from None
        if value:
            register_secret(value)
            return value
    where = provider.api_key_env or provider.api_key_file or "no key source configured"
    raise CredentialsUnavailable(f"no API key for provider {provider.name!r} ({where})")


def to_json(entries: Mapping[str, ProviderSettings] | Mapping[str, RouteSettings]) -> str:
    """The env form (JSON) of parsed entries, for child processes."""
    out: dict[str, dict[str, Any]] = {}
    for name, entry in entries.items():
        data = dict(entry.__dict__)
        data.pop("name", None)
        data.pop("alias", None)
        out[name] = {k: v for k, v in data.items() if v is not None}
    return json.dumps(out)
