"""What the operations and discovery endpoints answer, as models for ``/openapi.json``."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from hermes_queue.api.endpoint import AnswerModel


class Health(AnswerModel):
    status: Literal["ok"]
    platform: str
    version: str


class Readiness(AnswerModel):
    status: Literal["ready", "draining"]


class HealthDetailed(AnswerModel):
    status: Literal["ok", "degraded"]
    readiness: dict[str, Any]
    warnings: list[str] = Field(description="E.g. that the API has no key.")


class ObjectList(AnswerModel):
    object: Literal["list"]
    data: list[dict[str, Any]]


class Capabilities(AnswerModel):
    object: Literal["hermes.api_server.capabilities"]
    endpoints: dict[str, Any]
    features: dict[str, Any]


class Queue(AnswerModel):
    object: Literal["hermes.queue"]


class QueueSnapshot(AnswerModel):
    """``event: queue`` frames of ``/v1/queue/stream``: the ``hermes.queue`` snapshot."""

    object: Literal["hermes.queue"]


class WebhookAttempt(AnswerModel):
    attempt: int
    at: float
    outcome: str = Field(
        description="2xx, 3xx, 4xx, 5xx, timeout, error, refused, or lost "
        "(its sender died mid-attempt)."
    )
    status: int | None
    error: str | None
    duration_ms: float | None


class WebhookDelivery(AnswerModel):
    """One delivery of a run event to one target, and its attempts."""

    object: Literal["hermes.webhook.delivery"]
    id: str = Field(description="Its webhook-id, the same on every attempt.")
    run_id: str
    event: str = Field(
        description="run.completed, run.failed, run.cancelled or approval.requested."
    )
    target: str = Field(description="run (the run's own webhook) or sub:<subscription>.")
    url: str | None = Field(description="The run's webhook's origin (no path or query).")
    state: Literal["pending", "delivered", "dead", "gone"]
    created_at: float
    attempt_count: int
    last_status: int | None
    last_error: str | None
    next_attempt_at: float | None
    ended_at: float | None
    attempts: list[WebhookAttempt]


class WebhookDeliveryList(AnswerModel):
    object: Literal["list"]
    data: list[WebhookDelivery]
