"""Operator commands ``webhooks list`` and ``webhooks redeliver``: webhook deliveries read and
redelivered from Redis directly (``webhooks/outbox.py``), like ``status`` and ``runs``, so they
answer when every API replica is down."""

from __future__ import annotations

import json
import time

import click
from rich.console import Console

from hermes_queue.cli.formatting import age, table
from hermes_queue.cli.ops import OpsError, read
from hermes_queue.config import Settings
from hermes_queue.webhooks.outbox import Delivery, Outbox


def _outbox(redis: object, settings: Settings) -> Outbox:
    return Outbox(redis, settings.redis.keys)  # type: ignore[arg-type]


def _last(delivery: Delivery) -> str:
    if not delivery.attempts:
        return "-"
    last = delivery.attempts[-1]
    return str(last.status) if last.status is not None else last.outcome


def deliveries_list(settings: Settings, *, state: str | None, limit: int, as_json: bool) -> None:
    found = read(settings, lambda r: _outbox(r, settings).recent(limit, state))
    if as_json:
        click.echo(json.dumps([d.to_json() for d in found], indent=2))
        return
    title = "Dead letters" if state == "dead" else "Webhook deliveries"
    listing = table(
        "id", "run", "event", "target", "state", "attempts>", "last>", "age>", title=title
    )
    now = time.time()
    for d in found:
        listing.add_row(
            d.id,
            d.run_id,
            d.event,
            d.target,
            d.state,
            str(len(d.attempts)),
            _last(d),
            age(max(0.0, now - d.created_at)),
        )
    Console().print(listing)
    errors = [(d.id, d.attempts[-1].error) for d in found if d.attempts and d.attempts[-1].error]
    for delivery_id, error in errors[:5]:
        click.echo(f"{delivery_id}: {error}")


def redeliver(settings: Settings, delivery_id: str) -> None:
    if not read(settings, lambda r: _outbox(r, settings).redeliver(delivery_id)):
        raise OpsError(f"webhook delivery {delivery_id} not found (unknown, or expired)")
    click.echo(f"{delivery_id}: due now, on a fresh schedule (same webhook-id)")
