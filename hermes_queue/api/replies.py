"""What a run's terminal event says as a reply, read the same way by every dialect.

Two outcomes are not what their event type suggests: upstream answers a provider
authentication failure as an ordinary reply (upstream-api.md §6.4), so ``run.failed`` with
reason ``provider_auth`` is shown as a completed turn with zero usage; and a completed reply
cut at the model's output limit is partial (``finish_reason: "length"``). Every renderer and
the handlers that answer with a final reply ask here.
"""

from __future__ import annotations

from typing import Any


def is_controlled_reply(data: dict[str, Any]) -> bool:
    return data.get("reason") == "provider_auth"


def controlled_reply(data: dict[str, Any]) -> dict[str, Any]:
    """A provider-auth failure as the completed turn upstream reports: its text, zero usage."""
    zero = {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}
    return {"output": data.get("error", ""), "messages": [], "usage": zero}


def truncated(data: dict[str, Any]) -> bool:
    """A completed run's (or reply's) text stopped at the model's output limit: the turn ended,
    its reply is partial (upstream's ``output_truncated``)."""
    return data.get("finish_reason") == "length"
