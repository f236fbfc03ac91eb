"""Which event loop a long-running process (API, worker, dev) runs on.

uvloop by default where it is installed (it is a dependency on Linux and macOS): the API and
the worker spend much of their time in the loop itself — waking a task per SSE client and per
event, timers per token — and uvloop's cut event latency at ~1,000 events/s from ~2.4 to
~1.5 ms p50 (docs/performance.md). ``event_loop = "asyncio"`` opts out. The loop is set for the
process's main loop only (``loop_factory``, not a global policy), so an agent library calling
``asyncio.run`` in its own thread still gets a standard loop.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from hermes_queue.config import EVENT_LOOPS, ConfigError

log = logging.getLogger(__name__)

__all__ = ["EVENT_LOOPS", "resolve", "run"]
T = TypeVar("T")


def resolve(choice: str) -> str:
    """``asyncio`` or ``uvloop`` for a setting value; ``uvloop`` asked for but missing raises."""
    available = importlib.util.find_spec("uvloop") is not None
    if choice == "uvloop" and not available:
        raise ConfigError('event_loop = "uvloop" but uvloop is not installed')
    if choice == "auto":
        return "uvloop" if available else "asyncio"
    return choice


def _factory(kind: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    if kind != "uvloop":
        return None
    import uvloop

    return uvloop.new_event_loop


def run(coro: Coroutine[Any, Any, T], choice: str) -> T:
    """``asyncio.run(coro)`` on the loop ``choice`` resolves to."""
    kind = resolve(choice)
    with asyncio.Runner(loop_factory=_factory(kind)) as runner:
        log.info("event loop: %s", kind)
        return runner.run(coro)
