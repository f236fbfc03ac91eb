"""Compare two transcripts of one script and say, readably, everything that differs.

For each pair of exchanges: the numbering of stream frames (``seq`` 1, 2, 3 … on the session
stream, ``sequence_number`` 0, 1, 2 … on Responses) is compared as a scheme first; then the
allowlist (``allowlist.py``) checks and removes each documented, deliberate difference; then
status, the headers that matter, JSON bodies key by key, and SSE frames aligned by name (so a
missing or extra frame is reported once, and the frames around it are still compared).
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.conformance.exchange import Exchange, Frame
from tests.conformance.normalise import canonical, normalise


class _Missing:
    def __repr__(self) -> str:
        return "<absent>"


MISSING: Any = _Missing()
EXCERPT = 240


@dataclass(frozen=True)
class Difference:
    where: str
    upstream: Any
    ours: Any
    note: str = ""

    def __str__(self) -> str:
        note = f" ({self.note})" if self.note else ""
        return (
            f"{self.where}{note}\n      upstream: {excerpt(self.upstream)}\n"
            f"      ours:     {excerpt(self.ours)}"
        )


class Mismatch(AssertionError):
    """The two servers answered the same script differently."""


def excerpt(value: Any) -> str:
    if value is MISSING:
        return "<absent>"
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= EXCERPT else text[: EXCERPT - 1] + "…"


def assert_same(
    upstream: list[Exchange],
    ours: list[Exchange],
    pending: Callable[[Difference], bool] | None = None,
) -> None:
    """Raise ``Mismatch`` listing every difference that is not on the allowlist. For a test
    marked pending (``pending.py``), a difference its pending fixes do not explain raises a
    plain ``AssertionError`` instead, which its expected-failure mark does not accept."""
    __tracebackhide__ = True
    found = differences(upstream, ours)
    if not found:
        return
    stray = [d for d in found if pending is not None and not pending(d)]
    if stray:
        raise AssertionError(
            f"{len(stray)} difference(s) no pending fix explains:\n{_listing(stray)}"
        )
    raise Mismatch(f"{len(found)} difference(s) from upstream:\n{_listing(found)}")


def _listing(found: list[Difference]) -> str:
    return "\n".join(f"  - {difference}" for difference in found)


def differences(upstream: list[Exchange], ours: list[Exchange]) -> list[Difference]:
    from tests.conformance.allowlist import apply_allowlist

    found: list[Difference] = []
    if len(upstream) != len(ours):
        found.append(Difference("number of exchanges", len(upstream), len(ours)))
    for index, (up, us) in enumerate(zip(normalise(upstream), normalise(ours), strict=False)):
        where = f"#{index + 1} {up.label}"
        found += _numbering(where, up, us)
        up, us, noted = apply_allowlist(where, up, us)
        found += noted
        found += exchange_differences(where, up, us)
    return found


def exchange_differences(where: str, up: Exchange, us: Exchange) -> list[Difference]:
    found: list[Difference] = []
    if up.status != us.status:
        found.append(Difference(f"{where} › status", up.status, us.status))
    for name in sorted(set(up.headers) | set(us.headers)):
        a, b = up.headers.get(name, MISSING), us.headers.get(name, MISSING)
        if a != b:
            found.append(Difference(f"{where} › header {name}", a, b))
    if (up.frames is None) != (us.frames is None):
        found.append(
            Difference(f"{where} › body kind", _kind(up), _kind(us), "a stream on one side only")
        )
        return found
    if up.frames is not None and us.frames is not None:
        found += frame_differences(where, canonical(up.frames), canonical(us.frames))
    else:
        found += value_differences(f"{where} › body", up.body, us.body)
    return found


def frame_differences(where: str, up: list[Frame], us: list[Frame]) -> list[Difference]:
    """Frames aligned by name; then each aligned pair compared field by field."""
    found: list[Difference] = []
    matcher = difflib.SequenceMatcher(
        a=[f.name for f in up], b=[f.name for f in us], autojunk=False
    )
    for tag, a0, a1, b0, b1 in matcher.get_opcodes():
        if tag == "equal":
            for i, j in zip(range(a0, a1), range(b0, b1), strict=True):
                found += _frame_pair(f"{where} › frame {i + 1}/{j + 1} {up[i].name}", up[i], us[j])
            continue
        for i in range(a0, a1):
            found.append(Difference(f"{where} › frame {i + 1} {up[i].name}", _show(up[i]), MISSING))
        for j in range(b0, b1):
            found.append(
                Difference(f"{where} › frame -/{j + 1} {us[j].name}", MISSING, _show(us[j]))
            )
    return found


def _frame_pair(where: str, a: Frame, b: Frame) -> list[Difference]:
    found: list[Difference] = []
    if a.event != b.event:
        found.append(Difference(f"{where} › event", a.event, b.event))
    if (a.id is None) != (b.id is None):
        found.append(Difference(f"{where} › id line", a.id, b.id))
    if a.comment != b.comment:
        found.append(Difference(f"{where} › comment", a.comment, b.comment))
    found += value_differences(f"{where} › data", a.data, b.data)
    return found


def value_differences(where: str, a: Any, b: Any) -> list[Difference]:
    """Key by key for objects, item by item for arrays, type-strict for scalars."""
    if isinstance(a, dict) and isinstance(b, dict):
        found: list[Difference] = []
        for key in [*a, *(k for k in b if k not in a)]:
            found += value_differences(f"{where}.{key}", a.get(key, MISSING), b.get(key, MISSING))
        return found
    if isinstance(a, list) and isinstance(b, list):
        found = []
        for index in range(max(len(a), len(b))):
            found += value_differences(
                f"{where}[{index}]",
                a[index] if index < len(a) else MISSING,
                b[index] if index < len(b) else MISSING,
            )
        return found
    if type(a) is not type(b) or a != b:
        return [Difference(where, a, b)]
    return []


def _numbering(where: str, up: Exchange, us: Exchange) -> list[Difference]:
    """Each side's frame numbering as a scheme ("1..n", or the numbers when not that)."""
    found: list[Difference] = []
    for key, first in (("seq", 1), ("sequence_number", 0)):
        a, b = _scheme(up.frames, key, first), _scheme(us.frames, key, first)
        if a != b:
            found.append(Difference(f"{where} › {key} numbering", a, b))
    return found


def _scheme(frames: list[Frame] | None, key: str, first: int) -> str | list[Any] | None:
    numbers = [f.data[key] for f in frames or () if isinstance(f.data, dict) and key in f.data]
    if not numbers:
        return None
    if numbers == list(range(first, first + len(numbers))):
        return f"{first}..n, one per frame"
    return numbers


def _show(frame: Frame) -> Any:
    shown: dict[str, Any] = {}
    if frame.event is not None:
        shown["event"] = frame.event
    if frame.comment is not None:
        shown["comment"] = frame.comment
    if frame.data is not None:
        shown["data"] = frame.data
    return shown


def _kind(exchange: Exchange) -> str:
    return "SSE" if exchange.frames is not None else type(exchange.body).__name__
