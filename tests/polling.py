"""Waiting for a condition that nothing signals (state in Redis, a store, another process)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any


async def eventually(
    probe: Callable[[], Awaitable[Any]],
    check: Callable[[Any], bool],
    within: float = 15.0,
    what: str = "condition",
) -> Any:
    """Poll ``probe`` until ``check`` holds on its result (bounded); return that result."""
    deadline = time.monotonic() + within
    while True:
        result = await probe()
        if check(result):
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} never held; last value: {result!r}")
        await asyncio.sleep(0.05)
