"""What a run event turns into: one delivery per target, each with its id and body.

The script that ends a run queues ``e:<run_id>`` in its shard's outbox, the one that asks for
an approval ``a:<run_id>:<request_id>`` (``runs/lua/prelude.lua``, ``request_approval.lua``). A
sender turns such an event into its deliveries (``outbox.Outbox.expand``), reading the run
record once: the body is fixed then, so every retry sends the same bytes under the same
``webhook-id``.

The body is the run's ``hermes.run`` object as ``GET /v1/runs/{id}`` shows it, with the event's
``type`` (the Standard Webhooks payload field) beside its fields; an approval request's body
holds that request under ``approval``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from hermes_queue.config.webhook_config import Subscription
from hermes_queue.runs.model import TERMINAL_STATUSES, RunRecord

RUN_END = "e:"
APPROVAL = "a:"
# A delivery to the run's own webhook; a subscription's target is ``sub:<name>``.
RUN_TARGET = "run"
SUBSCRIPTION_PREFIX = "sub:"


@dataclass(frozen=True)
class RunEvent:
    """An outbox member naming a run event: the run's end, or one of its approval requests."""

    member: str
    run_id: str
    request_id: str = ""

    @classmethod
    def parse(cls, member: str) -> RunEvent | None:
        if member.startswith(RUN_END):
            return cls(member, member[len(RUN_END) :])
        if member.startswith(APPROVAL):
            run_id, _, request_id = member[len(APPROVAL) :].partition(":")
            return cls(member, run_id, request_id) if request_id else None
        return None

    @property
    def is_end(self) -> bool:
        return not self.request_id


def delivery_id(event_member: str, target: str, run_id: str) -> str:
    """The delivery's id, its ``webhook-id``: the same for every attempt, derived from the run
    event and the target (so an expansion repeated after a lost sender creates nothing new),
    ending with the run id (so the id alone says which shard holds it)."""
    digest = hashlib.sha256(f"{event_member}|{target}".encode()).hexdigest()[:16]
    return f"msg_{digest}_{run_id}"


def run_id_of(delivery: str) -> str | None:
    """The run a delivery id names (None: not a delivery id)."""
    if not delivery.startswith("msg_") or len(delivery) < 22 or delivery[20] != "_":
        return None
    return delivery[21:] or None


def run_delivery_id(run_id: str) -> str:
    """The id of the delivery of a run's end to its own webhook."""
    return delivery_id(RUN_END + run_id, RUN_TARGET, run_id)


@dataclass(frozen=True)
class NewDelivery:
    """A delivery as an expansion creates it (its hash's first fields)."""

    id: str
    run_id: str
    event_type: str
    target: str
    body: str
    # The run's own webhook URL; a subscription's is read from the settings at each attempt.
    url: str = ""
    # The run's W3C trace context (JSON), which the attempt spans join when tracing is on.
    trace: str = ""

    def fields(self) -> dict[str, str]:
        fields = {
            "run_id": self.run_id,
            "event": self.event_type,
            "target": self.target,
            "body": self.body,
        }
        if self.url:
            fields["url"] = self.url
        if self.trace:
            fields["trace"] = self.trace
        return fields


def _body(event_type: str, status: dict[str, Any]) -> str:
    return json.dumps({"type": event_type, **status}, ensure_ascii=False, separators=(",", ":"))


def _approval_body(record: RunRecord, raw: dict[Any, Any], request_id: str) -> dict[str, Any]:
    status = record.to_status()
    value = raw.get(f"approval:{request_id}".encode(), raw.get(f"approval:{request_id}"))
    request = json.loads(value) if value else {}
    status["approval"] = {"request_id": request_id, **request} if request else None
    return status


def deliveries(
    event: RunEvent,
    raw: dict[Any, Any],
    subscriptions: dict[str, Subscription],
) -> list[NewDelivery]:
    """The deliveries ``event`` makes, given its run's record (``raw``: the hash as read):
    to the run's own webhook for its end, and to each subscription of the event's type."""
    record = RunRecord.from_hash(raw)
    if event.is_end:
        if record.status not in TERMINAL_STATUSES:
            return []  # never queued for a run that did not end; a stray member
        event_type = f"run.{record.status}"
        status = record.to_status()
    else:
        event_type = "approval.requested"
        status = _approval_body(record, raw, event.request_id)
    body = _body(event_type, status)
    trace = json.dumps(record.request.trace) if record.request.trace else ""
    targets: list[tuple[str, str]] = []
    if event.is_end and record.webhook:
        targets.append((RUN_TARGET, record.webhook))
    targets += [
        (SUBSCRIPTION_PREFIX + name, "")
        for name, sub in sorted(subscriptions.items())
        if event_type in sub.events
    ]
    return [
        NewDelivery(
            delivery_id(event.member, target, event.run_id),
            event.run_id,
            event_type,
            target,
            body,
            url,
            trace,
        )
        for target, url in targets
    ]
