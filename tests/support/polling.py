"""Awaiting a condition that nothing signals (state in Redis, a store, another process's log or
port, a buffer): the one polling helper of the tests and the benchmarks.

Where something can be awaited (an event, a queue, a stream), await it instead; where a test
wants time to pass, it does not want this either. ``eventually`` is for "this will hold soon":
it returns as soon as it does, and fails after a bound, never sleeps a fixed time to let it.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

Probe = Callable[[], Awaitable[T]] | Callable[[], T]


class NeverHeld(AssertionError):
    """The condition did not hold within its bound: ``last`` is the probe's last result
    (``__cause__``: the last error retried, if the probe failed last)."""

    def __init__(self, message: str, last: object = None) -> None:
        super().__init__(message)
        self.last = last


async def eventually(
    probe: Probe[T],
    check: Callable[[T], object] = bool,
    *,
    within: float = 15.0,
    what: str | Callable[[], str] = "condition",
    every: float = 0.05,
    retry_on: tuple[type[BaseException], ...] = (),
) -> T:
    """Call ``probe`` (a function or a coroutine function) every ``every`` s until ``check``
    holds on its result (by default: the result is truthy); return that result.

    An exception of a type in ``retry_on`` counts as "not yet"; any other propagates at once
    (a probe can raise to give up early, e.g. when the process it watches exited). After
    ``within`` s raise :class:`NeverHeld`, naming ``what`` (a string, or a function called then,
    e.g. for a log's tail) and holding the last result.
    """
    deadline = time.monotonic() + within
    while True:
        failure: BaseException | None = None
        result: Any = None
        try:
            result = probe()
            if inspect.isawaitable(result):
                result = await result
        except retry_on as exc:
            failure = exc
        else:
            if check(result):
                return result  # type: ignore[no-any-return]
        if time.monotonic() > deadline:
            described = what() if callable(what) else what
            last = f"last error: {failure!r}" if failure else f"last value: {result!r}"
            message = f"{described}: not within {within:g}s; {last}"
            raise NeverHeld(message, None if failure else result) from failure
        await asyncio.sleep(every)
