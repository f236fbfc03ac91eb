"""Who a request acts as (set once by the auth middleware) and the one answer for what is not
its own: another tenant's object is *not found*, with the body a nonexistent id gets, so an
id never tells a tenant that it exists elsewhere (docs/tenants.md)."""

from __future__ import annotations

from aiohttp import web

from hermes_queue.api.errors import ApiError
from hermes_queue.tenancy.keys import DEFAULT_TENANT, OPERATOR, Principal

PRINCIPAL = web.RequestKey("principal", Principal)


def principal(request: web.Request) -> Principal:
    """The request's principal (the operator's on an app without keys, or before auth ran)."""
    return request[PRINCIPAL] if PRINCIPAL in request else OPERATOR


def tenant(request: web.Request) -> str:
    """The tenant the request acts as: its objects are the ones it may see."""
    return principal(request).tenant


def owns(request: web.Request, owner: str | None) -> bool:
    """Whether an object owned by ``owner`` (None or "": made before tenants, the default
    tenant's) is the request's."""
    return (owner or DEFAULT_TENANT) == tenant(request)


def operator_only() -> ApiError:
    """A tenant's key on an operator surface: the route exists (the OpenAPI document says so),
    the key is valid, it is not allowed there."""
    return ApiError(
        403,
        "operator_only",
        "This is an operator surface: it needs the operator's key (HERMES_QUEUE_API_KEY)",
        type="permission_error",
    )
