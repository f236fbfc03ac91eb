"""The settings, in groups: one per part of the code that reads them.

A component is handed its group (or the values it needs) by the process that builds it, never
the whole :class:`Settings`, so what it depends on is in its signature (arq's style: explicit
arguments, the settings object read at the edge). The names outside stay flat: each field
knows its flat name (``RedisSettings.url`` is ``redis_url``, ``HERMES_QUEUE_REDIS_URL``), and
:meth:`Settings.replace` and :meth:`Settings.of` take flat names, as the file and the
environment do (``config/__init__.py`` reads those).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from hermes_queue.config.urls import (
    REDIS_EXPECTED,
    STORE_EXPECTED,
    redis_url_problem,
    store_url_problem,
)
from hermes_queue.config.webhook_config import (
    DEFAULT_SCHEDULE,
    Subscription,
    WebhookConfigError,
    duration_seconds,
    secret_key,
)
from hermes_queue.keyguard import normalize_key
from hermes_queue.keys import Keys
from hermes_queue.logs import LOG_FORMATS, mask_url
from hermes_queue.providers import ProviderSettings, RouteSettings

EVENT_LOOPS = ("auto", "asyncio", "uvloop")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
ENV_PREFIX = "HERMES_QUEUE_"


class ConfigError(ValueError):
    """A setting has a value that cannot be used; the message names the setting. The command
    line prints it as one ``error: …`` line and exits 2 (``cli/failures.py``)."""


def bad_value(name: str, shown: str, problem: str, expected: str) -> ConfigError:
    """The one line a bad value gets: the setting and its variable, the value as it may be
    shown (``shown``: passwords already masked), what is wrong and what was expected."""
    variable = ENV_PREFIX + name.upper()
    return ConfigError(f"setting {name} ({variable}) = {shown!r} {problem}; expected {expected}")


def _named(name: str, default: Any) -> Any:
    """A field whose flat name (file key, ``HERMES_QUEUE_<NAME>``) differs from its own."""
    return field(default=default, metadata={"name": name})


def _flat_name(f: dataclasses.Field[Any]) -> str:
    return str(f.metadata.get("name", f.name))


def _at_least(value: float, minimum: float, name: str) -> None:
    if value < minimum:
        raise ConfigError(f"{name} must be at least {minimum}, not {value}")


def _not_negative(value: float, name: str) -> None:
    if value < 0:
        raise ConfigError(f"{name} must be 0 (off) or positive, not {value}")


class _Group:
    """What every group shares: a repr that masks secrets, a check of its own values."""

    def __repr__(self) -> str:
        shown = []
        for f in fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if f.metadata.get("secret") and value:
                value = "***"
            shown.append(f"{f.name}={value!r}")
        return f"{type(self).__name__}({', '.join(shown)})"

    def validate(self) -> None:
        """Raise ``ConfigError`` naming the flat setting whose value cannot be used."""


@dataclass(frozen=True, repr=False)
class RedisSettings(_Group):
    url: str = _named("redis_url", "redis://127.0.0.1:6379/0")
    namespace: str = "hq"
    # Connections per process pool (requests wait for one rather than open more).
    pool_size: int = _named("redis_pool_size", 32)
    # Virtual shards on a Redis Cluster (a ``redis+cluster://`` URL): runs, queues, leases and
    # stats are spread over this many hash tags (keys.py), so over up to this many primaries.
    # Changing it moves run ids to other shards: change it only on an empty deployment.
    cluster_shards: int = _named("redis_cluster_shards", 16)
    # A call that cannot reach a writable primary in a way that proves it was not applied (no
    # connection, no primary named yet, READONLY from a demoted one) is retried for up to this
    # long, so requests wait out a primary switchover instead of failing (redisio/switchover.py).
    # A call that may have been applied is never retried. 0: fail at once.
    switchover_wait_seconds: float = _named("redis_switchover_wait_seconds", 5.0)

    @property
    def cluster(self) -> bool:
        """Whether ``url`` names a Redis Cluster (``redis+cluster://``)."""
        return self.url.partition("://")[0].lower() == "redis+cluster"

    @property
    def keys(self) -> Keys:
        """The key names of this namespace (``keys.py``), sharded on a cluster."""
        if self.cluster:
            return Keys(self.namespace, shards=self.cluster_shards, cluster=True)
        return Keys(self.namespace)

    def validate(self) -> None:
        problem = redis_url_problem(self.url)
        if problem is not None:
            raise bad_value("redis_url", mask_url(self.url), problem, REDIS_EXPECTED)
        if not self.namespace or any(c in self.namespace for c in "{}: \t\n"):
            raise ConfigError(
                f"namespace {self.namespace!r} must be non-empty without {{}}, ':' or spaces"
            )
        _at_least(self.cluster_shards, 1, "redis_cluster_shards")
        _not_negative(self.switchover_wait_seconds, "redis_switchover_wait_seconds")


@dataclass(frozen=True, repr=False)
class RunSettings(_Group):
    """What the run scripts and a claimed attempt's writes need (``runs/``, the worker's sink)."""

    retention_seconds: int = 86_400
    stream_maxlen: int = 10_000
    # A reply's deltas go out at most once per stream_coalesce_ms, merged (the first at once,
    # so time to first token is unchanged; other events never wait): fewer stream entries,
    # frames and Redis commands per token, for up to this much added latency per delta. 80 ms
    # is below what a reader can tell apart (a perceptual moment is ~100 ms; a word takes a
    # reader ~240 ms) and halves Redis CPU per token at 50 tokens/s (docs/performance.md,
    # issue 25). 0: deltas are merged only while an append is in flight (no added latency).
    stream_coalesce_ms: float = 80.0
    lease_seconds: float = 10.0
    heartbeat_seconds: float = 1.0
    reaper_interval_seconds: float = 1.0
    max_attempts: int = 2
    # An approval request nobody answers within this many seconds is denied (upstream-api.md §4.3:
    # silence is not consent); the run then continues.
    approval_timeout_seconds: float = 60.0
    # Run creation, stop, approval answers and the terminal transition wait until this many
    # replicas acknowledged them (Redis WAIT), so a 2xx survives a failover (0: do not wait).
    min_replicas: int = _named("redis_min_replicas", 0)

    def validate(self) -> None:
        if self.lease_seconds <= self.heartbeat_seconds * 2:
            raise ConfigError(
                f"lease_seconds ({self.lease_seconds}) must be more than twice "
                f"heartbeat_seconds ({self.heartbeat_seconds})"
            )
        _at_least(self.max_attempts, 1, "max_attempts")
        _at_least(self.stream_maxlen, 1, "stream_maxlen")
        _not_negative(self.min_replicas, "redis_min_replicas")
        _not_negative(self.stream_coalesce_ms, "stream_coalesce_ms")
        if self.approval_timeout_seconds <= 0:
            raise ConfigError("approval_timeout_seconds must be positive")


@dataclass(frozen=True, repr=False)
class ApiSettings(_Group):
    host: str = "127.0.0.1"
    port: int = 8642
    api_key: str = field(default="", metadata={"secret": True})
    body_limit_bytes: int = 10_000_000
    # A connection waiting for a request (new, or kept alive between requests, including one
    # whose headers are still trickling in) is closed after idle_timeout_seconds; keep it above
    # your load balancer's idle timeout. A request body must arrive within body_timeout_seconds
    # (else 408). Responses being sent, SSE streams included, are never cut by either.
    idle_timeout_seconds: float = 75.0
    body_timeout_seconds: float = 30.0
    keepalive_seconds: float = 10.0
    # Browser origins allowed to call the API (upstream-api.md §1.4); "*" allows any. Empty: a
    # request carrying an Origin header is refused with 403. Env: comma-separated.
    cors_origins: tuple[str, ...] = ()
    # Idempotency-Key records (POST /v1/runs, /v1/chat/completions) are kept this long, capped
    # at retention_seconds so a replay always finds the run it names.
    idempotency_ttl_seconds: int = 86_400
    # On SIGTERM an API process reports not-ready (GET /health/ready: 503) and goes on serving
    # every request, new turns included: for at least drain_grace_seconds (what a load
    # balancer still routes here while it takes the replica out), then until each open stream's
    # run ends, at most stream_drain_seconds more; what is left then is closed (a Hermes stream
    # with a frame its client resumes from elsewhere). An orchestrator's grace period must
    # exceed its pre-stop delay + drain_grace_seconds + stream_drain_seconds (api/drain.py).
    drain_grace_seconds: float = 5.0
    stream_drain_seconds: float = 300.0
    # Backpressure: run-creating endpoints answer 429 queue_full while the ready queue holds
    # max_ready_depth runs or its oldest waited max_ready_age_seconds (0: that limit is off).
    max_ready_depth: int = 0
    max_ready_age_seconds: float = 0.0
    # Period of the snapshots sent by GET /v1/queue/stream.
    queue_stream_interval_seconds: float = 1.0

    def __post_init__(self) -> None:
        # One normalisation of the key for the guard, auth and every "is a key set?" check.
        object.__setattr__(self, "api_key", normalize_key(self.api_key))

    def validate(self) -> None:
        _not_negative(self.max_ready_depth, "max_ready_depth")
        _not_negative(self.max_ready_age_seconds, "max_ready_age_seconds")
        _at_least(self.idempotency_ttl_seconds, 1, "idempotency_ttl_seconds")
        for name in ("idle_timeout_seconds", "body_timeout_seconds"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive")
        _not_negative(self.drain_grace_seconds, "drain_grace_seconds")
        _not_negative(self.stream_drain_seconds, "stream_drain_seconds")
        if self.queue_stream_interval_seconds <= 0:
            raise ConfigError("queue_stream_interval_seconds must be positive")


@dataclass(frozen=True, repr=False)
class StreamSettings(_Group):
    """The API process's stream hub (``streams/hub.py``)."""

    subscriber_queue_size: int = 1_000

    def validate(self) -> None:
        _at_least(self.subscriber_queue_size, 1, "subscriber_queue_size")


@dataclass(frozen=True, repr=False)
class WorkerSettings(_Group):
    concurrency: int = _named("worker_concurrency", 16)
    job_timeout_seconds: int = 3_600
    drain_seconds: float = 30.0
    poll_seconds: float = 0.5

    def validate(self) -> None:
        _at_least(self.concurrency, 1, "worker_concurrency")


@dataclass(frozen=True, repr=False)
class AgentSettings(_Group):
    """The worker's agent backend and its options."""

    backend: str = _named("agent_backend", "echo")
    echo_token_delay: float = 0.0
    # The echo backend's tool log: each execution of its fake tools appends lines here (JSON),
    # so tests can count executions across worker processes (agents/echo_tools.py).
    echo_tool_log: str = ""
    # The ``hermes`` backend (the real Hermes AIAgent, extra ``hermes-queue[hermes]``).
    # hermes_home: the HERMES_HOME its config, skills and state live in (empty: Hermes' own
    # default, ~/.hermes). hermes_toolsets: the toolsets its agent may use (empty: what Hermes
    # enables for its api_server platform). A worker keeps up to hermes_agent_cache_size agents
    # warm, one per recent session, so a session's next turn skips agent construction (0: off).
    hermes_home: str = ""
    hermes_toolsets: tuple[str, ...] = ()
    hermes_max_iterations: int = 90
    hermes_agent_cache_size: int = 64

    def validate(self) -> None:
        if self.hermes_max_iterations < 1:
            raise ConfigError("hermes_max_iterations must be at least 1")
        _not_negative(self.hermes_agent_cache_size, "hermes_agent_cache_size")


@dataclass(frozen=True, repr=False)
class RoutingSettings(_Group):
    """Providers and routes (upstream-api.md §6.3), read by ``routing/configured.py`` and the
    worker's backend. Keys live in env vars or files named by each provider entry, never here."""

    model_name: str = "hermes-agent"
    providers: dict[str, ProviderSettings] = field(default_factory=dict)
    model_routes: dict[str, RouteSettings] = field(default_factory=dict)
    default_provider: str = ""
    default_model: str = ""
    fallback_model: str = ""
    direct_model_requests: bool = False

    def validate(self) -> None:
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


@dataclass(frozen=True, repr=False)
class ScheduleSettings(_Group):
    """Scheduled jobs (/api/jobs). Every worker looks for due ticks every ``interval_seconds``
    (0: this worker fires none); cron expressions and times without an offset are read in
    ``timezone`` (an IANA name)."""

    interval_seconds: float = _named("scheduler_interval_seconds", 1.0)
    timezone: str = _named("jobs_timezone", "UTC")

    def validate(self) -> None:
        _not_negative(self.interval_seconds, "scheduler_interval_seconds")
        try:
            ZoneInfo(self.timezone)
        except (ValueError, ZoneInfoNotFoundError):
            raise ConfigError(f"jobs_timezone {self.timezone!r} is not a time zone") from None


@dataclass(frozen=True, repr=False)
class StoreSettings(_Group):
    """The SQL session store."""

    url: str = _named("store_url", "sqlite:///.hermes-queue/hermes-queue.db")
    # PostgreSQL only: keep the tables in this schema (several deployments, or tests, per DB).
    schema: str = _named("store_schema", "")
    migrate_on_start: bool = True

    def validate(self) -> None:
        problem = store_url_problem(self.url)
        if problem is not None:
            raise bad_value("store_url", mask_url(self.url), problem, STORE_EXPECTED)


@dataclass(frozen=True, repr=False)
class MetricsSettings(_Group):
    """Workers serve Prometheus metrics on host:port (0: off), or on the next free port of the
    port_span ports from there when several workers share a host; the API serves GET /metrics,
    behind the API key unless ``public``."""

    port: int = _named("metrics_port", 9108)
    port_span: int = _named("metrics_port_span", 16)
    host: str = _named("metrics_host", "127.0.0.1")
    public: bool = _named("metrics_public", False)

    def validate(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError("metrics_port must be 0 (off) or a TCP port")
        if self.port_span < 1 or self.port + self.port_span > 65536:
            raise ConfigError("metrics_port_span must be at least 1 and end at a TCP port")


@dataclass(frozen=True, repr=False)
class ProcessSettings(_Group):
    """How every process (API, worker, dev) runs: its logs and its event loop."""

    log_level: str = "INFO"
    # "text" (one human line) or "json" (one object per line, for log shippers).
    log_format: str = "text"
    # "auto" (uvloop when installed), "asyncio" or "uvloop" (hermes_queue/loops.py).
    event_loop: str = "auto"

    def validate(self) -> None:
        if self.log_level.upper() not in LOG_LEVELS:
            raise bad_value("log_level", self.log_level, "is not a level", ", ".join(LOG_LEVELS))
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


@dataclass(frozen=True, repr=False)
class WebhookSettings(_Group):
    """Completion webhooks (``hermes_queue/webhooks/``, docs/deploy.md "Webhooks"): signed to
    the Standard Webhooks spec with every secret of ``secret`` (``whsec_…``, comma-separated:
    one signature each, for rotation), sent by the workers on ``retry_schedule`` (the waits
    after the first attempt), each attempt cut after ``timeout_seconds``. A target whose
    address is loopback, private, link-local, multicast or unspecified is refused at connect
    time unless its host (a name, an address or a network) is in ``allowed_hosts``."""

    secret: tuple[str, ...] = field(default=(), metadata={"name": "webhook_secret", "secret": True})
    allowed_hosts: tuple[str, ...] = _named("webhook_allowed_hosts", ())
    subscriptions: dict[str, Subscription] = field(
        default_factory=dict, metadata={"name": "webhook_subscriptions"}
    )
    retry_schedule: tuple[str, ...] = _named("webhook_retry_schedule", DEFAULT_SCHEDULE)
    timeout_seconds: float = _named("webhook_timeout_seconds", 15.0)
    # How often each worker looks for due deliveries (every shard: one script call each); 0:
    # this worker sends none (they wait in Redis for a worker that does).
    poll_seconds: float = _named("webhook_poll_seconds", 1.0)
    # Deliveries one worker sends at once.
    concurrency: int = _named("webhook_concurrency", 16)
    # How long a dead letter (schedule exhausted, 410 Gone, target refused) is kept, listed
    # and redeliverable; a delivered one is kept retention_seconds.
    dead_letter_seconds: int = _named("webhook_dead_letter_seconds", 7 * 86_400)

    @property
    def retry_delays(self) -> tuple[float, ...]:
        """The waits before the second, third, … attempt, in seconds."""
        return tuple(duration_seconds(step) for step in self.retry_schedule)

    @property
    def claim_seconds(self) -> float:
        """How long a sender holds a delivery it took: one attempt's bound and a margin, so
        a sender killed mid-attempt leaves it to another sender this long after."""
        return self.timeout_seconds + 5.0

    def validate(self) -> None:
        try:
            for secret in self.secret:
                secret_key(secret)
            self.retry_delays  # noqa: B018 - parsed to check
        except WebhookConfigError as exc:
            raise ConfigError(str(exc)) from None
        if self.timeout_seconds <= 0:
            raise ConfigError("webhook_timeout_seconds must be positive")
        _not_negative(self.poll_seconds, "webhook_poll_seconds")
        _at_least(self.concurrency, 1, "webhook_concurrency")
        _at_least(self.dead_letter_seconds, 1, "webhook_dead_letter_seconds")


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


# flat name -> (group, field): the one table between the outside's names and the groups.
FLAT: dict[str, tuple[str, str]] = {
    _flat_name(f): (group.name, f.name)
    for group in fields(Settings)
    for f in fields(getattr(Settings(), group.name))
}
