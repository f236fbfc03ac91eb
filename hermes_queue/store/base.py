"""The session store contract: row types, errors and projections (the protocol: ``protocol.py``).

Sessions and their transcripts are the only state the API keeps in SQL (upstream-api.md §6). Two
backends implement the same protocol (SQLite for one host, PostgreSQL for several), and one
contract suite runs against both, so callers never branch on the backend. Rows are plain frozen
dataclasses rather than driver records so nothing above this package depends on a driver, and the
projections below are the *only* way rows leave the process: they hide the system prompt and the
model config, which may carry routing details clients must never see.
"""

from __future__ import annotations

import enum
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

MAX_TITLE_LENGTH = 100
PREVIEW_LENGTH = 60

# End reasons the store itself interprets (others are stored verbatim).
END_REASON_COMPRESSION = "compression"
END_REASON_BRANCHED = "branched"
# model_config markers that say "this child is not a continuation of its parent".
BRANCH_MARKER = "_branched_from"
DELEGATE_MARKER = "_delegate_from"

MessageOrder = Literal["oldest", "latest"]


class _Unset(enum.Enum):
    """Sentinel type so ``update_session(title=None)`` (clear) differs from "leave alone"."""

    UNSET = 0


UNSET = _Unset.UNSET


# ---------------------------------------------------------------------------------------------
# Errors. The API maps them to HTTP answers, so each one means exactly one client-visible thing.
# ---------------------------------------------------------------------------------------------


class StoreError(Exception):
    """Base class for every error the store raises on purpose."""


class StoreUnavailable(StoreError):
    """The database cannot be reached or opened; the API answers 503 session_db_unavailable."""


class SessionExists(StoreError):
    """A session with this id already exists (409 session_exists)."""


class SessionNotFound(StoreError):
    """No session has this id (404 session_not_found)."""


class InvalidTitle(StoreError):
    """The title cannot be stored: too long, or already used (400 invalid_title)."""


class TitleConflict(InvalidTitle):
    """Another session already has this title. A subclass so ``except InvalidTitle`` covers both,
    matching upstream where both cases are one ValueError and one 400 code. ``title`` is the
    title as stored (sanitised), so ``title_holder`` finds the session that has it."""

    def __init__(self, title: str | None) -> None:
        super().__init__(f"title {title!r} is already in use")
        self.title = title


# ---------------------------------------------------------------------------------------------
# Rows
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SessionRow:
    """One ``sessions`` row with JSON columns decoded.

    ``last_active``/``preview`` are only filled by ``list_sessions`` (None elsewhere), and
    ``lineage_root_id`` is reserved for list rows projected from a compression chain.
    """

    id: str
    source: str
    user_id: str | None
    session_key: str | None
    model: str | None
    model_config: dict[str, Any] | None
    system_prompt: str | None
    parent_session_id: str | None
    started_at: float
    ended_at: float | None
    end_reason: str | None
    title: str | None
    message_count: int
    tool_call_count: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    reasoning_tokens: int
    estimated_cost_usd: float | None
    actual_cost_usd: float | None
    api_call_count: int
    archived: bool
    last_active: float | None = None
    preview: str | None = None
    lineage_root_id: str | None = None
    # Its owner (tenancy/keys.py; docs/tenants.md). Never shown to clients (the projections below).
    tenant: str = "default"


@dataclass(frozen=True)
class MessageRow:
    """One ``messages`` row; ``content`` is a string, a decoded content-part list, or None."""

    id: int
    session_id: str
    role: str
    content: Any
    tool_call_id: str | None
    tool_calls: Any
    tool_name: str | None
    timestamp: float
    token_count: int | None
    finish_reason: str | None
    reasoning: str | None
    reasoning_content: str | None
    turn_key: str | None = None


# The source a session gets unless its creator names one: upstream's API server platform.
DEFAULT_SESSION_SOURCE = "api_server"


@dataclass(frozen=True)
class TurnUsage:
    """One turn's usage, added to its session's running totals (costs counted from 0 once
    given); ``model``: the model that ran, recorded when the session names none yet."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    api_calls: int = 0
    estimated_cost_usd: float | None = None
    actual_cost_usd: float | None = None
    model: str | None = None


# ---------------------------------------------------------------------------------------------
# Projections (upstream-api.md §6.1)
# ---------------------------------------------------------------------------------------------

_SESSION_PUBLIC_KEYS = (
    "id",
    "source",
    "user_id",
    "model",
    "title",
    "started_at",
    "ended_at",
    "end_reason",
    "message_count",
    "tool_call_count",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "estimated_cost_usd",
    "actual_cost_usd",
    "api_call_count",
    "parent_session_id",
    "last_active",
    "preview",
    "_lineage_root_id",
)
# What a client may see of a stored message (upstream's ``_message_response`` keys).
MESSAGE_PUBLIC_KEYS = (
    "id",
    "session_id",
    "role",
    "content",
    "tool_call_id",
    "tool_calls",
    "tool_name",
    "timestamp",
    "token_count",
    "finish_reason",
    "reasoning",
    "reasoning_content",
)
# Dataclass fields that only exist on some rows: None there means "not on this row".
_OPTIONAL_SESSION_KEYS = {
    "last_active": "last_active",
    "preview": "preview",
    "lineage_root_id": "_lineage_root_id",
}


def _session_mapping(row: SessionRow | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(row, Mapping):
        return dict(row)
    out: dict[str, Any] = {}
    for f in fields(row):
        value = getattr(row, f.name)
        if f.name in _OPTIONAL_SESSION_KEYS:
            if value is not None:
                out[_OPTIONAL_SESSION_KEYS[f.name]] = value
        else:
            out[f.name] = value
    return out


def project_session(row: SessionRow | Mapping[str, Any]) -> dict[str, Any]:
    """The client-safe session dict: allow-listed keys only, never the prompt or model_config.

    Keys missing on the row are omitted rather than sent as null, so ``last_active`` and
    ``preview`` appear only on list rows, as upstream.
    """
    data = _session_mapping(row)
    out = {key: data[key] for key in _SESSION_PUBLIC_KEYS if key in data}
    out["has_system_prompt"] = bool(data.get("system_prompt"))
    out["has_model_config"] = bool(data.get("model_config"))
    return out


def project_message(row: MessageRow | Mapping[str, Any]) -> dict[str, Any]:
    """The client-safe message dict: only the fields upstream exposes (no turn_key)."""
    if isinstance(row, Mapping):
        return {key: row[key] for key in MESSAGE_PUBLIC_KEYS if key in row}
    return {key: getattr(row, key) for key in MESSAGE_PUBLIC_KEYS}


# ---------------------------------------------------------------------------------------------
# Small pure helpers shared by both backends
# ---------------------------------------------------------------------------------------------

_LINEAGE_SUFFIX = re.compile(r"^(.*?) #(\d+)$")


def sanitize_title(title: str | None) -> str | None:
    """Normalise a title the way upstream does; None/blank means "no title".

    Control characters are dropped and whitespace runs collapse to one space, so two titles that
    look the same on screen also collide in the UNIQUE index.
    """
    if title is None:
        return None
    if not isinstance(title, str):
        raise InvalidTitle("title must be a string")
    cleaned = "".join(
        " " if ch.isspace() else ch
        for ch in title
        if ch.isspace() or unicodedata.category(ch)[0] != "C"
    )
    cleaned = " ".join(cleaned.split())
    if not cleaned:
        return None
    if len(cleaned) > MAX_TITLE_LENGTH:
        raise InvalidTitle(f"title is longer than {MAX_TITLE_LENGTH} characters")
    return cleaned


def lineage_base(title: str) -> str:
    """``"T1 #3"`` → ``"T1"``: the title a lineage is numbered from."""
    match = _LINEAGE_SUFFIX.match(title)
    return match.group(1) if match else title


def next_lineage_title(base: str, existing: list[str]) -> str:
    """Given the titles already used in a lineage, the next free one (``"T1"`` → ``"T1 #2"``).

    The unnumbered original counts as #1, so the first fork of "T1" is "T1 #2".
    """
    if not existing:
        return base
    highest = 1
    for title in existing:
        match = _LINEAGE_SUFFIX.match(title)
        if match and match.group(1) == base:
            highest = max(highest, int(match.group(2)))
    return f"{base} #{highest + 1}"


def make_preview(text: str | None) -> str:
    """First user message, single-lined and cut to ~60 characters, as upstream's list rows."""
    if not text:
        return ""
    raw = text.replace("\r", " ").replace("\n", " ")[: PREVIEW_LENGTH + 3].strip()
    return raw[:PREVIEW_LENGTH] + ("..." if len(raw) > PREVIEW_LENGTH else "")
