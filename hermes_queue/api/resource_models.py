"""Typed bodies of the resource endpoints (sessions, approvals, scheduled jobs), built and
checked like the turn-starting bodies in ``request_models.py`` (see its docstring: field order
is upstream's check order, aliases pick the first name present, unknown keys are ignored)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AliasChoices, ConfigDict, Field, PlainValidator

from hermes_queue.api.errors import ApiError
from hermes_queue.api.http.fields import (
    LenientFalse,
    RequestModel,
    RuntimeId,
    RuntimeOptions,
    as_is,
    checked,
    document_aliases,
    session_id_check,
    text_check,
)
from hermes_queue.events import APPROVAL_CHOICES

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


# -- approvals --------------------------------------------------------------------------------

MAX_REQUEST_ID_LENGTH = 128
# Upstream's aliases for a one-time approval.
CHOICE_ALIASES = {"approve": "once", "approved": "once", "allow": "once"}


def parse_choice(value: Any) -> str:
    """One of once/session/always/deny (aliases folded), else 400 ``invalid_approval_choice``."""
    text = value.strip().lower() if isinstance(value, str) else ""
    choice = CHOICE_ALIASES.get(text, text)
    if choice not in APPROVAL_CHOICES:
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


# -- scheduled jobs ---------------------------------------------------------------------------
# Checked by ``schedules.definitions`` (``parse_create``, ``patch_changes``) with upstream's
# messages in the jobs API's {"error": "…"} envelope; declared here for the schema.

Loose = Annotated[Any, checked(as_is, Any)]


JobName = Annotated[str, Field(min_length=1, max_length=200)]
Schedule = Annotated[
    str, Field(description="30m / 2h / 1d (once), every 30m, a cron expression, an ISO time.")
]
Required = Field(default=None, validate_default=True)


class JobPatchBody(RequestModel):
    """``PATCH /api/jobs/{id}``: any of these (nothing valid is 400)."""

    name: Annotated[Any, checked(as_is, JobName | None)] = None
    schedule: Annotated[Any, checked(as_is, Schedule | None)] = None
    prompt: Annotated[Any, checked(as_is, Annotated[str, Field(max_length=5000)] | None)] = None
    deliver: Annotated[Any, checked(as_is, Annotated[str, Field(pattern="^local$")] | None)] = None
    skills: Annotated[Any, checked(as_is, str | list[str] | None)] = None
    skill: Annotated[Any, checked(as_is, str | None)] = None
    repeat: Annotated[Any, checked(as_is, Annotated[int, Field(ge=1)] | None)] = None
    enabled: Annotated[Any, checked(as_is, bool | None)] = None


class JobCreateBody(RequestModel):
    """``POST /api/jobs``: a job needs a prompt or skills."""

    name: Annotated[Any, checked(as_is, JobName | None), Required]
    schedule: Annotated[Any, checked(as_is, Schedule | None), Required]
    prompt: Annotated[Any, checked(as_is, Annotated[str, Field(max_length=5000)] | None)] = None
    deliver: Annotated[Any, checked(as_is, Annotated[str, Field(pattern="^local$")] | None)] = None
    skills: Annotated[Any, checked(as_is, str | list[str] | None)] = None
    repeat: Annotated[Any, checked(as_is, Annotated[int, Field(ge=1)] | None)] = None
