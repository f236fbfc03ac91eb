"""A route row: one endpoint, declared once, with everything said about it.

An :class:`Endpoint` is what the app serves (method, path, handler) and what ``/openapi.json``
says of it (the body and query models its handler validates with, the headers it reads, what
it answers, whether it is public or starts a turn). Each dialect package lists its own rows;
``routes.py`` concatenates them; the app registers them (a row is an aiohttp route
definition) and keeps them under :data:`SERVED`, from which the document is built. So adding
an endpoint is one row beside its handler, and the document cannot miss it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict

JSON = "application/json"
SSE = "text/event-stream"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class AnswerModel(BaseModel):
    """What an endpoint answers, for the document only (handlers build their bodies themselves;
    ``tests/api/test_openapi.py`` checks real answers against these). Keys a model does not
    list are accepted: answers carry extensions beyond what is pinned."""

    model_config = ConfigDict(extra="allow")


@dataclass(frozen=True)
class Answer:
    """One response: its description, the model of its JSON body (or of each SSE frame's data)
    and its media type."""

    description: str
    model: type[BaseModel] | None = None
    media: str = JSON


def ok(model: type[BaseModel] | None, description: str = "OK") -> dict[int, Answer]:
    return {200: Answer(description, model)}


def stream(model: type[BaseModel], description: str) -> Answer:
    return Answer(description, model, SSE)


@dataclass(frozen=True, eq=False)
class Endpoint(web.AbstractRouteDef):
    """One route and its operation in the document."""

    method: str
    path: str
    handler: Handler
    summary: str
    tag: str
    answers: Mapping[int, Answer]
    # The JSON body the handler validates with; optional: it may be left out altogether.
    body: type[BaseModel] | None = None
    body_optional: bool = False
    # The query string's model (its fields are listed as query parameters).
    query: type[BaseModel] | None = None
    # Request headers it reads (described in ``openapi.HEADERS``).
    headers: tuple[str, ...] = ()
    # Served without the API key (no 401).
    public: bool = False
    # An operator surface: the operator's key only (a tenant key: 403 operator_only).
    operator: bool = False
    # Starts an agent turn: 429 queue_full, and 503 while the process drains.
    starts_turn: bool = False
    # An error envelope of its own, answered beside the standard one (the jobs API's).
    errors: type[BaseModel] | None = None
    # The first answer as a stream too (``stream: true``): its text/event-stream form.
    streamed: Answer | None = None
    # A GET also answers HEAD (aiohttp's twin); the 501 placeholders do not.
    head: bool = True

    def register(self, router: web.UrlDispatcher) -> list[web.AbstractRoute]:
        """Add the route as ``web.get`` / ``web.post`` … would."""
        kwargs: dict[str, Any] = {"allow_head": self.head} if self.method == "GET" else {}
        return web.RouteDef(self.method, self.path, self.handler, kwargs).register(router)


PROFILE_PREFIX = "/p/{profile}"
"""Upstream's profile routes: every row is served under this prefix too, the profile naming
the tenant the request acts as (``middlewares.auth_middleware``)."""


def under_profile(row: Endpoint) -> Endpoint:
    """``row`` served at ``/p/{profile}<path>`` (not in the document: the same operation)."""
    return dataclasses.replace(row, path=PROFILE_PREFIX + row.path)


SERVED: web.AppKey[tuple[Endpoint, ...]] = web.AppKey("served")
"""The rows an app was built from (``create_app``), for its document."""
