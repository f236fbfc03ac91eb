"""What the ``/api/jobs`` endpoints read, for the document: the bodies are checked by
``schedules.definitions`` (``parse_create``, ``patch_changes``) with upstream's messages in the
jobs API's ``{"error": "…"}`` envelope, so these fields only describe them."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from hermes_queue.api.http.fields import RequestModel, as_is, checked

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


class JobListQuery(RequestModel):
    include_disabled: Annotated[
        Any, checked(as_is, str | None), Field(description="true or 1 lists paused jobs too.")
    ] = None
