"""What the ``/v1/runs`` endpoints read: the body that starts a run (upstream-api.md §4.1), an
approval answer (§4.3) and the events stream's query.

Like every typed body (``http/fields.py``): fields in upstream's check order, each with its JSON
type and the check that refuses it with upstream's code, message and ``param``; aliases pick
the first name present; unknown keys are ignored.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from hermes_queue.api.errors import ApiError
from hermes_queue.api.http.fields import (
    History,
    LenientFalse,
    RequestModel,
    RuntimeId,
    RuntimeOptions,
    WebhookUrl,
    checked,
    is_empty,
    message_list,
    session_id_check,
    text_check,
)
from hermes_queue.api.http.queries import Cursor
from hermes_queue.api.http.schema_types import Message
from hermes_queue.events import APPROVAL_CHOICES
from hermes_queue.runs.approvals import CHOICE_ALIASES, normalize_choice


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
    webhook: WebhookUrl = ""


MAX_REQUEST_ID_LENGTH = 128


def parse_choice(value: Any) -> str:
    """One of once/session/always/deny (aliases folded), else 400 ``invalid_approval_choice``."""
    choice = normalize_choice(value)
    if choice is None:
        raise ApiError(
            400,
            "invalid_approval_choice",
            f"Invalid approval choice; expected one of: {', '.join(APPROVAL_CHOICES)}",
            param="choice",
        )
    return choice


def parse_request_id(value: Any) -> str:
    """VN's optional ``request_id``: target one pending request instead of the oldest."""
    if value is None:
        return ""
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_REQUEST_ID_LENGTH:
        raise ApiError(
            400, "invalid_approval_request", "Invalid approval request_id", param="request_id"
        )
    return value.strip()


class ApprovalBody(RequestModel):
    """``POST /v1/runs/{run_id}/approval`` (upstream-api.md §4.3)."""

    choice: Annotated[
        str,
        checked(
            parse_choice,
            Annotated[
                str,
                Field(json_schema_extra={"enum": [*APPROVAL_CHOICES, *CHOICE_ALIASES]}),
            ],
        ),
        Field(
            default=None,
            validate_default=True,
            description="Case and blanks ignored.",
        ),
    ]
    all: LenientFalse = False
    resolve_all: LenientFalse = False
    request_id: Annotated[
        str,
        checked(parse_request_id, Annotated[str, Field(max_length=128)] | None),
        Field(description="The pending request to answer (default: the oldest)."),
    ] = ""


class EventsQuery(RequestModel):
    after: Cursor = None
