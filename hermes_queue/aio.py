"""Small asyncio helpers for background tasks that must stop promptly."""

from __future__ import annotations

import asyncio
import logging

log = logging.getLogger(__name__)


def cancel_requested() -> bool:
    """True when the current task was asked to stop, even if a library swallowed the
    CancelledError (redis-py's internal timeouts can on Python 3.11)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


async def cancel_and_wait(*tasks: asyncio.Task[object], grace: float = 5.0) -> None:
    """Cancel background tasks and wait for them, but never longer than ``grace``."""
    for task in tasks:
        task.cancel()
    if not tasks:
        return
    _done, pending = await asyncio.wait(tasks, timeout=grace)
    for task in pending:
        log.warning("background task %s did not stop within %.1fs", task.get_name(), grace)
