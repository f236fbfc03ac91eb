"""Shapes that request fields accept, as pydantic models, for the JSON Schema of those fields.

They describe what the checks in ``fields.py`` and ``content.py`` accept (message content
in its three dialects, messages, ``model_options``); those checks stay the validation, because
they carry upstream's exact error codes, messages and ``param`` paths. Each endpoint's body
model attaches a shape to the field it describes (``json_schema_input_type``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Open(BaseModel):
    """Unknown keys are accepted and ignored, as upstream does."""

    model_config = ConfigDict(extra="allow")


class TextPart(_Open):
    """A text part in any dialect; text-only content collapses to one string."""

    type: Literal["text", "input_text", "output_text"]
    text: str


class ImageUrl(_Open):
    url: str = Field(description="http(s) URL or a data:image/… URL")
    detail: str | None = None


class ImagePart(_Open):
    """An image part: Chat Completions nests ``{url, detail}``, Responses puts the URL string
    in ``image_url`` and ``detail`` beside it."""

    type: Literal["image_url", "input_image"]
    image_url: str | ImageUrl
    detail: str | None = None


ContentPart = TextPart | ImagePart
Content = str | list[ContentPart | str] | None


class Message(_Open):
    """A conversation message: ``content`` is a string or a list of parts."""

    role: Literal["system", "user", "assistant", "tool"]
    content: Content = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    name: str | None = None


class HistoryMessage(Message):
    """A ``conversation_history`` entry: ``content`` is required (upstream's rule)."""

    content: Content


class ChatMessage(_Open):
    """A Chat Completions message: system messages are flattened into the instructions, user
    and assistant messages are the conversation (the last one this turn), others are ignored."""

    role: str
    content: Content | Any = None


class ResponseInputItem(_Open):
    """A Responses ``input`` item: ``system``/``developer`` texts join the instructions."""

    role: Literal["user", "assistant", "system", "developer"]
    content: Content | Any = None


class Reasoning(_Open):
    enabled: bool | None = None
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh", "max", "ultra"] | None = (
        None
    )


class ModelOptions(_Open):
    """Per-turn model options (upstream-api.md §6.3); unknown keys are kept and passed on."""

    reasoning: Reasoning | None = None
    reasoning_effort: (
        Literal["none", "minimal", "low", "medium", "high", "xhigh", "max", "ultra"] | None
    ) = None
    service_tier: str | None = Field(default=None, max_length=64)
    fast: Any = Field(default=None, description="lenient boolean")
