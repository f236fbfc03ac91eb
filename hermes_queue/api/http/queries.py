"""The fields query strings share, typed like the body fields (``fields.py``): page numbers
and stream cursors. Each endpoint's query model sits with its bodies; ``/openapi.json`` lists
its fields as query parameters.

Stream cursors (``after``) are checked by ``sse.resume_cursor`` together with the
``Last-Event-ID`` header they stand in for.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, PlainValidator

from hermes_queue.api.errors import ApiError
from hermes_queue.api.http.fields import as_is, checked


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


Cursor = Annotated[
    Any,
    checked(as_is, str | None),
    Field(default=None, description="Resume after this stream id (as Last-Event-ID)."),
]
