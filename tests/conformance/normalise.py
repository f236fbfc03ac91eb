"""What must differ between two servers answering the same script, replaced by placeholders.

- Minted ids (runs, messages, completions, responses, tool items, generated session ids,
  UUIDs) become ``<kind:N>``, numbered per transcript in order of first appearance: the same
  id maps to the same placeholder wherever it appears (a header, a frame, a later request's
  answer, inside a message), so references are still compared, only the random part is not.
- Times (``ts``, ``timestamp``, ``created``, ``created_at``, …) become ``<time>`` when they
  are numbers (null stays null); durations ``<duration>``.
- Token counts become ``<tokens>`` when positive: the prompt each side's agent builds may
  differ by a few tokens. Zero stays 0 (a failed turn reports zeros).
- Store row ids (a message's ``id``) become ``<row>``: they count every message in the store.
- SSE ``id:`` lines become ``<sse:N>`` (distinct ids stay distinct; a repeated one repeats).

Frame numbering (``seq``, ``sequence_number``) is kept here: the comparer checks it on each side
and then masks it (``canonical``), so one missing frame is reported once, not as a shift of
every later number. ``canonical`` also joins consecutive text deltas of one message on every
dialect (session ``assistant.delta``, runs ``message.delta``, chat ``delta.content`` chunks,
Responses ``output_text.delta``): where a reply's text is cut into deltas is timing, not
content — upstream batches Responses deltas in 50 ms windows (upstream-api.md §3.4) and follows
the model's chunks elsewhere, and our worker sends a reply's deltas at most once per
``stream_coalesce_ms`` (80 ms by default; the first at once) and merges the deltas that pile up
behind an append in flight (docs/compatibility.md, "Token deltas"). The joined text is still
compared.
"""

from __future__ import annotations

import copy
import re
from dataclasses import replace
from typing import Any

from tests.conformance.exchange import Exchange, Frame

_ID_PATTERNS = (
    ("run", re.compile(r"run_[0-9a-f]{32}")),
    ("msg", re.compile(r"msg_[0-9a-f]{24,32}")),
    ("chatcmpl", re.compile(r"chatcmpl-[0-9a-f]{20,40}")),
    ("resp", re.compile(r"resp_[0-9a-f]{20,40}")),
    ("fco", re.compile(r"fco_[0-9A-Za-z_]{6,64}")),
    ("fc", re.compile(r"fc_[0-9A-Za-z_]{6,64}")),
    ("session", re.compile(r"api_\d{9,11}_[0-9a-f]{8}")),
    ("uuid", re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")),
)
_ANY_ID = re.compile("|".join(f"(?P<{kind}>{pattern.pattern})" for kind, pattern in _ID_PATTERNS))
TIME_KEYS = frozenset(
    {
        "ts",
        "timestamp",
        "created",
        "created_at",
        "updated_at",
        "started_at",
        "ended_at",
        "last_active",
        "completed_at",
    }
)
TOKEN_KEYS = frozenset(
    {
        "input_tokens",
        "output_tokens",
        "total_tokens",
        "prompt_tokens",
        "completion_tokens",
        "reasoning_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
    }
)
RESPONSES_DELTA = "response.output_text.delta"


class Normaliser:
    """One per transcript (one side of one script), so placeholders number consistently."""

    def __init__(self) -> None:
        self._ids: dict[str, str] = {}
        self._counts: dict[str, int] = {}

    def placeholder(self, value: str, kind: str) -> str:
        if value not in self._ids:
            self._counts[kind] = self._counts.get(kind, 0) + 1
            self._ids[value] = f"<{kind}:{self._counts[kind]}>"
        return self._ids[value]

    def text(self, value: str) -> str:
        def swap(match: re.Match[str]) -> str:
            kind = match.lastgroup or "id"
            return self.placeholder(match.group(0), kind)

        return _ANY_ID.sub(swap, value)

    def value(self, value: Any, key: str | None = None) -> Any:
        if isinstance(value, dict):
            return {k: self.value(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [self.value(item, key) for item in value]
        if isinstance(value, bool) or value is None:
            return value
        if isinstance(value, int | float):
            if key in TIME_KEYS:
                return "<time>"
            if key == "duration":
                return "<duration>"
            if key in TOKEN_KEYS and value > 0:
                return "<tokens>"
            if key == "id" and isinstance(value, int):
                return "<row>"
            return value
        if isinstance(value, str):
            return self.text(value)
        return value

    def exchange(self, exchange: Exchange) -> Exchange:
        headers = {name: self.text(value) for name, value in exchange.headers.items()}
        frames = None
        if exchange.frames is not None:
            frames = [self.frame(frame) for frame in exchange.frames]
        return replace(
            exchange,
            label=exchange.label,
            headers=headers,
            body=self.value(copy.deepcopy(exchange.body)),
            frames=frames,
        )

    def frame(self, frame: Frame) -> Frame:
        return Frame(
            event=frame.event,
            data=self.value(copy.deepcopy(frame.data)),
            id=None if frame.id is None else self.placeholder(f"sse-id:{frame.id}", "sse"),
            comment=frame.comment,
        )


def canonical(frames: list[Frame]) -> list[Frame]:
    """Frames as compared once numbering is checked: ``seq`` / ``sequence_number`` masked,
    text deltas of one message joined."""
    masked = []
    for frame in join_deltas(frames):
        if isinstance(frame.data, dict):
            data = {
                key: f"<{key}>" if key in ("seq", "sequence_number") else value
                for key, value in frame.data.items()
            }
            frame = replace(frame, data=data)
        masked.append(frame)
    return masked


def _delta_text(frame: Frame) -> tuple[str, str] | None:
    """A text delta frame's (message key, text), or None: the message key keeps deltas of
    different messages (or items) apart."""
    data = frame.data
    if not isinstance(data, dict):
        return None
    if frame.event == RESPONSES_DELTA:
        return f"responses:{data.get('item_id')}", str(data.get("delta", ""))
    if frame.event == "assistant.delta":
        return f"session:{data.get('message_id')}", str(data.get("delta", ""))
    if frame.event is None and data.get("event") == "message.delta":
        return "runs", str(data.get("delta", ""))
    if frame.name == "chunk.content":
        return f"chat:{data.get('id')}", str(data["choices"][0]["delta"].get("content") or "")
    return None


def _with_text(frame: Frame, text: str) -> Frame:
    data = copy.deepcopy(frame.data)
    if frame.name == "chunk.content":
        data["choices"][0]["delta"]["content"] = text
    else:
        data["delta"] = text
    return replace(frame, data=data)


def join_deltas(frames: list[Frame]) -> list[Frame]:
    """Consecutive text deltas of one message as one frame (the first's fields, the texts
    joined)."""
    joined: list[Frame] = []
    previous_key: str | None = None
    for frame in frames:
        delta = _delta_text(frame)
        if delta is not None and joined and delta[0] == previous_key:
            last = joined[-1]
            last_text = _delta_text(last)
            joined[-1] = _with_text(last, (last_text[1] if last_text else "") + delta[1])
            continue
        joined.append(frame)
        previous_key = delta[0] if delta is not None else None
    return joined


def normalise(exchanges: list[Exchange]) -> list[Exchange]:
    """A whole transcript of one side."""
    normaliser = Normaliser()
    return [normaliser.exchange(exchange) for exchange in exchanges]
