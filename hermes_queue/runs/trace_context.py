"""The W3C trace context a run carries from the request that started it to its workers.

Pure text handling, no OpenTelemetry import: the API reads the trace id of any run (``GET
/v1/runs/{id}``'s ``trace_id``) whether or not this process traces. The carrier is the
``traceparent`` / ``tracestate`` pair of https://www.w3.org/TR/trace-context/, stored in the
run's ``TurnRequest`` (``trace``) exactly as a propagator injects it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
CARRIER_KEYS = (TRACEPARENT, TRACESTATE)

# version "-" trace-id "-" parent-id "-" flags; version ff and all-zero ids are invalid.
_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$")
# What a carrier value may hold at most (a tracestate has at most 32 members of ~256 bytes).
MAX_VALUE = 1024


def carrier_of(data: Any) -> dict[str, str] | None:
    """The carrier a stored record holds (``TurnRequest.trace``), keeping only its two keys as
    short strings; None for anything else."""
    if not isinstance(data, Mapping):
        return None
    carrier = {
        key: value
        for key in CARRIER_KEYS
        if isinstance(value := data.get(key), str) and 0 < len(value) <= MAX_VALUE
    }
    return carrier if TRACEPARENT in carrier else None


def trace_id_of(carrier: Mapping[str, str] | None) -> str | None:
    """The 32-hex trace id of a carrier's ``traceparent``, or None when it has no valid one."""
    if not carrier:
        return None
    match = _TRACEPARENT.match(carrier.get(TRACEPARENT, "").strip())
    if match is None:
        return None
    version, trace_id, parent_id = match.group(1), match.group(2), match.group(3)
    if version == "ff" or trace_id == "0" * 32 or parent_id == "0" * 16:
        return None
    if version == "00" and match.group(5):
        return None  # version 00 has exactly four fields
    return trace_id
