"""How an API process stops without cutting what it serves (issue 30).

A rollout sends each replica SIGTERM shortly after the load balancer starts taking it out of
rotation, and the balancer only learns of it later (endpoint removal lags, health checks
take a few periods). Refusing anything then would fail requests the balancer still sends, and
closing would cut every stream in flight; agent turns last minutes, and an OpenAI-dialect
client cannot resume. So from SIGTERM the process:

1. reports not-ready (``GET /health/ready`` answers 503 ``draining``), so balancers and probes
   take it out of rotation, and keeps serving every request that still reaches it, new turns
   included; every response then carries ``Connection: close``, so a kept-alive client opens
   its next connection through the balancer, to another replica;
2. keeps its listener open for at least ``drain_grace_seconds`` (the endpoint-removal lag);
3. exits once that time has passed and nothing is in flight (every stream's run ended, every
   waiting request answered), or at the latest ``stream_drain_seconds`` after the grace: then it
   closes what is left. A Hermes-dialect stream (runs events, session chat) ends with
   :data:`~hermes_queue.api.http.sse.RESUME_FRAME`, from which its client resumes on another
   replica with ``Last-Event-ID``; an OpenAI-dialect stream ends with its dialect's error chunk
   (code ``server_draining``); a request waiting for a reply gets 503 ``gateway_draining``.
   Each is counted in ``hermes_queue_drain_cuts_total{dialect}``.

A second SIGTERM or SIGINT ends the drain at once (the bound's closing frames still go out).
The process's stream hub, reader presence and reaper keep running until it exits, so the runs
it still streams keep counting as read.

An orchestrator's grace period must cover the whole of it: its pre-stop delay, then
``drain_grace_seconds + stream_drain_seconds`` and a margin (docs/deploy.md, the Helm chart
derives it from the same two values).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterator

log = logging.getLogger(__name__)

# After the bound, how long the handlers get to write their closing frames before the server
# cancels what is left.
CUT_SECONDS = 2.0

Dialect = str  # "hermes" (resumable) or "openai"


class Drain:
    """One API process's shutdown state, shared by the readiness route, the middleware that
    counts requests in flight, the readers of runs (``api/feed.py``) and the process entry
    point (:func:`drain_api`)."""

    def __init__(self, on_cut: Callable[[Dialect], None] | None = None) -> None:
        self.draining = False
        self.cutting = False
        self.began_at: float | None = None  # monotonic
        self._on_cut = on_cut
        self._in_flight = 0
        self._idle: asyncio.Event | None = None  # created on the loop, set while nothing runs
        self._readers: set[Callable[[], None]] = set()

    # -- requests ------------------------------------------------------------------------------
    @property
    def in_flight(self) -> int:
        """Requests being handled now (streams included)."""
        return self._in_flight

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        """Count one request in flight while the block runs (the drain middleware)."""
        self._in_flight += 1
        if self._idle is not None:
            self._idle.clear()
        try:
            yield
        finally:
            self._in_flight -= 1
            if self._in_flight == 0 and self._idle is not None:
                self._idle.set()

    async def idle(self) -> None:
        """Return once no request is in flight."""
        if self._idle is None:
            self._idle = asyncio.Event()
        if self._in_flight == 0:
            self._idle.set()
        await self._idle.wait()

    def watch(self, stop_reading: Callable[[], None]) -> Callable[[], None]:
        """Register a reader of a run (a stream, a request waiting for a reply) to be stopped
        when the bound passes; returns the function that forgets it. A reader that registers
        once the bound has passed is stopped at once."""
        if self.cutting:
            stop_reading()
            return lambda: None
        self._readers.add(stop_reading)
        return lambda: self._readers.discard(stop_reading)

    def cut(self, dialect: Dialect) -> None:
        """Count one response the bound cut (``hermes_queue_drain_cuts_total``)."""
        if self._on_cut is not None:
            self._on_cut(dialect)

    # -- the process ---------------------------------------------------------------------------
    def begin(self) -> None:
        """SIGTERM: not ready from now on."""
        if not self.draining:
            self.draining = True
            self.began_at = time.monotonic()

    def stop_readers(self) -> None:
        """The bound: every reader of a run stops; each writes its dialect's close."""
        self.cutting = True
        readers, self._readers = list(self._readers), set()
        for stop_reading in readers:
            stop_reading()


async def _first(*aws: asyncio.Future[object] | asyncio.Task[object]) -> None:
    await asyncio.wait(aws, return_when=asyncio.FIRST_COMPLETED)


async def drain_api(
    drain: Drain, stop: asyncio.Event, *, grace_seconds: float, stream_seconds: float
) -> None:
    """From the first stop signal (``stop`` already set) to the moment the server may close:
    at least ``grace_seconds``, then until nothing is in flight, at most ``stream_seconds``
    more; a second signal ends it at once. Returns once the readers the bound stopped have
    written their closes (or ``CUT_SECONDS`` passed)."""
    drain.begin()
    stop.clear()
    log.info(
        "draining: not ready; serving everything for at least %.1f s, then until every open "
        "stream ends (at most %.1f s more)",
        grace_seconds,
        stream_seconds,
    )
    signal = asyncio.ensure_future(stop.wait())
    grace = asyncio.ensure_future(asyncio.sleep(grace_seconds))
    idle: asyncio.Future[None] | None = None
    try:
        await _first(signal, grace)
        if not signal.done():
            idle = asyncio.ensure_future(drain.idle())
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(stream_seconds):
                    await _first(signal, idle)
        if drain.in_flight:
            why = "a second signal" if signal.done() else "the stream-drain bound"
            log.warning("drain ended by %s with %d request(s) in flight", why, drain.in_flight)
        else:
            log.info("drained: nothing in flight")
    finally:
        for task in (signal, grace, idle):
            if task is not None:
                task.cancel()
    drain.stop_readers()
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(CUT_SECONDS):
            await drain.idle()


__all__ = ["CUT_SECONDS", "Drain", "drain_api"]
