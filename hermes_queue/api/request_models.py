"""Typed request bodies (pydantic v2) of the endpoints that start a turn: what each reads, in
the order it checks it (sessions, approvals and jobs: ``resource_models.py``).

Handlers validate a body with ``Model.parse(body)`` and read typed attributes; ``/openapi.json``
is generated from these same classes (``openapi.py``). Each field names its JSON type (the shapes
in ``schema_types.py``) and the check that validates it. The checks are the project's own
(``http/fields.py``, ``http/content.py``, upstream's rules) and raise ``ApiError`` with upstream's
exact code, message and ``param``; pydantic stops at the first field that fails, in field order,
so the order below is the order upstream checks in. Aliases (``id``/``session_id``,
``message``/``input``, ``system_message``/``instructions``) pick the first name present, as
``body.get(a, body.get(b))`` did. Unknown keys are ignored, as upstream ignores them.

The runtime fields (``model``/``model_id``, ``provider``/``provider_id``, ``model_options``,
``require_model_lock``) are declared here for the schema and checked by ``routing`` when the
turn's runtime is selected (``runtime_selection``), which keeps its own codes.

Why pydantic: its validators let a field's check raise our own error (other exceptions pass
through ``model_validate`` untouched), ``AliasChoices`` keeps upstream's aliases, and its JSON
Schema output is draft 2020-12, the dialect of OpenAPI 3.1, so the published document needs no
translation. msgspec is faster but has neither per-field validators of this kind nor 2020-12
output.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AliasChoices, Field

from hermes_queue.api.errors import ApiError
from hermes_queue.api.http.content import flatten_text, has_visible_payload, normalize_content
from hermes_queue.api.http.fields import (
    LENIENT,
    LenientFalse,
    LenientTrue,
    RequestModel,
    RuntimeId,
    RuntimeOptions,
    as_is,
    checked,
    is_empty,
    message_list,
    session_id_check,
    text_check,
)
from hermes_queue.api.http.schema_types import (
    ChatMessage,
    Content,
    HistoryMessage,
    Message,
    ResponseInputItem,
)
from hermes_queue.booleans import coerce_bool

STRATEGIES = ("reject", "enqueue", "interrupt")


# -- /v1/runs ---------------------------------------------------------------------------------


def _run_input(value: Any) -> tuple[Any, list[dict[str, Any]]]:
    """``input``: the turn's message and the history before it (upstream-api.md §4.1)."""
    if value is None or (isinstance(value, str | list) and len(value) == 0):
        raise ApiError(400, "missing_input", "Missing 'input' field", param="input")
    if isinstance(value, str):
        if not value.strip():
            raise ApiError(400, "missing_input", "Missing 'input' field", param="input")
        return value, []
    if isinstance(value, list):
        messages = message_list(value, "input")
        if messages[-1]["role"] != "user" or is_empty(messages[-1]["content"]):
            raise ApiError(
                400, "missing_user_message", "No user message found in input", param="input"
            )
        return messages[-1]["content"], messages[:-1]
    raise ApiError(
        400, "invalid_input", "'input' must be a string or an array of messages", param="input"
    )


def _history(value: Any) -> list[dict[str, Any]]:
    if value is None:
        return []
    return message_list(value, "conversation_history", need_content=True)


History = Annotated[
    list[dict[str, Any]],
    checked(_history, list[HistoryMessage] | None),
    Field(default_factory=list, description="Earlier turns, before the input's own history."),
]


class RunBody(RequestModel):
    """``POST /v1/runs`` (upstream-api.md §4.1)."""

    input: Annotated[
        tuple[Any, list[dict[str, Any]]],
        checked(_run_input, Annotated[str, Field(min_length=1)] | list[Message]),
        Field(
            default=None,
            validate_default=True,
            description="The user turn: a string, or messages whose last is the user's.",
        ),
    ]
    conversation_history: History
    instructions: Annotated[str | None, text_check("instructions", "invalid_instructions")] = None
    model: Annotated[str | None, text_check("model", "invalid_model", max_length=200)] = None
    session_id: Annotated[str | None, session_id_check("session_id")] = None
    model_id: RuntimeId = None
    provider: RuntimeId = None
    provider_id: RuntimeId = None
    model_options: RuntimeOptions = None
    require_model_lock: LenientFalse = False


# -- session chat -----------------------------------------------------------------------------


def _chat_message(value: Any) -> Any:
    if value is None or not has_visible_payload(value):
        raise ApiError(400, "missing_message", "Missing 'message' field", param="message")
    return normalize_content(value, "message")


def _system_message(value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ApiError(
            400,
            "invalid_system_message",
            "system_message must be a string",
            param="system_message",
        )
    return value or None


def _strategy(value: Any) -> str:
    if not isinstance(value, str) or value not in STRATEGIES:
        raise ApiError(
            400,
            "invalid_multitask_strategy",
            f"'multitask_strategy' must be one of {sorted(STRATEGIES)}",
            param="multitask_strategy",
        )
    return value


class SessionChatBody(RequestModel):
    """``POST /api/sessions/{id}/chat`` and ``…/chat/stream`` (upstream-api.md §2.1)."""

    message: Annotated[
        Any,
        checked(_chat_message, Content),
        Field(
            default=None,
            validate_default=True,
            validation_alias=AliasChoices("message", "input"),
            description="This turn's user message: a string or content parts (not empty).",
        ),
    ]
    system_message: Annotated[
        str | None,
        checked(_system_message, str | None),
        Field(
            default=None,
            validation_alias=AliasChoices("system_message", "instructions"),
            description="An ephemeral system prompt for this turn only.",
        ),
    ]
    multitask_strategy: Annotated[
        str,
        checked(_strategy, Annotated[str, Field(json_schema_extra={"enum": list(STRATEGIES)})]),
        Field(description="While the session has a turn running: refuse (409), queue, or stop it."),
    ] = "reject"
    model: RuntimeId = None
    model_id: RuntimeId = None
    provider: RuntimeId = None
    provider_id: RuntimeId = None
    model_options: RuntimeOptions = None
    require_model_lock: LenientFalse = False


# -- OpenAI dialects --------------------------------------------------------------------------


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
            lambda value: None if value is None else _history(value), list[HistoryMessage] | None
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
