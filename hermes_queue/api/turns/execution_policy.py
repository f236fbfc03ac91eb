"""``execution_policy``: a turn's own limits, on the bodies that start a turn in the Hermes
dialect (``POST /v1/runs``, session chat), as upstream's newer ``/v1/runs`` takes them
(``gateway/platforms/api_server_run_limits.py``).

Each limit can only shrink what the deployment allows: ``max_turns`` (1–10,000) caps the
agent's model calls below its configured iteration limit, ``run_budget_seconds`` (1–10,800)
bounds the run's wall-clock time from its first claim (the worker ends it at the first step
boundary past it), and ``toolsets`` (at most 128 names) narrows the deployment's enabled
toolsets to those named (a name the deployment does not enable is simply not offered, as
upstream intersects them). Any other key is refused, as are values of the wrong type or out of
range: 400 ``invalid_execution_policy`` with upstream's messages.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from hermes_queue.api.errors import ApiError
from hermes_queue.api.http.fields import checked
from hermes_queue.runs.turn_request import ExecutionPolicy

MAX_TURNS = 10_000
MAX_BUDGET_SECONDS = 10_800
MAX_TOOLSETS = 128
MAX_TOOLSET_NAME = 128
_FIELDS = frozenset({"max_turns", "run_budget_seconds", "toolsets"})


def _refuse(message: str) -> ApiError:
    return ApiError(400, "invalid_execution_policy", message, param="execution_policy")


def _bounded(policy: dict[str, Any], name: str, maximum: int) -> int | None:
    if name not in policy:
        return None
    value = policy[name]
    if type(value) is not int or not 1 <= value <= maximum:  # a bool is not a count
        raise _refuse(f"Invalid execution_policy {name}")
    return value


def _toolsets(policy: dict[str, Any]) -> tuple[str, ...] | None:
    if "toolsets" not in policy:
        return None
    toolsets = policy["toolsets"]
    if (
        not isinstance(toolsets, list)
        or len(toolsets) > MAX_TOOLSETS
        or any(
            not isinstance(item, str) or not item or len(item) > MAX_TOOLSET_NAME
            for item in toolsets
        )
    ):
        raise _refuse("Invalid execution_policy toolsets")
    return tuple(dict.fromkeys(toolsets))


def parse_policy(value: Any) -> ExecutionPolicy | None:
    """The body's ``execution_policy``; None when absent (or null), or when it sets nothing."""
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) - _FIELDS:
        raise _refuse("Unsupported execution_policy fields")
    policy = ExecutionPolicy(
        max_turns=_bounded(value, "max_turns", MAX_TURNS),
        run_budget_seconds=_bounded(value, "run_budget_seconds", MAX_BUDGET_SECONDS),
        toolsets=_toolsets(value),
    )
    return policy if policy != ExecutionPolicy() else None


_Accepts = Annotated[
    dict[str, Any],
    Field(
        json_schema_extra={
            "properties": {
                "max_turns": {"type": "integer", "minimum": 1, "maximum": MAX_TURNS},
                "run_budget_seconds": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_BUDGET_SECONDS,
                },
                "toolsets": {
                    "type": "array",
                    "maxItems": MAX_TOOLSETS,
                    "items": {"type": "string", "minLength": 1, "maxLength": MAX_TOOLSET_NAME},
                },
            },
            "additionalProperties": False,
        }
    ),
]

PolicyField = Annotated[
    ExecutionPolicy | None,
    checked(parse_policy, _Accepts | None),
    Field(
        description=(
            "This turn's own limits, each only shrinking the deployment's: max_turns (model "
            "calls), run_budget_seconds (wall clock from the run's start; the queue wait is "
            "not counted) and toolsets (of those the deployment enables)."
        )
    ),
]
