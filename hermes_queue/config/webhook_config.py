"""What the webhook settings hold beyond plain values: the deployment's subscriptions (a table,
like ``providers``), the retry schedule (durations) and the signing secrets (``whsec_…``).

Parsed here, below everything that reads them, so that ``config/`` checks a bad value when the
process starts (the message names the setting) and ``webhooks/`` only ever sees good ones. The
webhook settings group, :class:`WebhookSettings`, is at the end.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hermes_queue.config.base import ConfigError, Group, at_least, named, not_negative
from hermes_queue.urls import http_url

# The event types a delivery is made for (docs/deploy.md, "Webhooks"). A run's own webhook
# (the ``webhook`` of the request that started it) gets its terminal one; a subscription gets
# the ones it names.
RUN_EVENTS = ("run.completed", "run.failed", "run.cancelled")
EVENT_TYPES = (*RUN_EVENTS, "approval.requested")

# The Standard Webhooks example schedule: after the first attempt (at once), these waits.
DEFAULT_SCHEDULE = ("5s", "5m", "30m", "2h", "5h", "10h", "10h")

_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
SECRET_PREFIX = "whsec_"


class WebhookConfigError(ValueError):
    """A webhook setting cannot be used; the message names it."""


@dataclass(frozen=True)
class Subscription:
    """A deployment-level subscription: every run's events of ``events`` go to ``url``. Its
    name is its identity (a delivery's ``webhook-id`` derives from it), so its URL, which may
    itself be a secret (a chat tool's incoming-webhook URL), is never stored with a delivery."""

    name: str
    url: str
    events: tuple[str, ...] = EVENT_TYPES


def _table(raw: Any) -> dict[str, Any]:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except ValueError:
            raise WebhookConfigError(
                "webhook_subscriptions must be a JSON object or a TOML table"
            ) from None
    if not isinstance(raw, dict):
        raise WebhookConfigError("webhook_subscriptions must be a table of named entries")
    return raw


def parse_subscriptions(raw: Any) -> dict[str, Subscription]:
    """``{"name": {"url": "https://…", "events": ["run.failed", …]}, …}`` (``events``
    optional: every type)."""
    out: dict[str, Subscription] = {}
    for name, entry in _table(raw).items():
        where = f"webhook subscription {name!r}"
        if not _NAME.match(name) or not isinstance(entry, dict):
            raise WebhookConfigError(f"{where} must be a table with a valid name")
        unknown = set(entry) - {"url", "events"}
        if unknown:
            raise WebhookConfigError(f"{where}: unknown key(s) {sorted(unknown)}")
        url = entry.get("url")
        if not isinstance(url, str) or not http_url(url):
            raise WebhookConfigError(f"{where}: url must be an absolute http(s) URL")
        events = entry.get("events", list(EVENT_TYPES))
        if not isinstance(events, list) or not events or any(e not in EVENT_TYPES for e in events):
            raise WebhookConfigError(f"{where}: events must be a list of {list(EVENT_TYPES)}")
        out[name] = Subscription(name, url, tuple(dict.fromkeys(events)))
    return out


def subscriptions_json(entries: Mapping[str, Subscription]) -> str:
    """The environment's form (JSON) of parsed subscriptions, for child processes."""
    return json.dumps({n: {"url": s.url, "events": list(s.events)} for n, s in entries.items()})


def duration_seconds(text: str) -> float:
    """``500ms``, ``5s``, ``5m``, ``2h``, ``1d`` or a bare number of seconds."""
    found = _DURATION.match(text)
    if found is None:
        raise WebhookConfigError(f"webhook_retry_schedule: {text!r} is not a duration")
    return float(found.group(1)) * _UNIT_SECONDS[found.group(2) or "s"]


def secret_key(secret: str) -> bytes:
    """The HMAC key of a ``whsec_<base64>`` secret (the Standard Webhooks form)."""
    if not secret.startswith(SECRET_PREFIX):
        raise WebhookConfigError("webhook_secret: each secret must start with 'whsec_'")
    body = secret[len(SECRET_PREFIX) :]
    try:
        key = base64.b64decode(body + "=" * (-len(body) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise WebhookConfigError("webhook_secret: the part after 'whsec_' must be base64") from None
    if len(key) < 16:
        raise WebhookConfigError("webhook_secret: a secret must hold at least 16 bytes")
    return key


@dataclass(frozen=True, repr=False)
class WebhookSettings(Group):
    """Completion webhooks (``hermes_queue/webhooks/``, docs/deploy.md "Webhooks"): signed to
    the Standard Webhooks spec with every secret of ``secret`` (``whsec_…``, comma-separated:
    one signature each, for rotation), sent by the workers on ``retry_schedule`` (the waits
    after the first attempt), each attempt cut after ``timeout_seconds``. A target whose
    address is loopback, private, link-local, multicast or unspecified is refused at connect
    time unless its host (a name, an address or a network) is in ``allowed_hosts``."""

    secret: tuple[str, ...] = field(default=(), metadata={"name": "webhook_secret", "secret": True})
    allowed_hosts: tuple[str, ...] = named("webhook_allowed_hosts", ())
    subscriptions: dict[str, Subscription] = field(
        default_factory=dict, metadata={"name": "webhook_subscriptions"}
    )
    retry_schedule: tuple[str, ...] = named("webhook_retry_schedule", DEFAULT_SCHEDULE)
    timeout_seconds: float = named("webhook_timeout_seconds", 15.0)
    # How often each worker looks for due deliveries (every shard: one script call each); 0:
    # this worker sends none (they wait in Redis for a worker that does).
    poll_seconds: float = named("webhook_poll_seconds", 1.0)
    # Deliveries one worker sends at once.
    concurrency: int = named("webhook_concurrency", 16)
    # How long a dead letter (schedule exhausted, 410 Gone, target refused) is kept, listed
    # and redeliverable; a delivered one is kept retention_seconds.
    dead_letter_seconds: int = named("webhook_dead_letter_seconds", 7 * 86_400)

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
        not_negative(self.poll_seconds, "webhook_poll_seconds")
        at_least(self.concurrency, 1, "webhook_concurrency")
        at_least(self.dead_letter_seconds, 1, "webhook_dead_letter_seconds")
