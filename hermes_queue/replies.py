"""What a run's reply is, read the same way by every reader: the API's dialects and final
answers, and the worker that resumes a run.

A reply is the text of the run's ``message.delta`` events, less what a later attempt
superseded (a ``run.restarted`` supersedes everything before it, a ``run.resumed`` what follows
its ``valid_through``: the interrupted step's output), and, once written, the reply as shown
(``assistant.completed``: ``MEDIA:`` tags inlined). :class:`ReplyText` is that fold, the one
place it is written.

Two outcomes are not what their event type suggests: upstream answers a provider
authentication failure as an ordinary reply (upstream-api.md §6.4), so ``run.failed`` with
reason ``provider_auth`` is shown as a completed turn with zero usage; and a completed reply
cut at the model's output limit is partial (``finish_reason: "length"``). Every renderer and
the handlers that answer with a final reply ask here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hermes_queue.events import EventType, RunEvent, superseded


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


@dataclass
class ReplyText:
    """A run's reply as far as the events added so far tell it."""

    # Each delta's text and the id of the event that carried it (what a supersede is judged by).
    _pieces: list[tuple[str, str]] = field(default_factory=list)
    # The reply as shown (``assistant.completed``), once the run wrote it.
    shown: str | None = None

    def add(self, event: RunEvent) -> None:
        """Fold ``event`` in: a delta adds its text, ``assistant.completed`` sets the reply as
        shown, a later attempt's start drops what it supersedes. Other events change nothing."""
        match event.type:
            case EventType.MESSAGE_DELTA:
                delta = str(event.data.get("delta", ""))
                if delta:
                    self._pieces.append((event.id, delta))
            case EventType.ASSISTANT_COMPLETED:
                self.shown = str(event.data.get("content", ""))
            case EventType.RUN_RESTARTED | EventType.RUN_RESUMED:
                # A later attempt says again what the interrupted one had started to say.
                self._pieces = [p for p in self._pieces if not superseded(event, p[0])]
                self.shown = None

    def add_text(self, event_id: str, text: str) -> None:
        """Text shown by an event that is not a delta (a reply that was not streamed)."""
        if text:
            self._pieces.append((event_id, text))

    def superseded_by(self, event: RunEvent) -> bool:
        """Whether ``event`` (a later attempt's start) takes back text already folded in: a
        reader that was shown it cannot be shown the reply as it now stands."""
        if event.type not in (EventType.RUN_RESTARTED, EventType.RUN_RESUMED):
            return False
        return any(superseded(event, event_id) for event_id, _ in self._pieces)

    @property
    def text(self) -> str:
        """The reply's streamed text that stands."""
        return "".join(text for _, text in self._pieces)

    def __bool__(self) -> bool:
        return bool(self._pieces)
