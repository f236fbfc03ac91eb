"""The one JSON error envelope (upstream-api.md §1.3), the exception that carries it, and its
model for ``/openapi.json``."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field


class ApiError(Exception):
    """Raise anywhere in a handler; the error middleware renders it."""

    def __init__(
        self,
        status: int,
        code: str | None,
        message: str,
        *,
        type: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
        extra: dict[str, Any] | None = None,
        close: bool = False,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.type = type or _default_type(status)
        self.param = param
        self.headers = headers or {}
        # Machine-readable details beside the standard four keys (e.g. the blocking run_id).
        self.extra = extra or {}
        # Close the connection after answering (the request was not read to its end).
        self.close = close

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
                **self.extra,
            }
        }

    def response(self) -> web.Response:
        response = web.json_response(self.body(), status=self.status, headers=self.headers)
        if self.close:
            response.force_close()
        return response


def _default_type(status: int) -> str:
    if status == 429:
        return "rate_limit_error"
    if status >= 500:
        return "server_error"
    return "invalid_request_error"


def auth_error() -> ApiError:
    return ApiError(
        401,
        "gateway_auth_failed",
        "Invalid gateway API key (API_SERVER_KEY)",
        type="gateway_auth_error",
    )


def redis_unavailable() -> ApiError:
    """Redis is down, or what answers at ``redis_url`` is not Redis (``redisio/health.py``)."""
    return ApiError(
        503,
        "redis_unavailable",
        "The queue backend (Redis) is unavailable; retry shortly",
        headers={"Retry-After": "1"},
    )


def run_not_found(run_id: str) -> ApiError:
    return ApiError(404, "run_not_found", f"Run not found: {run_id}")


def session_not_found(session_id: str) -> ApiError:
    return ApiError(404, "session_not_found", f"Session not found: {session_id[:256]}")


class ErrorBody(BaseModel):
    message: str
    type: str = Field(description="invalid_request_error, gateway_auth_error, server_error, …")
    param: str | None = Field(description="The offending field or header, when known.")
    code: str | None = Field(description="Machine-readable reason, e.g. missing_input.")
    model_config = ConfigDict(extra="allow")


class ErrorEnvelope(BaseModel):
    """Every refusal and failure (upstream-api.md §1.3); some add keys beside the four."""

    error: ErrorBody
