"""Typed settings, read once from the environment and an optional TOML file.

This is the only module that reads ``os.environ`` for configuration. Precedence, highest first:
``HERMES_QUEUE_<FIELD>`` environment variables, then the TOML file named by
``HERMES_QUEUE_CONFIG`` (flat keys named like the fields), then the defaults below. Unknown keys
in the file and unknown ``HERMES_QUEUE_*`` variables are rejected, so a typo never silently falls
back to a default.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from hermes_queue.booleans import parse_bool
from hermes_queue.keyguard import normalize_key
from hermes_queue.logs import LOG_FORMATS
from hermes_queue.providers import (
    ProviderConfigError,
    ProviderSettings,
    RouteSettings,
    parse_providers,
    parse_routes,
    to_json,
)

ENV_PREFIX = "HERMES_QUEUE_"
EVENT_LOOPS = ("auto", "asyncio", "uvloop")
CONFIG_FILE_VAR = "HERMES_QUEUE_CONFIG"
# Variables under these prefixes belong to the test suite and tooling, not to the settings.
_RESERVED_ENV_PREFIXES = ("HERMES_QUEUE_TEST_", "HERMES_QUEUE_BENCH_")
_SECRET_FIELDS = frozenset({"api_key"})


class ConfigError(ValueError):
    """A setting has a value that cannot be used; the message names the setting."""


@dataclass(frozen=True)
class Settings:
    # Redis and naming
    redis_url: str = "redis://127.0.0.1:6379/0"
    namespace: str = "hq"
    # Connections per process pool (requests wait for one rather than open more).
    redis_pool_size: int = 32
    # Run creation, stop, approval answers and the terminal transition wait until this many
    # replicas acknowledged them (Redis WAIT), so a 2xx survives a failover (0: do not wait).
    redis_min_replicas: int = 0
    # HTTP API
    host: str = "127.0.0.1"
    port: int = 8642
    api_key: str = ""
    body_limit_bytes: int = 10_000_000
    # A connection waiting for a request (new, or kept alive between requests, including one
    # whose headers are still trickling in) is closed after idle_timeout_seconds; keep it above
    # your load balancer's idle timeout. A request body must arrive within body_timeout_seconds
    # (else 408). Responses being sent, SSE streams included, are never cut by either.
    idle_timeout_seconds: float = 75.0
    body_timeout_seconds: float = 30.0
    keepalive_seconds: float = 10.0
    model_name: str = "hermes-agent"
    # Browser origins allowed to call the API (upstream-api.md §1.4); "*" allows any. Empty: a
    # request carrying an Origin header is refused with 403. Env: comma-separated.
    cors_origins: tuple[str, ...] = ()
    # Idempotency-Key records (POST /v1/runs, /v1/chat/completions) are kept this long, capped
    # at retention_seconds so a replay always finds the run it names.
    idempotency_ttl_seconds: int = 86_400
    # On SIGTERM an API process answers run-creating requests 503 gateway_draining for this long
    # (reads and open streams keep working) before it closes its listener.
    drain_grace_seconds: float = 5.0
    # Runs and streams
    stream_maxlen: int = 10_000
    retention_seconds: int = 86_400
    subscriber_queue_size: int = 1_000
    # A reply's deltas go out at most once per stream_coalesce_ms, merged (the first at once;
    # other events never wait): fewer stream entries, frames and Redis commands per token, for
    # up to this much added latency per delta. 0: deltas are merged only while an append is in
    # flight, which adds no latency.
    stream_coalesce_ms: float = 0.0
    # Workers
    worker_concurrency: int = 16
    lease_seconds: float = 10.0
    heartbeat_seconds: float = 1.0
    reaper_interval_seconds: float = 1.0
    max_attempts: int = 2
    job_timeout_seconds: int = 3_600
    drain_seconds: float = 30.0
    poll_seconds: float = 0.5
    # An approval request nobody answers within this many seconds is denied (upstream-api.md §4.3:
    # silence is not consent); the run then continues.
    approval_timeout_seconds: float = 60.0
    # Agents, providers and routes (upstream-api.md §6.3). Keys live in env vars or files named by
    # each provider entry, never here.
    agent_backend: str = "echo"
    echo_token_delay: float = 0.0
    # The echo backend's tool log: each execution of its fake tools appends lines here (JSON),
    # so tests can count executions across worker processes (agents/echo_tools.py).
    echo_tool_log: str = ""
    providers: dict[str, ProviderSettings] = field(default_factory=dict)
    model_routes: dict[str, RouteSettings] = field(default_factory=dict)
    default_provider: str = ""
    default_model: str = ""
    fallback_model: str = ""
    direct_model_requests: bool = False
    # The ``hermes`` backend (the real Hermes AIAgent, extra ``hermes-queue[hermes]``).
    # hermes_home: the HERMES_HOME its config, skills and state live in (empty: Hermes' own
    # default, ~/.hermes). hermes_toolsets: the toolsets its agent may use (empty: what Hermes
    # enables for its api_server platform). A worker keeps up to hermes_agent_cache_size agents
    # warm, one per recent session, so a session's next turn skips agent construction (0: off).
    hermes_home: str = ""
    hermes_toolsets: tuple[str, ...] = ()
    hermes_max_iterations: int = 90
    hermes_agent_cache_size: int = 64
    # Scheduled jobs (/api/jobs). Every worker looks for due ticks every
    # scheduler_interval_seconds (0: this worker fires none); cron expressions and times without
    # an offset are read in jobs_timezone (an IANA name).
    scheduler_interval_seconds: float = 1.0
    jobs_timezone: str = "UTC"
    # Sessions (SQL store)
    store_url: str = "sqlite:///.hermes-queue/hermes-queue.db"
    # PostgreSQL only: keep the tables in this schema (several deployments, or tests, per DB).
    store_schema: str = ""
    migrate_on_start: bool = True
    # Logging
    log_level: str = "INFO"
    # "text" (one human line) or "json" (one object per line, for log shippers).
    log_format: str = "text"
    # The event loop of the API, worker and dev processes: "auto" (uvloop when installed),
    # "asyncio" or "uvloop" (hermes_queue/loops.py).
    event_loop: str = "auto"
    # Operations. Workers serve Prometheus metrics on metrics_host:metrics_port (0: off), or on
    # the next free port of the metrics_port_span ports from there when several workers share a
    # host; the API serves GET /metrics, behind the API key unless metrics_public.
    metrics_port: int = 9108
    metrics_port_span: int = 16
    metrics_host: str = "127.0.0.1"
    metrics_public: bool = False
    # Backpressure: run-creating endpoints answer 429 queue_full while the ready queue holds
    # max_ready_depth runs or its oldest waited max_ready_age_seconds (0: that limit is off).
    max_ready_depth: int = 0
    max_ready_age_seconds: float = 0.0
    # Period of the snapshots sent by GET /v1/queue/stream.
    queue_stream_interval_seconds: float = 1.0

    def __post_init__(self) -> None:
        # One normalisation of the key for the guard, auth and every "is a key set?" check.
        object.__setattr__(self, "api_key", normalize_key(self.api_key))

    def __repr__(self) -> str:
        shown = []
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in _SECRET_FIELDS and value:
                value = "***"
            shown.append(f"{f.name}={value!r}")
        return f"Settings({', '.join(shown)})"

    def replace(self, **changes: Any) -> Settings:
        return dataclasses.replace(self, **changes)

    def validate(self) -> Settings:
        if not self.namespace or any(c in self.namespace for c in "{}: \t\n"):
            raise ConfigError(
                f"namespace {self.namespace!r} must be non-empty without {{}}, ':' or spaces"
            )
        if self.lease_seconds <= self.heartbeat_seconds * 2:
            raise ConfigError("lease_seconds must be more than twice heartbeat_seconds")
        for name in (
            "worker_concurrency",
            "max_attempts",
            "stream_maxlen",
            "subscriber_queue_size",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1")
        if self.hermes_max_iterations < 1:
            raise ConfigError("hermes_max_iterations must be at least 1")
        for name in (
            "max_ready_depth",
            "max_ready_age_seconds",
            "hermes_agent_cache_size",
            "redis_min_replicas",
            "stream_coalesce_ms",
        ):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be 0 (off) or positive")
        if not 0 <= self.metrics_port <= 65535:
            raise ConfigError("metrics_port must be 0 (off) or a TCP port")
        if self.metrics_port_span < 1 or self.metrics_port + self.metrics_port_span > 65536:
            raise ConfigError("metrics_port_span must be at least 1 and end at a TCP port")
        if self.idempotency_ttl_seconds < 1:
            raise ConfigError("idempotency_ttl_seconds must be at least 1")
        for name in ("idle_timeout_seconds", "body_timeout_seconds"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive")
        if self.drain_grace_seconds < 0:
            raise ConfigError("drain_grace_seconds must be 0 (off) or positive")
        if self.approval_timeout_seconds <= 0:
            raise ConfigError("approval_timeout_seconds must be positive")
        if self.scheduler_interval_seconds < 0:
            raise ConfigError("scheduler_interval_seconds must be 0 (off) or positive")
        try:
            ZoneInfo(self.jobs_timezone)
        except (ValueError, ZoneInfoNotFoundError):
            raise ConfigError(f"jobs_timezone {self.jobs_timezone!r} is not a time zone") from None
        if self.queue_stream_interval_seconds <= 0:
            raise ConfigError("queue_stream_interval_seconds must be positive")
        if self.event_loop not in EVENT_LOOPS:
            raise ConfigError(
                f"event_loop must be one of {', '.join(map(repr, EVENT_LOOPS))}, "
                f"not {self.event_loop!r}"
            )
        if self.log_format not in LOG_FORMATS:
            raise ConfigError(
                f"log_format must be one of {', '.join(map(repr, LOG_FORMATS))}, "
                f"not {self.log_format!r}"
            )
        for alias, route in self.model_routes.items():
            if route.provider and route.provider not in self.providers:
                raise ConfigError(
                    f"model route {alias!r} names unknown provider {route.provider!r}"
                )
        fallback_provider, separator, _ = self.fallback_model.rpartition("::")
        if separator and fallback_provider not in self.providers:
            raise ConfigError(f"fallback_model names unknown provider {fallback_provider!r}")
        if self.default_provider and self.default_provider not in self.providers:
            raise ConfigError(f"default_provider {self.default_provider!r} is not configured")
        return self


_TABLE_PARSERS = {"providers": parse_providers, "model_routes": parse_routes}


def _cast(name: str, raw: Any, default: Any) -> Any:
    """Cast a raw env/file value to the type of the field's default; errors name the setting."""
    if name in _TABLE_PARSERS:
        try:
            return _TABLE_PARSERS[name](raw)
        except ProviderConfigError as exc:
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
        raise ConfigError(
            f"setting {name!r} has value {text!r}, which is not a valid {kind.__name__}"
        ) from None
    return text


def load_settings(
    environ: Mapping[str, str] | None = None, config_file: str | Path | None = None
) -> Settings:
    """Build settings from a file and the environment. Call once per process."""
    env = os.environ if environ is None else environ
    defaults = Settings()
    known = {f.name: getattr(defaults, f.name) for f in fields(Settings)}
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
    return Settings(**values).validate()


def settings_env(settings: Settings) -> dict[str, str]:
    """The environment that reproduces ``settings`` in a child process (dev mode, tests)."""
    out: dict[str, str] = {}
    for f in fields(settings):
        value = getattr(settings, f.name)
        if f.name in _TABLE_PARSERS:
            text = to_json(value)
        elif isinstance(value, tuple):
            text = ",".join(value)
        else:
            text = str(value).lower() if isinstance(value, bool) else str(value)
        out[ENV_PREFIX + f.name.upper()] = text
    return out


__all__ = ["ConfigError", "Settings", "load_settings", "settings_env"]
