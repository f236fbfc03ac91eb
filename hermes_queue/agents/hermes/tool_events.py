"""What Hermes' tool and subagent callbacks say, as the fields of our events: a tool's icon, its
result cut to what an event carries, a subagent event's whitelisted fields as JSON with the free
text redacted. Pure functions, called on the agent's thread (``bridge.py``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hermes_queue.agents.base import SubagentPhase
from hermes_queue.events import SUBAGENT_FIELDS, SUBAGENT_FREE_TEXT
from hermes_queue.logs import redact

RESULT_LIMIT = 2_000  # characters of a tool result carried in its tool.completed event
SUBAGENT_PHASES: dict[str, SubagentPhase] = {
    "subagent.start": "start",
    "subagent.complete": "complete",
}


def subagent_details(details: dict[str, Any], scrub: Callable[[str], str]) -> dict[str, Any]:
    """The whitelisted fields of a subagent event Hermes sent (a new one of its, e.g.
    ``toolsets``, is dropped until reviewed), as JSON values, with the free text redacted: the
    turn's own secrets (``scrub``) and anything secret-shaped (``logs.redact``), since a goal or a
    child's summary can quote whatever the conversation held."""
    kept: dict[str, Any] = {}
    for name in SUBAGENT_FIELDS:
        value = details.get(name)
        if value is None:
            continue
        free = name in SUBAGENT_FREE_TEXT
        kept[name] = json_value(value, (lambda t: redact(scrub(t))) if free else None)
    return kept


def tool_emoji(name: str) -> str | None:
    """Hermes' icon for the tool (📋 for ``todo``, …), which upstream's chat stream shows."""
    try:
        from agent.display import get_tool_emoji
    except ImportError:  # a Hermes without it: the renderer's default
        return None
    emoji = get_tool_emoji(name)
    return emoji if isinstance(emoji, str) and emoji else None


def json_value(value: Any, redact_text: Callable[[str], str] | None) -> Any:
    """``value`` as plain JSON (the sink must never fail to encode an event), every string in
    it passed through ``redact_text`` when given."""
    if isinstance(value, str):
        return redact_text(value) if redact_text else value
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, dict):
        return {str(key): json_value(item, redact_text) for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [json_value(item, redact_text) for item in value]
    return json_value(str(value), redact_text)
