"""What the ``/api/sessions`` endpoints read: session rows (create, patch, fork, model lock), a
chat turn (upstream-api.md §2.1), and the list, transcript and resume queries.

Like every typed body (``http/fields.py``): fields in upstream's check order, each with its JSON
type and the check that refuses it with upstream's code, message and ``param``; aliases pick
the first name present; unknown keys are ignored. The runtime fields are routing's to check
when the turn's runtime is selected (``turns/runtime_selection.py``).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AliasChoices, ConfigDict, Field, PlainValidator

from hermes_queue.api.errors import ApiError
from hermes_queue.api.http.content import has_visible_payload, normalize_content
from hermes_queue.api.http.fields import (
    LenientFalse,
    RequestModel,
    RuntimeId,
    RuntimeOptions,
    WebhookUrl,
    as_is,
    checked,
    document_aliases,
    session_id_check,
    text_check,
)
from hermes_queue.api.http.queries import Cursor, page_number
from hermes_queue.api.http.schema_types import Content
from hermes_queue.api.turns.execution_policy import PolicyField

STRATEGIES = ("reject", "enqueue", "interrupt", "steer")
MAX_SESSION_PAGE = 200
MAX_RUN_ID_LENGTH = 128
MAX_MESSAGES_PAGE = 500

# -- sessions ---------------------------------------------------------------------------------


def _session_text(name: str, code: str) -> PlainValidator:
    return text_check(name, code, quoted=False)


SessionIdField = Annotated[
    str | None,
    session_id_check("id"),
    Field(
        default=None,
        validation_alias=AliasChoices("id", "session_id"),
        description="The new session's id (generated as api_<unix>_<8 hex> when absent).",
    ),
]


class SessionCreateBody(RequestModel):
    """``POST /api/sessions`` (upstream-api.md §2, §6.2)."""

    id: SessionIdField
    title: Annotated[str | None, _session_text("title", "invalid_title")] = None
    system_prompt: Annotated[
        str | None, _session_text("system_prompt", "invalid_system_prompt")
    ] = None
    model: Annotated[str | None, _session_text("model", "invalid_model")] = None
    source: Annotated[str | None, _session_text("source", "invalid_source")] = None
    model_id: RuntimeId = None
    provider: RuntimeId = None
    provider_id: RuntimeId = None
    model_options: RuntimeOptions = None
    require_model_lock: LenientFalse = False


class SessionPatchBody(RequestModel):
    """``PATCH /api/sessions/{id}``: only these keys (any other is 400
    ``unsupported_session_field``, checked first); a key sent as null or "" clears it."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=document_aliases)

    title: Annotated[str | None, _session_text("title", "invalid_title")] = None
    end_reason: Annotated[str | None, _session_text("end_reason", "invalid_end_reason")] = None


class ForkBody(RequestModel):
    """``POST /api/sessions/{id}/fork``."""

    id: SessionIdField
    title: Annotated[str | None, _session_text("title", "invalid_title")] = None


class ModelLockBody(RequestModel):
    """``POST /api/sessions/{id}/model``: the runtime to lock (``require_model_lock`` forced)."""

    model: RuntimeId = None
    model_id: RuntimeId = None
    provider: RuntimeId = None
    provider_id: RuntimeId = None
    model_options: RuntimeOptions = None


# -- chat -------------------------------------------------------------------------------------


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


def _run_id(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_RUN_ID_LENGTH:
        raise ApiError(
            400,
            "invalid_run_id",
            "'take_pending_steer' must be a run id",
            param="take_pending_steer",
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
        Field(
            description="While the session has a turn running: refuse (409), queue, stop it, "
            "or steer it (the message is handed to the running turn, whose reply this "
            "request then follows; queued like enqueue when the turn cannot take it)."
        ),
    ] = "reject"
    model: RuntimeId = None
    model_id: RuntimeId = None
    provider: RuntimeId = None
    provider_id: RuntimeId = None
    model_options: RuntimeOptions = None
    require_model_lock: LenientFalse = False
    webhook: WebhookUrl = ""
    execution_policy: PolicyField = None
    take_pending_steer: Annotated[
        str | None,
        checked(_run_id, Annotated[str, Field(min_length=1, max_length=128)] | None),
        Field(
            description="A completed turn of this session whose steers its agent never "
            "applied (its pending_steer): their text goes before this message, taken once."
        ),
    ] = None


# -- queries ----------------------------------------------------------------------------------


def _order(raw: Any) -> str:
    order = "latest" if raw is None else raw
    if order not in ("oldest", "latest"):
        raise ApiError(400, "invalid_pagination", "'order' must be oldest or latest", param="order")
    return str(order)


class SessionListQuery(RequestModel):
    limit: Annotated[
        int | None,
        page_number("limit", MAX_SESSION_PAGE),
        Field(description=f"Default 50, at most {MAX_SESSION_PAGE}."),
    ] = None
    offset: Annotated[int | None, page_number("offset", 10**9)] = None
    source: Annotated[Any, checked(as_is, str | None), Field(description="Only this source.")] = (
        None
    )
    include_children: LenientFalse = False


class MessageListQuery(RequestModel):
    limit: Annotated[
        int | None,
        page_number("limit", MAX_MESSAGES_PAGE),
        Field(description=f"Default and maximum {MAX_MESSAGES_PAGE}."),
    ] = None
    offset: Annotated[int | None, page_number("offset", 10**9)] = None
    order: Annotated[
        str,
        checked(_order, Annotated[str, Field(json_schema_extra={"enum": ["latest", "oldest"]})]),
    ] = "latest"


class ResumeQuery(RequestModel):
    run_id: Annotated[
        Any,
        checked(as_is, str | None),
        Field(description="The turn to follow (default: the session's active turn)."),
    ] = None
    after: Cursor = None
