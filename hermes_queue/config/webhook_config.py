"""What the webhook settings hold beyond plain values: the deployment's subscriptions (a table,
like ``providers``), the retry schedule (durations) and the signing secrets (``whsec_…``).

Parsed here, below everything that reads them, so that ``config/`` checks a bad value when the
process starts (the message names the setting) and ``webhooks/`` only ever sees good ones.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

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
