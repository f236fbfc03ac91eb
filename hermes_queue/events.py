"""The canonical run-event vocabulary.

Workers store exactly these events in each run's Redis Stream; every endpoint renders them into
its own dialect (``api/hermes/render.py``, ``api/openai/``). How an event is stored as a stream
entry, and read back as a :class:`RunEvent`, is ``streams/codec.py`` (beside the Lua that
writes it); the stream entry id is the event's id and the SSE ``id:`` line.

One entry is at most one frame a client sees (besides a stream's closing ``done`` / ``[DONE]``):
a dialect that shows two things at one moment has two entries to show them from, e.g. the
reply's ``assistant.completed`` is stored before the terminal ``run.completed``. So every frame
carries its own id and a client cut off between any two frames resumes after the last it saw.
The Responses dialect, whose frames are positions in a fold over the whole run, numbers its
frames itself (``sequence_number``, also its ``id:``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class EventType(StrEnum):
    RUN_STARTED = "run.started"
    RUN_RESTARTED = "run.restarted"
    # A later attempt goes on from the steps earlier ones recorded: events up to
    # ``valid_through`` stand, those after it (the interrupted step's) are superseded.
    RUN_RESUMED = "run.resumed"
    MESSAGE_STARTED = "message.started"
    MESSAGE_DELTA = "message.delta"
    # The model's streamed reasoning (chat completions' ``reasoning_content``).
    REASONING = "reasoning.available"
    # The agent's progress note (Hermes' ``reasoning.available`` callback): the session stream's
    # ``tool.progress`` (``_thinking``) and the runs stream's ``reasoning.available``.
    PROGRESS_NOTE = "progress.note"
    TOOL_STARTED = "tool.started"
    TOOL_COMPLETED = "tool.completed"
    APPROVAL_REQUEST = "approval.request"
    APPROVAL_RESPONDED = "approval.responded"
    # A delegated child agent started / finished (Hermes' ``delegate_task``).
    SUBAGENT_START = "subagent.start"
    SUBAGENT_COMPLETE = "subagent.complete"
    # A client steered the running turn (written by the API's steer script, not the worker):
    # its agent applies the text at its next tool-result boundary.
    RUN_STEERED = "run.steered"
    # The reply's final text, stored just before the terminal event (of a completed run, or of
    # a provider-auth failure, which session chat and chat completions show as a reply).
    ASSISTANT_COMPLETED = "assistant.completed"
    RUN_COMPLETED = "run.completed"
    RUN_FAILED = "run.failed"
    RUN_CANCELLED = "run.cancelled"
    # Synthesised by readers, never stored: the cursor is older than what the stream holds.
    STREAM_GAP = "stream.gap"
    # Synthesised by readers, never stored: the run is gone from Redis (retention passed, or
    # Redis lost its data); the Hermes dialects show it as ``stream.error``.
    STREAM_LOST = "stream.lost"
    # Synthesised by readers, never stored: this API process stopped reading the run (its
    # stream-drain bound passed, api/drain.py) although the run goes on. The Hermes dialects
    # show no frame for it (their stream closes with a resume frame); the OpenAI ones end the
    # stream with an error (``server_draining``).
    STREAM_DRAINED = "stream.drained"


TERMINAL_EVENTS = frozenset(
    {EventType.RUN_COMPLETED, EventType.RUN_FAILED, EventType.RUN_CANCELLED}
)

# The answers to an approval request: offered in ``approval.request`` (``choices``) by the
# worker's agent, accepted by ``POST /v1/runs/{id}/approval`` on any API replica
# (upstream-api.md §4.3).
APPROVAL_CHOICES = ("once", "session", "always", "deny")

# What a subagent event may carry (upstream-api.md §3.3), in upstream's order. Producers keep only
# these and readers render only these, so a new field of Hermes' never reaches clients
# unreviewed. The free-text ones are redacted by their producer before they are stored.
SUBAGENT_FIELDS = (
    "preview",
    "goal",
    "task_count",
    "task_index",
    "subagent_id",
    "child_session_id",
    "delegation_id",
    "parent_id",
    "depth",
    "model",
    "tool_count",
    "status",
    "summary",
    "duration_seconds",
    "input_tokens",
    "output_tokens",
    "reasoning_tokens",
    "api_calls",
    "cost_usd",
    "files_read",
    "files_written",
    "output_tail",
)
SUBAGENT_FREE_TEXT = frozenset({"preview", "goal", "summary", "output_tail"})

_STREAM_ID = re.compile(r"^(\d{1,20})(?:-(\d{1,20}))?$")


def parse_stream_id(raw: str) -> tuple[int, int] | None:
    """Parse a client-supplied cursor (``ms-seq`` or ``ms``); None when it is not one."""
    match = _STREAM_ID.match(raw.strip())
    if not match:
        return None
    ms, seq = int(match.group(1)), int(match.group(2) or 0)
    if ms >= 2**64 or seq >= 2**64:
        return None
    return ms, seq


def format_stream_id(parts: tuple[int, int]) -> str:
    return f"{parts[0]}-{parts[1]}"


def just_before(entry_id: str) -> str | None:
    """A cursor that sorts right before the stream entry ``entry_id`` (so reading after it
    starts with that entry); None when ``entry_id`` is not an entry id."""
    parts = parse_stream_id(entry_id)
    if parts is None:
        return None
    ms, seq = parts
    if seq > 0:
        return format_stream_id((ms, seq - 1))
    return format_stream_id((ms - 1, 2**64 - 1)) if ms > 0 else None


@dataclass(frozen=True)
class RunEvent:
    type: str
    run_id: str
    session_id: str = ""
    seq: int = 0
    ts: float = 0.0
    attempt: int = 0
    data: dict[str, Any] = field(default_factory=dict)
    id: str = ""

    @property
    def terminal(self) -> bool:
        return self.type in TERMINAL_EVENTS


def superseded(event: RunEvent, entry_id: str) -> bool:
    """Whether ``event`` (a later attempt's ``run.restarted`` or ``run.resumed``) supersedes
    the stream entry ``entry_id`` an earlier attempt wrote: a restart supersedes everything
    before it, a resume what follows its ``valid_through`` (the interrupted step's output)."""
    if event.type == EventType.RUN_RESTARTED:
        return True
    if event.type != EventType.RUN_RESUMED:
        return False
    through = parse_stream_id(str(event.data.get("valid_through") or ""))
    entry = parse_stream_id(entry_id)
    return through is None or entry is None or entry > through


def lost_event(run_id: str) -> RunEvent:
    """The synthesised event that says "this run is gone: nothing can follow"."""
    return RunEvent(type=EventType.STREAM_LOST, run_id=run_id)


def drained_event(run_id: str) -> RunEvent:
    """The synthesised event that says "this process stops reading: the run goes on"."""
    return RunEvent(type=EventType.STREAM_DRAINED, run_id=run_id)


def message_id_for(run_id: str) -> str:
    """Stable per run, so every attempt and dialect names the reply message the same (the
    Responses dialect has item ids of its own:
    ``api/openai/responses_render.output_message_id``)."""
    return "msg_" + run_id.removeprefix("run_")
