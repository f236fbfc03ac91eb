"""Cheap SSE reading for thousands of clients in one process: frames are counted per chunk in
C (``bytes.count``, one regex pass for the ids) instead of decoding each frame's JSON, so the
benchmark client spends as little CPU per frame as possible. Used by ``sse_fanout.py`` on both
servers it compares (hermes-queue and the raw aiohttp reference), so their clients cost the same.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp

_SSE_ID = re.compile(rb"^id: (\d+)-(\d+)$", re.MULTILINE)
DELTA_MARK = b'"event": "message.delta"'
TERMINAL_MARKS = (
    b'"event": "run.completed"',
    b'"event": "run.failed"',
    b'"event": "run.cancelled"',
)
CLOSED_MARK = b": stream closed\n\n"


@dataclass
class SseTally:
    """What one client got from one SSE stream, counted without decoding the JSON."""

    frames: int = 0  # ``data:`` lines
    deltas: int = 0  # frames whose payload is a ``message.delta``
    in_order: bool = True  # every ``id:`` strictly greater than the one before: no duplicates
    terminal_last: bool = False  # the last frame is run.completed/failed/cancelled
    closed: bool = False  # ``: stream closed`` arrived
    first_at: float | None = None  # time.monotonic() when the first frame arrived
    closed_at: float | None = None

    def complete(self, frames: int, deltas: int) -> bool:
        ok = self.in_order and self.terminal_last and self.closed
        return ok and self.frames == frames and self.deltas == deltas


async def tally_sse(
    session: aiohttp.ClientSession, url: str, on_open: Callable[[], None] | None = None
) -> SseTally:
    """Read an SSE response to ``: stream closed`` (or EOF); ``on_open`` is called once its
    headers arrived. Frames are only counted once their closing blank line arrived."""
    tally = SseTally()
    tail = b""
    last_id = (-1, -1)
    async with session.get(url) as response:
        if response.status != 200:
            raise RuntimeError(f"{url} answered {response.status}")
        if on_open is not None:
            on_open()
        async for chunk in response.content.iter_any():
            buf = tail + chunk
            cut = buf.rfind(b"\n\n")
            if cut < 0:
                tail = buf
                continue
            whole, tail = buf[: cut + 2], buf[cut + 2 :]
            frames = whole.count(b"\ndata: ") + whole.startswith(b"data: ")
            if frames:
                if tally.first_at is None:
                    tally.first_at = time.monotonic()
                tally.frames += frames
                tally.deltas += whole.count(DELTA_MARK)
                last = whole[whole.rfind(b"data: ") :]
                tally.terminal_last = any(mark in last for mark in TERMINAL_MARKS)
            for match in _SSE_ID.finditer(whole):
                current = (int(match[1]), int(match[2]))
                tally.in_order = tally.in_order and current > last_id
                last_id = current
            if whole.endswith(CLOSED_MARK):
                tally.closed = True
                tally.closed_at = time.monotonic()
                break
    return tally
