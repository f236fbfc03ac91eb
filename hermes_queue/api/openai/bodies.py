"""What the OpenAI endpoints read: a chat completion (upstream-api.md §2.2), a response
(§2.3) and a stored response's query.

Like every typed body (``http/fields.py``): fields in upstream's check order, each with its JSON
type and the check that refuses it with upstream's code, message and ``param``; unknown keys
are ignored. The runtime fields are routing's to check when the turn's runtime is selected
(``turns/runtime_selection.py``).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from hermes_queue.api.errors import ApiError
from hermes_queue.api.http.content import flatten_text, has_visible_payload, normalize_content
from hermes_queue.api.http.fields import (
    LENIENT,
    LenientFalse,
    LenientTrue,
    RequestModel,
    RuntimeId,
    RuntimeOptions,
    WebhookUrl,
    as_is,
    checked,
    history,
    text_check,
)
from hermes_queue.api.http.schema_types import ChatMessage, HistoryMessage, ResponseInputItem
from hermes_queue.booleans import coerce_bool


def _named_model(value: Any) -> str:
    """The model the client named, echoed in the answer ("" when not a string)."""
    return value if isinstance(value, str) else ""


NamedModel = Annotated[
    str,
    checked(_named_model, Annotated[str, Field(max_length=200)] | None),
    Field(description="A model_routes alias (or a model with direct_model_requests)."),
]


class ChatCompletionBody(RequestModel):
    """``POST /v1/chat/completions`` (upstream-api.md §2.2). ``messages`` is checked by
    ``chat_completions.parse_messages`` (upstream's codes and order)."""

    messages: Annotated[
        Any,
        checked(as_is, Annotated[list[ChatMessage], Field(min_length=1)] | None),
        Field(default=None, validate_default=True),
    ]
    model: NamedModel = ""
    stream: LenientFalse = False
    cancel_on_disconnect: Annotated[
        bool | None,
        checked(lambda value: None if value is None else coerce_bool(value, False), Any),
        Field(description="Stop the turn when a streaming client leaves. " + LENIENT),
    ] = None
    model_id: RuntimeId = None
    provider: RuntimeId = None
    provider_id: RuntimeId = None
    model_options: RuntimeOptions = None


def parse_input(value: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """``input`` as messages (the last one this turn's user message) and any system texts."""
    if isinstance(value, str) and value.strip():
        return [{"role": "user", "content": value}], []
    if not isinstance(value, list) or not value:
        raise ApiError(400, "missing_input", "Missing 'input' field", param="input")
    messages: list[dict[str, Any]] = []
    system: list[str] = []
    for index, item in enumerate(value):
        where = f"input[{index}]"
        if isinstance(item, str):
            messages.append({"role": "user", "content": item})
            continue
        role = item.get("role") if isinstance(item, dict) else None
        if role in ("system", "developer"):
            system.append(flatten_text(item.get("content")))
        elif role in ("user", "assistant"):
            content = normalize_content(item.get("content"), f"{where}.content")
            messages.append({"role": role, "content": content})
        else:
            raise ApiError(
                400,
                "invalid_input",
                f"{where} must be a string or a message with role user or assistant",
                param=where,
            )
    if not messages or messages[-1]["role"] != "user":
        raise ApiError(400, "missing_input", "No user message found in input", param="input")
    if not has_visible_payload(messages[-1]["content"]):
        raise ApiError(400, "missing_input", "No user message found in input", param="input")
    return messages, [text for text in system if text]


class ResponseBody(RequestModel):
    """``POST /v1/responses`` (upstream-api.md §2.3)."""

    input: Annotated[
        tuple[list[dict[str, Any]], list[str]],
        checked(parse_input, str | list[str | ResponseInputItem]),
        Field(
            default=None,
            validate_default=True,
            description="The user turn: a string, or items whose last is a user message; "
            "system/developer items join the instructions.",
        ),
    ]
    instructions: Annotated[str | None, text_check("instructions", "invalid_instructions")] = None
    previous_response_id: Annotated[
        str | None, text_check("previous_response_id", "invalid_previous_response_id")
    ] = None
    conversation: Annotated[str | None, text_check("conversation", "invalid_conversation")] = None
    conversation_history: Annotated[
        list[dict[str, Any]] | None,
        checked(
            lambda value: None if value is None else history(value), list[HistoryMessage] | None
        ),
        Field(description="Takes precedence over the history of previous_response_id."),
    ] = None
    truncation: Annotated[Any, checked(as_is, str | None)] = None
    store: LenientTrue = True
    background: LenientFalse = False
    stream: LenientFalse = False
    model: NamedModel = ""
    model_id: RuntimeId = None
    provider: RuntimeId = None
    provider_id: RuntimeId = None
    model_options: RuntimeOptions = None
    webhook: WebhookUrl = ""


class ResponseGetQuery(RequestModel):
    stream: LenientFalse = False
    starting_after: Annotated[
        Any,
        checked(as_is, Annotated[int, Field(ge=0)] | None),
        Field(description="With stream: replay the events after this sequence number."),
    ] = None
