"""Webhook deliveries for the operator: the recent ones with their attempts (or the dead
letters, or those pending), one by its id, and redelivery (``webhooks/outbox.py``)."""

from __future__ import annotations

from typing import Annotated, Any

from aiohttp import web
from pydantic import Field

from hermes_queue.api.errors import ApiError
from hermes_queue.api.http.fields import RequestModel, checked
from hermes_queue.api.state import STATE
from hermes_queue.webhooks.messages import run_id_of
from hermes_queue.webhooks.outbox import STATES, Delivery

DEFAULT_LIMIT = 50
MAX_LIMIT = 500


def _limit(value: Any) -> int:
    if value is None:
        return DEFAULT_LIMIT
    try:
        limit = int(value)
    except (TypeError, ValueError):
        limit = 0
    if not 1 <= limit <= MAX_LIMIT:
        raise ApiError(
            400,
            "invalid_limit",
            f"'limit' must be an integer between 1 and {MAX_LIMIT}",
            param="limit",
        )
    return limit


def _state(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if value not in STATES:
        raise ApiError(
            400, "invalid_state", f"'state' must be one of {', '.join(STATES)}", param="state"
        )
    return str(value)


class DeliveryListQuery(RequestModel):
    state: Annotated[
        str | None,
        checked(_state, Annotated[str, Field(json_schema_extra={"enum": list(STATES)})] | None),
        Field(description="Only deliveries in this state; dead: the dead letters."),
    ] = None
    limit: Annotated[
        int,
        checked(_limit, Annotated[int, Field(ge=1, le=MAX_LIMIT)] | None),
        Field(description="At most this many, newest first (default 50)."),
    ] = DEFAULT_LIMIT


def _not_found(delivery_id: str) -> ApiError:
    return ApiError(404, "delivery_not_found", f"Webhook delivery not found: {delivery_id[:200]}")


async def _one(request: web.Request) -> tuple[str, Delivery | None]:
    delivery_id = request.match_info["delivery_id"]
    if run_id_of(delivery_id) is None or len(delivery_id) > 300:
        raise _not_found(delivery_id)
    return delivery_id, await request.app[STATE].webhooks.get(delivery_id)


async def list_deliveries(request: web.Request) -> web.Response:
    query = DeliveryListQuery.parse(dict(request.query))
    found = await request.app[STATE].webhooks.recent(query.limit, query.state)
    return web.json_response({"object": "list", "data": [d.to_json() for d in found]})


async def get_delivery(request: web.Request) -> web.Response:
    delivery_id, delivery = await _one(request)
    if delivery is None:
        raise _not_found(delivery_id)
    return web.json_response(delivery.to_json())


async def redeliver(request: web.Request) -> web.Response:
    """Send it again now, on a fresh schedule, under the same ``webhook-id``."""
    delivery_id, _ = await _one(request)
    outbox = request.app[STATE].webhooks
    if not await outbox.redeliver(delivery_id):
        raise _not_found(delivery_id)
    delivery = await outbox.get(delivery_id)
    if delivery is None:
        raise _not_found(delivery_id)
    return web.json_response(delivery.to_json(), status=202)
