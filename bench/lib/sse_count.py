"""Cheap SSE reading for thousands of clients in one process: frames are counted per chunk in
C (``bytes.count``, one regex pass for the ids) instead of decoding each frame's JSON, so the
benchmark client spends as little CPU per frame as possible. Used by ``sse_fanout.py`` on both
servers it compares (hermes-queue and the raw aiohttp reference), so their clients cost the same:
:class:`Clients`, one task per stream, and :func:`delivery`, what they got.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

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


class Clients:
    """N SSE clients, one task each, counting what they receive."""

    def __init__(self, session: aiohttp.ClientSession, urls: list[str]) -> None:
        self.connected = 0
        self.errors: list[str] = []
        self.started = time.monotonic()
        self.tasks = [asyncio.create_task(self._follow(session, url)) for url in urls]

    def _opened(self) -> None:
        self.connected += 1

    async def _follow(self, session: aiohttp.ClientSession, url: str) -> SseTally:
        try:
            return await tally_sse(session, url, self._opened)
        except Exception as exc:
            self.errors.append(repr(exc)[:200])
            return SseTally()

    async def wait_connected(self, limit_s: float = 120.0) -> float:
        deadline = time.monotonic() + limit_s
        while self.connected + len(self.errors) < len(self.tasks):
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        return time.monotonic() - self.started

    async def finish(
        self, limit_s: float, sample: Callable[[], object] | None = None
    ) -> list[SseTally]:
        gather = asyncio.gather(*self.tasks)
        deadline = time.monotonic() + limit_s
        while not gather.done() and time.monotonic() < deadline:
            if sample is not None:
                sample()
            await asyncio.sleep(0.1)
        if not gather.done():
            for task in self.tasks:
                task.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)
            self.errors.append(f"not finished within {limit_s:g} s")
            return [
                t.result() if t.done() and not t.cancelled() else SseTally() for t in self.tasks
            ]
        return list(await gather)


def delivery(
    tallies: list[SseTally], frames: int, deltas: int, cpu_s: float, ended: float
) -> dict[str, Any]:
    """Throughput over the delivery window (see the module docstring) and completeness."""
    firsts = [t.first_at for t in tallies if t.first_at is not None]
    lasts = [t.closed_at if t.closed_at is not None else ended for t in tallies if t.first_at]
    window = max(lasts) - min(firsts) if firsts else float("nan")
    delivered = sum(t.frames for t in tallies)
    return {
        "clients_complete": sum(t.complete(frames, deltas) for t in tallies),
        "clients_closed_ok": sum(t.closed for t in tallies),
        "out_of_order": sum(not t.in_order for t in tallies),
        "frames_delivered": delivered,
        "window_s": round(window, 3),
        "frames_per_s": round(delivered / window, 1) if firsts else 0.0,
        "server_cpu_s": round(cpu_s, 3),
        "server_cpu_ms_per_1k_frames": round(cpu_s * 1e6 / max(delivered, 1), 2),
    }
