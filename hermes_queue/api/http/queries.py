"""Query strings as typed models, like the bodies (``request_models.py``): handlers validate
``request.query`` with them, and ``/openapi.json`` lists their fields as query parameters.

Stream cursors (``after``) are checked by ``sse.resume_cursor`` together with the
``Last-Event-ID`` header they stand in for; ``/v1/queue``'s page by ``operations._page``.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, PlainValidator

from hermes_queue.api.errors import ApiError
from hermes_queue.api.http.fields import LenientFalse, RequestModel, as_is, checked

MAX_SESSION_PAGE = 200
MAX_MESSAGES_PAGE = 500


def page_number(name: str, maximum: int) -> PlainValidator:
    """A non-negative integer, capped at ``maximum`` (None when absent or empty)."""

    def check(raw: Any) -> int | None:
        if raw is None or raw == "":
            return None
        try:
            value = int(raw)
        except (TypeError, ValueError):
            raise ApiError(
                400, "invalid_pagination", f"'{name}' must be an integer", param=name
            ) from None
        if value < 0:
            raise ApiError(400, "invalid_pagination", f"'{name}' must not be negative", param=name)
        return min(value, maximum)

    return checked(check, Annotated[int, Field(ge=0)] | None)


def _order(raw: Any) -> str:
    order = "latest" if raw is None else raw
    if order not in ("oldest", "latest"):
        raise ApiError(400, "invalid_pagination", "'order' must be oldest or latest", param="order")
    return str(order)


Cursor = Annotated[
    Any,
    checked(as_is, str | None),
    Field(default=None, description="Resume after this stream id (as Last-Event-ID)."),
]


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


class EventsQuery(RequestModel):
    after: Cursor = None


class ResumeQuery(RequestModel):
    run_id: Annotated[
        Any,
        checked(as_is, str | None),
        Field(description="The turn to follow (default: the session's active turn)."),
    ] = None
    after: Cursor = None


class ResponseGetQuery(RequestModel):
    stream: LenientFalse = False
    starting_after: Annotated[
        Any,
        checked(as_is, Annotated[int, Field(ge=0)] | None),
        Field(description="With stream: replay the events after this sequence number."),
    ] = None


class JobListQuery(RequestModel):
    include_disabled: Annotated[
        Any, checked(as_is, str | None), Field(description="true or 1 lists paused jobs too.")
    ] = None


class QueuePageQuery(RequestModel):
    limit: Annotated[Any, checked(as_is, Annotated[int, Field(ge=1, le=500)] | None)] = None
    offset: Annotated[Any, checked(as_is, Annotated[int, Field(ge=0)] | None)] = None
