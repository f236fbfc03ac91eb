"""The runtime of a long-running process (API, worker, dev): its event loop and its GC.

uvloop by default where it is installed (it is a dependency on Linux and macOS): the API and
the worker spend much of their time in the loop itself — waking a task per SSE client and per
event, timers per token — and uvloop's cut event latency at ~1,000 events/s from ~2.4 to
~1.5 ms p50 (docs/performance.md). ``event_loop = "asyncio"`` opts out. The loop is set for the
process's main loop only (``loop_factory``, not a global policy), so an agent library calling
``asyncio.run`` in its own thread still gets a standard loop.

The garbage collector is tuned for a server that allocates a lot of short-lived objects per
event: CPython's default (a young collection every 700 net allocations, a full one every 100 of
those) ran full collections often enough, over tens of thousands of live objects (one set per
SSE client), to pause the API for 50–120 ms under 512 streaming clients. With the objects that
exist at start-up frozen and a young generation of 50,000, the same load answered new requests
at p99 55 ms instead of 118 ms (docs/performance.md). Cycles are still collected; the heap holds
at most ~50,000 extra young objects (a few MB).
"""

from __future__ import annotations

import asyncio
import gc
import importlib.util
import logging
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from hermes_queue.config import EVENT_LOOPS, ConfigError

log = logging.getLogger(__name__)

__all__ = ["EVENT_LOOPS", "GC_THRESHOLDS", "resolve", "run"]
GC_THRESHOLDS = (50_000, 50, 100)
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
    """``asyncio.run(coro)`` on the loop ``choice`` resolves to, with the GC tuned meanwhile."""
    kind = resolve(choice)
    thresholds = gc.get_threshold()
    gc.freeze()  # what exists now (modules, settings) is never garbage
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        with asyncio.Runner(loop_factory=_factory(kind)) as runner:
            log.info("event loop: %s", kind)
            return runner.run(coro)
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()
