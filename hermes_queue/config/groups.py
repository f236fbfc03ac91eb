"""The settings groups: one per part of the code that reads them.

A component is handed its group (or the values it needs) by the process that builds it, never
the whole :class:`Settings` (``settings.py``), so what it depends on is in its signature (arq's
style: explicit arguments, the settings object read at the edge). The names outside stay flat:
each field knows its flat name (``RedisSettings.url`` is ``redis_url``,
``HERMES_QUEUE_REDIS_URL``). The webhook group lives beside what it holds
(``webhook_config.py``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from hermes_queue.config.base import (
    ConfigError,
    Group,
    at_least,
    bad_value,
    named,
    not_negative,
)
from hermes_queue.config.urls import (
    REDIS_EXPECTED,
    STORE_EXPECTED,
    redis_url_problem,
    store_url_problem,
)
from hermes_queue.keyguard import normalize_key
from hermes_queue.keys import Keys
from hermes_queue.logs import LOG_FORMATS, mask_url
from hermes_queue.providers import ProviderSettings, RouteSettings
from hermes_queue.tenancy.keys import TenantKey, TenantKeyError, configured_keys, tenant_problem
from hermes_queue.tenancy.limits import LimitError, TenantLimits, tenant_limits

EVENT_LOOPS = ("auto", "asyncio", "uvloop")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


@dataclass(frozen=True, repr=False)
class RedisSettings(Group):
    url: str = named("redis_url", "redis://127.0.0.1:6379/0")
    namespace: str = "hq"
    # Connections per process pool (requests wait for one rather than open more).
    pool_size: int = named("redis_pool_size", 32)
    # Virtual shards on a Redis Cluster (a ``redis+cluster://`` URL): runs, queues, leases and
    # stats are spread over this many hash tags (keys.py), so over up to this many primaries.
    # Changing it moves run ids to other shards: change it only on an empty deployment.
    cluster_shards: int = named("redis_cluster_shards", 16)
    # A call that cannot reach a writable primary in a way that proves it was not applied (no
    # connection, no primary named yet, READONLY from a demoted one) is retried for up to this
    # long, so requests wait out a primary switchover instead of failing (redisio/switchover.py).
    # A call that may have been applied is never retried. 0: fail at once.
    switchover_wait_seconds: float = named("redis_switchover_wait_seconds", 5.0)

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
        at_least(self.cluster_shards, 1, "redis_cluster_shards")
        not_negative(self.switchover_wait_seconds, "redis_switchover_wait_seconds")


@dataclass(frozen=True, repr=False)
class RunSettings(Group):
    """What the run scripts and a claimed attempt's writes need (``runs/``, the worker's sink)."""

    retention_seconds: int = 86_400
    stream_maxlen: int = 10_000
    # A reply's deltas go out at most once per stream_coalesce_ms, merged (the first at once,
    # so time to first token is unchanged; other events never wait, but for the agent's
    # progress note, which goes with the deltas or the event after it): fewer stream entries,
    # frames and Redis commands per token, for up to this much added latency per delta. 80 ms
    # is below what a reader can tell apart (a perceptual moment is ~100 ms; a word takes a
    # reader ~240 ms) and halves Redis CPU per token at 50 tokens/s (docs/performance.md,
    # Redis CPU per token). 0: deltas are merged only while an append is in flight (no added
    # latency).
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
    min_replicas: int = named("redis_min_replicas", 0)
    # Fair turns (runs/lua/prelude.lua enqueue): comma-separated tenant=weight pairs; a tenant
    # with weight 2 takes two turns to another's one while both have runs queued. Unnamed
    # tenants weigh 1.
    tenant_weights: str = ""
    # Per-tenant limits (tenancy/limits.py, docs/tenants.md "Limits"): tenant=value pairs, '*'
    # for every tenant not named (never the operator's 'default'), 0 for none.
    tenant_max_running: str = ""
    tenant_max_ready: str = ""
    tenant_max_rate: str = ""

    def weight_of(self, tenant: str) -> float:
        return tenant_weights(self.tenant_weights).get(tenant, 1.0)

    @property
    def limits(self) -> TenantLimits:
        try:
            return tenant_limits(
                self.tenant_max_running, self.tenant_max_ready, self.tenant_max_rate
            )
        except LimitError as exc:
            raise ConfigError(str(exc)) from None

    def validate(self) -> None:
        tenant_weights(self.tenant_weights)
        _ = self.limits
        if self.lease_seconds <= self.heartbeat_seconds * 2:
            raise ConfigError(
                f"lease_seconds ({self.lease_seconds}) must be more than twice "
                f"heartbeat_seconds ({self.heartbeat_seconds})"
            )
        at_least(self.max_attempts, 1, "max_attempts")
        at_least(self.stream_maxlen, 1, "stream_maxlen")
        not_negative(self.min_replicas, "redis_min_replicas")
        not_negative(self.stream_coalesce_ms, "stream_coalesce_ms")
        if self.approval_timeout_seconds <= 0:
            raise ConfigError("approval_timeout_seconds must be positive")


@functools.cache
def tenant_weights(text: str) -> dict[str, float]:
    """``tenant_weights`` read: tenant -> weight (a positive number); raises ``ConfigError``."""
    weights: dict[str, float] = {}
    for pair in (p.strip() for p in text.split(",")):
        if not pair:
            continue
        tenant, sep, value = (part.strip() for part in pair.partition("="))
        problem = tenant_problem(tenant) if sep else "no '=' between tenant and weight"
        if problem is None:
            try:
                weight = float(value)
            except ValueError:
                weight = 0.0
            if not 0 < weight <= 1000:
                problem = f"weight {value[:20]!r} is not a number above 0 and up to 1000"
            weights[tenant] = weight
        if problem is not None:
            raise ConfigError(f"tenant_weights: {pair[:60]!r}: {problem}")
    return weights


@dataclass(frozen=True, repr=False)
class ApiSettings(Group):
    host: str = "127.0.0.1"
    port: int = 8642
    # The operator's key (tenant "default"): it alone reaches the operator surfaces.
    api_key: str = field(default="", metadata={"secret": True})
    # Tenant keys (tenancy/keys.py, docs/tenants.md): comma-separated tenant=key pairs, and the same
    # one a line from api_keys_file (a secrets mount); a key may be given as sha256:<hex>.
    api_keys: str = field(default="", metadata={"secret": True})
    api_keys_file: str = ""
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

    def tenant_keys(self) -> list[TenantKey]:
        """Every configured key (the operator's first); raises ``ConfigError``."""
        try:
            return configured_keys(self.api_key, self.api_keys, self.api_keys_file)
        except TenantKeyError as exc:
            raise ConfigError(str(exc)) from None

    def validate(self) -> None:
        self.tenant_keys()
        not_negative(self.max_ready_depth, "max_ready_depth")
        not_negative(self.max_ready_age_seconds, "max_ready_age_seconds")
        at_least(self.idempotency_ttl_seconds, 1, "idempotency_ttl_seconds")
        for name in ("idle_timeout_seconds", "body_timeout_seconds"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive")
        not_negative(self.drain_grace_seconds, "drain_grace_seconds")
        not_negative(self.stream_drain_seconds, "stream_drain_seconds")
        if self.queue_stream_interval_seconds <= 0:
            raise ConfigError("queue_stream_interval_seconds must be positive")


@dataclass(frozen=True, repr=False)
class StreamSettings(Group):
    """The API process's stream hub (``streams/hub.py``)."""

    subscriber_queue_size: int = 1_000

    def validate(self) -> None:
        at_least(self.subscriber_queue_size, 1, "subscriber_queue_size")


@dataclass(frozen=True, repr=False)
class WorkerSettings(Group):
    concurrency: int = named("worker_concurrency", 16)
    job_timeout_seconds: int = 3_600
    drain_seconds: float = 30.0
    poll_seconds: float = 0.5

    def validate(self) -> None:
        at_least(self.concurrency, 1, "worker_concurrency")


@dataclass(frozen=True, repr=False)
class AgentSettings(Group):
    """The worker's agent backend and its options."""

    backend: str = named("agent_backend", "echo")
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
        not_negative(self.hermes_agent_cache_size, "hermes_agent_cache_size")


@dataclass(frozen=True, repr=False)
class RoutingSettings(Group):
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
class ScheduleSettings(Group):
    """Scheduled jobs (/api/jobs). Every worker looks for due ticks every ``interval_seconds``
    (0: this worker fires none); cron expressions and times without an offset are read in
    ``timezone`` (an IANA name)."""

    interval_seconds: float = named("scheduler_interval_seconds", 1.0)
    timezone: str = named("jobs_timezone", "UTC")

    def validate(self) -> None:
        not_negative(self.interval_seconds, "scheduler_interval_seconds")
        try:
            ZoneInfo(self.timezone)
        except (ValueError, ZoneInfoNotFoundError):
            raise ConfigError(f"jobs_timezone {self.timezone!r} is not a time zone") from None


@dataclass(frozen=True, repr=False)
class StoreSettings(Group):
    """The SQL session store."""

    url: str = named("store_url", "sqlite:///.hermes-queue/hermes-queue.db")
    # PostgreSQL only: keep the tables in this schema (several deployments, or tests, per DB).
    schema: str = named("store_schema", "")
    migrate_on_start: bool = True

    def validate(self) -> None:
        problem = store_url_problem(self.url)
        if problem is not None:
            raise bad_value("store_url", mask_url(self.url), problem, STORE_EXPECTED)


@dataclass(frozen=True, repr=False)
class MetricsSettings(Group):
    """Workers serve Prometheus metrics on host:port (0: off), or on the next free port of the
    port_span ports from there when several workers share a host; the API serves GET /metrics,
    behind the API key unless ``public``."""

    port: int = named("metrics_port", 9108)
    port_span: int = named("metrics_port_span", 16)
    host: str = named("metrics_host", "127.0.0.1")
    public: bool = named("metrics_public", False)

    def validate(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError("metrics_port must be 0 (off) or a TCP port")
        if self.port_span < 1 or self.port + self.port_span > 65536:
            raise ConfigError("metrics_port_span must be at least 1 and end at a TCP port")


@dataclass(frozen=True, repr=False)
class ProcessSettings(Group):
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
