"""Message content normalisation (upstream-api.md §1.4).

Clients send message content in three dialects: a plain string, OpenAI Chat
Completions parts (``text`` / ``image_url``) and OpenAI Responses parts
(``input_text`` / ``output_text`` / ``input_image``). The agent pipeline wants
one shape, so every user/assistant turn goes through :func:`normalize_content`:
text-only content becomes a plain string (so logs, titles and prompt caching
see the native shape) and content with images becomes Chat Completions vision
parts. System messages cannot carry images, so they go through
:func:`flatten_text` instead, which never fails.

Upstream (hermes-agent 0.19.0) *truncates* rather than rejects oversize input:
strings and text parts are cut to 65,536 characters (code points, not bytes)
and lists to their first 1,000 items. Only the flattener also caps the joined
total and the nesting depth; the multimodal path does not, and we mirror that
so the observable behaviour matches. The request body limit (10 MB) is the
real ceiling on total size there.
"""

from __future__ import annotations

from typing import Any

from hermes_queue.api.errors import ApiError

MAX_TEXT_CHARS = 65_536
"""Per-string cap, in characters; longer text is truncated, not rejected."""
MAX_LIST_ITEMS = 1_000
"""Items past this in a content array are dropped, not rejected."""
MAX_FLATTEN_DEPTH = 10
"""Nested lists deeper than this flatten to nothing (flattener only)."""

TEXT_PART_TYPES = frozenset({"text", "input_text", "output_text"})
IMAGE_PART_TYPES = frozenset({"image_url", "input_image"})
FILE_PART_TYPES = frozenset({"file", "input_file"})

ContentPart = dict[str, Any]
NormalizedContent = str | list[ContentPart]


def _cap(text: str) -> str:
    return text[:MAX_TEXT_CHARS]


def _part_type(part: dict[str, Any]) -> str:
    """Type names are matched loosely (case, whitespace) as upstream does."""
    return str(part.get("type") or "").strip().lower()


def _bad(code: str, message: str, param: str) -> ApiError:
    return ApiError(400, code, message, param=param)


def normalize_content(value: Any, param: str) -> NormalizedContent:
    """Validate user/assistant content and return the pipeline's shape.

    Returns a string for text-only content (parts joined with newlines) or a
    list of ``{"type": "text"|"image_url", ...}`` parts when an image is
    present. ``param`` is the request path of the whole content (for example
    ``messages[0].content``); upstream reports that path, not the index of the
    offending part, so errors carry it unchanged.

    Unknown *dict* parts are rejected so a client never has a turn silently
    dropped, whereas non-dict scalars and nested lists inside the array are
    skipped, keeping room for future Responses API additions.
    """
    if value is None:
        return ""
    if isinstance(value, str):
        return _cap(value)
    if not isinstance(value, list):
        # Numbers, booleans and stray objects degrade to text, as upstream.
        return flatten_text(value)

    parts: list[ContentPart] = []
    for item in value[:MAX_LIST_ITEMS]:
        if isinstance(item, str):
            if item:
                parts.append({"type": "text", "text": _cap(item)})
            continue
        if not isinstance(item, dict):
            continue
        kind = _part_type(item)
        if kind in TEXT_PART_TYPES:
            text = item.get("text")
            if text is not None and (text := str(text)):
                parts.append({"type": "text", "text": _cap(text)})
        elif kind in IMAGE_PART_TYPES:
            parts.append(_image_part(item, param))
        elif kind in FILE_PART_TYPES:
            raise _bad(
                "unsupported_content_type",
                "Inline image inputs are supported, but uploaded files and document "
                "inputs are not supported on this endpoint.",
                param,
            )
        else:
            raise _bad(
                "unsupported_content_type",
                f"Unsupported content part type {item.get('type')!r}. "
                "Only text and image_url/input_image parts are supported.",
                param,
            )

    if all(part["type"] == "text" for part in parts):
        # Also covers the empty list: no parts collapses to "".
        return "\n".join(part["text"] for part in parts)
    return parts


def _image_part(part: dict[str, Any], param: str) -> ContentPart:
    """Canonicalise one image part to the Chat Completions vision shape.

    Chat Completions nests ``{"url", "detail"}`` under ``image_url``; Responses
    puts a bare URL string there and ``detail`` beside it. A nested ``detail``
    key wins over the outer one, even when it is null.
    """
    detail = part.get("detail")
    ref = part.get("image_url")
    if isinstance(ref, dict):
        url = ref.get("url")
        detail = ref.get("detail", detail)
    else:
        url = ref
    if not isinstance(url, str) or not url.strip():
        raise _bad("invalid_image_url", "Image parts must include a non-empty image URL.", param)
    url = url.strip()
    lowered = url.lower()
    if lowered.startswith("data:"):
        # Only inline images: anything else would smuggle documents past us.
        if not lowered.startswith("data:image/") or "," not in url:
            raise _bad(
                "unsupported_content_type",
                "Only image data URLs are supported. Non-image data payloads are not supported.",
                param,
            )
    elif not lowered.startswith(("http://", "https://")):
        # file:, javascript:, ftp: … could make the server fetch local or odd resources.
        raise _bad(
            "invalid_image_url",
            "Image inputs must use http(s) URLs or data:image/... URLs.",
            param,
        )
    image: dict[str, Any] = {"url": url}
    if detail is not None:
        if not isinstance(detail, str) or not detail.strip():
            raise _bad(
                "invalid_content_part",
                "Image detail must be a non-empty string when provided.",
                param,
            )
        image["detail"] = detail.strip()
    return {"type": "image_url", "image_url": image}


def flatten_text(value: Any, *, _depth: int = 0) -> str:
    """Flatten any content to plain text without ever failing.

    Used for system messages, which providers cannot give images. Images and
    untyped or unknown parts are dropped; nested lists are followed up to
    :data:`MAX_FLATTEN_DEPTH`; the joined result is capped at
    :data:`MAX_TEXT_CHARS`, and collection stops once that much is gathered so
    a huge array costs linear time.
    """
    if _depth > MAX_FLATTEN_DEPTH or value is None:
        return ""
    if isinstance(value, str):
        return _cap(value)
    if not isinstance(value, list):
        return _cap(str(value))

    pieces: list[str] = []
    total = 0
    for item in value[:MAX_LIST_ITEMS]:
        piece = ""
        if isinstance(item, str):
            piece = _cap(item)
        elif isinstance(item, dict) and _part_type(item) in TEXT_PART_TYPES:
            text = item.get("text")
            piece = _cap(str(text)) if text else ""
        elif isinstance(item, list):
            piece = flatten_text(item, _depth=_depth + 1)
        if piece:
            pieces.append(piece)
            total += len(piece)
        if total >= MAX_TEXT_CHARS:
            break
    return _cap("\n".join(pieces))


def has_visible_payload(value: Any) -> bool:
    """True when content carries non-blank text or any image.

    Endpoints use it to reject empty turns (``missing_message`` and "No user
    message found") before spending an agent run on them.
    """
    if isinstance(value, str):
        return bool(value.strip())
    if not isinstance(value, list):
        return False
    for part in value:
        if isinstance(part, dict):
            kind = _part_type(part)
            if kind in IMAGE_PART_TYPES:
                return True
            if kind in TEXT_PART_TYPES and str(part.get("text") or "").strip():
                return True
    return False


def content_text(value: Any) -> str:
    """Plain text of normalised content, for previews and session titles.

    Images show as ``[image]`` so an image-only turn still has a preview;
    parts are joined with spaces (as upstream's CLI recap does) because a
    preview is a single line.
    """
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        return str(value)
    pieces: list[str] = []
    for part in value:
        if isinstance(part, str):
            pieces.append(part)
        elif isinstance(part, dict):
            kind = _part_type(part)
            if kind in TEXT_PART_TYPES:
                pieces.append(str(part.get("text") or ""))
            elif kind in IMAGE_PART_TYPES:
                pieces.append("[image]")
    return " ".join(piece for piece in pieces if piece)
