"""A run's stream entry, both sides: how the run scripts write one and how readers decode it.

The writer is Lua, beside this module: ``entry.lua`` (``add_event``), loaded ahead of every
run script's prelude (``runs/scripts.py``). It ``XADD``s the fields :data:`FIELDS` — ``t``
(type), ``s`` (seq), ``a`` (attempt), ``ts`` (unix seconds), ``sid`` (session id), ``d`` (JSON
data, :func:`encode_data`) — and publishes on the channel named like the stream the entry id
and the same values in that order, NUL-separated, the JSON data last. The stream entry id is
the event's id and the SSE ``id:`` line.

An entry reaches a reader in three forms, each decoded here into a :class:`RunEvent`:

- an ``XRANGE`` row, fields as a mapping (:func:`decode_entry`: replays, the repository);
- a raw ``XREAD`` row, fields as a flat list (:func:`decode_flat`: the hub's follower);
- the published message (:func:`split_published`, then :func:`decode_flat`: the follower
  hands an entry on from the message itself when it is the next one).

Each runs once per event per API process, so the common shapes (bytes keys, as redis-py returns
them) take a fast path without per-field fallbacks; the general one gives the same result.
:func:`entry_fields` and :func:`published` are the writer's Python mirror, for code that stands
in for a run script (tests, benchmarks).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from importlib import resources
from typing import Any

from hermes_queue.events import RunEvent

# The fields of an entry, in the order the writer adds them (and publishes their values).
FIELDS = ("t", "s", "a", "ts", "sid", "d")
_SEPARATOR = b"\0"
# The writer: ``add_event``, which every run script calls (runs/scripts.py prepends it).
ENTRY_WRITER = (resources.files("hermes_queue.streams") / "entry.lua").read_text(encoding="utf-8")


def encode_data(data: dict[str, Any]) -> str:
    """The ``d`` field: the event's data as compact JSON (what every script call passes)."""
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def entry_fields(
    event_type: str, seq: int, attempt: int, ts: float, session_id: str, data: dict[str, Any]
) -> dict[str, str]:
    """The fields ``add_event`` writes, for code standing in for a run script."""
    values = (str(event_type), str(seq), str(attempt), repr(ts), session_id, encode_data(data))
    return dict(zip(FIELDS, values, strict=True))


def published(entry_id: str, fields: Mapping[str, str]) -> str:
    """The message ``add_event`` publishes for the entry ``entry_id`` with ``fields``."""
    return "\0".join([entry_id, *(fields[name] for name in FIELDS)])


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else str(value)


def _entry_id(entry_id: str | bytes) -> str:
    return entry_id.decode() if isinstance(entry_id, bytes) else entry_id


def decode_entry(run_id: str, entry_id: str | bytes, fields: Mapping[Any, Any]) -> RunEvent:
    """One entry whose fields are a mapping, bytes or str keys (redis-py returns either).
    ``ValueError`` for data that is not JSON; a missing field takes its default."""
    if fields and type(next(iter(fields))) is bytes:  # the fast path: what redis-py returns
        get = fields.get
        raw = get(b"d")
        return RunEvent(
            type=_text(get(b"t")),
            run_id=run_id,
            session_id=_text(get(b"sid")),
            seq=int(get(b"s") or 0),
            ts=float(get(b"ts") or 0.0),
            attempt=int(get(b"a") or 0),
            data=json.loads(_text(raw)) if raw else {},
            id=_entry_id(entry_id),
        )

    def field(name: str) -> str:
        return _text(fields.get(name.encode(), fields.get(name, b"")))

    raw_data = field("d")
    return RunEvent(
        type=field("t"),
        run_id=run_id,
        session_id=field("sid"),
        seq=int(field("s") or 0),
        ts=float(field("ts") or 0.0),
        attempt=int(field("a") or 0),
        data=json.loads(raw_data) if raw_data else {},
        id=_entry_id(entry_id),
    )


def decode_flat(run_id: str, entry_id: str | bytes, flat: list[Any]) -> RunEvent:
    """One entry as raw ``XREAD`` replies carry it: ``[field, value, field, value, …]``."""
    if not flat:
        return decode_entry(run_id, entry_id, {})
    if len(flat) % 2:
        raise ValueError(f"odd field list in stream entry {entry_id!r}")
    it = iter(flat)
    return decode_entry(run_id, entry_id, dict(zip(it, it, strict=False)))


def split_published(payload: bytes) -> tuple[bytes, int, list[bytes]] | None:
    """A published message: the entry id, its seq and its fields as :func:`decode_flat`
    takes them; None when the message is not one (the reader then reads the stream)."""
    parts = payload.split(_SEPARATOR, 6)
    if len(parts) != 7 or not parts[2].isdigit():
        return None
    entry_id, etype, seq, attempt, ts, sid, data = parts
    flat = [b"t", etype, b"s", seq, b"a", attempt, b"ts", ts, b"sid", sid, b"d", data]
    return entry_id, int(seq), flat


__all__ = [
    "ENTRY_WRITER",
    "FIELDS",
    "decode_entry",
    "decode_flat",
    "encode_data",
    "entry_fields",
    "published",
    "split_published",
]
