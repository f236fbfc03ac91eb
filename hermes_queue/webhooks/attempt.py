"""One delivery attempt over HTTP, and what follows from its result (the schedule).

A POST of the delivery's body with its signed headers, no redirect followed (a 3xx is a
failure, as the Standard Webhooks spec says), cut after ``webhook_timeout_seconds``. Any 2xx
delivers it; ``410 Gone`` stops it (the receiver says it will never take it); a refused target
makes a dead letter at once; anything else is retried on the schedule, no sooner than a
``Retry-After`` of a 429 or 503 asks, until the schedule is spent (a dead letter too).
"""

from __future__ import annotations

import asyncio
import email.utils
import time
from dataclasses import dataclass

import aiohttp

from hermes_queue.webhooks.guard import refused_by_guard

# A Retry-After is honoured up to the longest step of the spec's schedule.
MAX_RETRY_AFTER = 10 * 3600.0
_ERROR_TEXT = 300


@dataclass(frozen=True)
class Result:
    """``kind``: ``2xx``, ``3xx``, ``4xx``, ``5xx`` (an answer), ``timeout``, ``error`` (no
    answer) or ``refused`` (the guard refused the target; nothing was sent)."""

    kind: str
    status: int | None = None
    error: str | None = None
    retry_after: float | None = None
    ms: float = 0.0


def retry_after(value: str | None, now: float) -> float | None:
    """A ``Retry-After`` header in seconds from ``now`` (delta-seconds or an HTTP date)."""
    if not value:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now)


async def post(
    session: aiohttp.ClientSession,
    url: str,
    headers: dict[str, str],
    body: str,
    within: float,
) -> Result:
    started = time.monotonic()

    def took() -> float:
        return round((time.monotonic() - started) * 1000, 1)

    try:
        async with asyncio.timeout(within):
            async with session.post(
                url, data=body.encode(), headers=headers, allow_redirects=False
            ) as response:
                status = response.status
                wait = retry_after(response.headers.get("Retry-After"), time.time())
    except TimeoutError:
        return Result("timeout", error=f"no answer within {within:g}s", ms=took())
    except (aiohttp.ClientError, OSError, ValueError) as exc:
        refused = refused_by_guard(exc)
        if refused is not None:
            return Result("refused", error=str(refused)[:_ERROR_TEXT], ms=took())
        text = f"{type(exc).__name__}: {exc}"[:_ERROR_TEXT]
        return Result("error", error=text, ms=took())
    return Result(f"{status // 100}xx", status, retry_after=wait, ms=took())


@dataclass(frozen=True)
class Verdict:
    """What an attempt's result does to its delivery: ``delivered``, ``gone``, ``dead`` or
    ``retry`` after ``delay`` seconds."""

    outcome: str
    delay: float = 0.0


def decide(result: Result, tries_before: int, delays: tuple[float, ...]) -> Verdict:
    """``tries_before``: attempts made on this schedule before this one."""
    if result.kind == "2xx":
        return Verdict("delivered")
    if result.status == 410:
        return Verdict("gone")
    if result.kind == "refused":
        return Verdict("dead")
    if tries_before >= len(delays):
        return Verdict("dead")
    delay = delays[tries_before]
    if result.status in (429, 503) and result.retry_after is not None:
        delay = max(delay, min(result.retry_after, MAX_RETRY_AFTER))
    return Verdict("retry", delay)
