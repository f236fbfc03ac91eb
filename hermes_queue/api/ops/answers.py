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
