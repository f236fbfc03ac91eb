"""What the ``/v1/runs`` endpoints read: the body that starts a run (upstream-api.md §4.1), an
approval answer (§4.3), a steer (§4.5) and the events stream's query.

Like every typed body (``http/fields.py``): fields in upstream's check order, each with its JSON
type and the check that refuses it with upstream's code, message and ``param``; aliases pick
the first name present; unknown keys are ignored.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from hermes_queue.api.errors import ApiError
from hermes_queue.api.http.content import flatten_text
from hermes_queue.api.http.fields import (
    History,
    LenientFalse,
    RequestModel,
    RuntimeId,
    RuntimeOptions,
    WebhookUrl,
    as_is,
    checked,
    is_empty,
    message_list,
    session_id_check,
    text_check,
)
from hermes_queue.api.http.queries import Cursor
from hermes_queue.api.http.schema_types import Content, Message
from hermes_queue.api.turns.execution_policy import PolicyField
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
    execution_policy: PolicyField = None


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


_SteerText = Annotated[
    Any,
    checked(as_is, Content | None),
    Field(description="The guidance: text, or content parts (their text is taken)."),
]


class SteerBody(RequestModel):
    """``POST /v1/runs/{run_id}/steer`` (upstream-api.md §4.5): the text is the first of
    ``input``, ``message`` and ``text`` that is not empty, content parts normalised to text."""

    input: _SteerText = None
    message: _SteerText = None
    text: _SteerText = None

    @property
    def steer_text(self) -> str:
        """The steer, stripped; 400 ``invalid_steer_input`` when there is none."""
        raw = self.input or self.message or self.text or ""
        text = flatten_text(raw).strip()
        if not text:
            raise ApiError(
                400,
                "invalid_steer_input",
                "Missing non-empty steer text; expected 'input', 'message', or 'text'.",
                param="input",
            )
        return text


class EventsQuery(RequestModel):
    after: Cursor = None
