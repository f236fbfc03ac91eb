"""The OpenAI dialects' route rows: chat completions and Responses, each completion or
response a run. Each row is the route and what ``/openapi.json`` says of it
(``api/endpoint.py``)."""

from __future__ import annotations

from hermes_queue.api.endpoint import Answer, Endpoint, ok, stream
from hermes_queue.api.errors import ErrorEnvelope
from hermes_queue.api.openai import answers as out
from hermes_queue.api.openai import bodies, chat_completions, responses

RESPONSE_EVENTS = stream(out.ResponseStreamEvent, "With stream: events")

ENDPOINTS = [
    Endpoint(
        "POST",
        "/v1/chat/completions",
        chat_completions.chat_completions,
        "OpenAI chat completion",
        "openai",
        {
            200: Answer(
                "A chat.completion, or with stream chat.completion.chunk frames then data: [DONE]",
                out.ChatCompletion,
            ),
            502: Answer("The turn failed with no text", ErrorEnvelope),
        },
        body=bodies.ChatCompletionBody,
        headers=(
            "X-Hermes-Session-Id",
            "X-Hermes-Session-Key",
            "Idempotency-Key",
            "X-Hermes-Cancel-On-Disconnect",
        ),
        starts_turn=True,
        streamed=stream(out.ChatCompletionChunk, "With stream: chunks"),
    ),
    Endpoint(
        "POST",
        "/v1/responses",
        responses.create_response,
        "OpenAI response",
        "openai",
        ok(out.ResponseObject, "A response object, or with stream its events"),
        body=bodies.ResponseBody,
        headers=("X-Hermes-Session-Key", "Idempotency-Key"),
        starts_turn=True,
        streamed=RESPONSE_EVENTS,
    ),
    Endpoint(
        "GET",
        "/v1/responses/{response_id}",
        responses.get_response,
        "A stored response",
        "openai",
        ok(out.ResponseObject, "The response, or with stream its events again"),
        query=bodies.ResponseGetQuery,
        streamed=RESPONSE_EVENTS,
    ),
    Endpoint(
        "DELETE",
        "/v1/responses/{response_id}",
        responses.delete_response,
        "Delete a stored response",
        "openai",
        ok(out.ResponseDeleted),
    ),
]
