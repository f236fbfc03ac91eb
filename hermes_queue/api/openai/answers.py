"""What the OpenAI endpoints answer, as models for ``/openapi.json``: chat completions and
their chunks, response objects and their stream events."""

from __future__ import annotations

from typing import Any, Literal

from hermes_queue.api.endpoint import AnswerModel


class ChatCompletion(AnswerModel):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[dict[str, Any]]


class ResponseObject(AnswerModel):
    id: str
    object: Literal["response"]
    status: str


class ResponseDeleted(AnswerModel):
    id: str
    object: Literal["response"]
    deleted: bool


class ChatCompletionChunk(AnswerModel):
    """A ``chat.completion.chunk``; ``data: [DONE]`` ends the stream, and ``event:
    hermes.tool.progress`` frames carry ``{tool, emoji, label, toolCallId, status}``."""

    object: Literal["chat.completion.chunk"] | None = None
    choices: list[dict[str, Any]] | None = None


class ResponseStreamEvent(AnswerModel):
    """A Responses stream event (upstream-api.md §3.4): ``type`` is the event name."""

    type: str
    sequence_number: int
