"""Differences the suite finds that are ours to fix, while they are not fixed yet.

A comparison failing for one of these is marked ``xfail(strict=True)`` with the reasons: it
flips (and fails the suite) the moment the fix lands, and the mark must go. Each reason also
says which differences it explains (a pattern over the difference's place): a pending test that
shows any *other* difference fails outright, so a pending mark never hides a regression.
Nothing here ever lets a comparison pass.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest

from tests.conformance.compare import Difference, Mismatch

F = TypeVar("F", bound=Callable[..., Any])
MARKER = "pending_fixes"


@dataclass(frozen=True)
class Pending:
    reason: str
    explains_where: str  # a pattern searched in Difference.where

    def explains(self, difference: Difference) -> bool:
        return re.search(self.explains_where, difference.where) is not None


# None now: every difference the suite found is fixed or allowlisted (allowlist.py).


def _marks(reasons: tuple[Pending, ...]) -> list[pytest.MarkDecorator]:
    reason = "; ".join(p.reason for p in reasons)
    return [
        pytest.mark.xfail(strict=True, raises=Mismatch, reason=reason),
        getattr(pytest.mark, MARKER)(*reasons),
    ]


def pending(*reasons: Pending) -> Callable[[F], F]:
    """Mark a test pending until these fixes land."""

    def mark(test: F) -> F:
        for decorator in _marks(reasons):
            test = decorator(test)
        return test

    return mark


def case(*values: Any, until: tuple[Pending, ...] = (), id: str | None = None) -> Any:
    """Parametrize values, marked pending until the named fixes land."""
    return pytest.param(*values, marks=_marks(until) if until else [], id=id)
