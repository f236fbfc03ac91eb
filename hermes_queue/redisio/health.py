"""What state a Redis is in, said the way an operator needs to hear it, and logged once per
change of state rather than once per attempt.

A Redis URL can fail in ways that look alike in a traceback and call for different fixes:
nothing listens there (start Redis, or fix the host), something that is not Redis answers (an
HTTP server or another service on that port: fix the port), or Redis refuses the credentials.
:func:`classify` tells them apart from the exception redis-py raised, so the API answers 503
``redis_unavailable`` to each (never 500), ``hermes-queue check`` names which it is, and a
worker waits for Redis instead of exiting.

Background loops (reaper, stream hub, presence, catalog, the worker's poll) retry every second
or so while Redis is away; :class:`OutageLog` makes their logs one line when an outage starts
(or changes kind) and one when it ends, whatever the number of attempts in between.
"""

from __future__ import annotations

import enum
import logging
import time

from redis.exceptions import (
    AuthenticationError,
    InvalidResponse,
    RedisClusterException,
    ResponseError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

# How long a turn's writes wait for Redis to come back before the turn fails
# (``workers/appends.py``): a restart, or a Sentinel failover (a dead primary noticed after
# ``down-after-milliseconds``, 30 s by default, then an election). The queue's own timeout of a
# delivery leaves room for it (``jobqueue/jobs.py``).
OUTAGE_WAIT_SECONDS = 90.0

# What a server that cannot be reached (or stopped answering in time) raises.
UNREACHABLE = (
    RedisConnectionError,
    RedisTimeoutError,
    RedisClusterException,
    OSError,
    TimeoutError,
)


class RedisState(enum.Enum):
    """How a Redis answered; the value is the phrase used in logs and ``check``."""

    UNREACHABLE = "is not reachable"
    NOT_REDIS = "answers, but not as Redis (another service listens on that port)"
    REFUSED_CREDENTIALS = "refused the credentials"


def _is_protocol_error(exc: BaseException) -> bool:
    """The reply could not be parsed as RESP: whatever answered does not speak Redis. redis-py
    raises InvalidResponse (``Protocol error, got "H" as reply type byte``); hiredis and some
    proxies surface it as a ResponseError worded the same."""
    if isinstance(exc, InvalidResponse):
        return True
    return isinstance(exc, ResponseError) and str(exc).lower().startswith("protocol error")


def classify(exc: BaseException) -> RedisState | None:
    """The state of the server ``exc`` shows; None when it says nothing about the server (a
    script error, a wrong type: the call's own fault)."""
    if _is_protocol_error(exc):
        return RedisState.NOT_REDIS
    if isinstance(exc, AuthenticationError):
        return RedisState.REFUSED_CREDENTIALS
    if isinstance(
        exc,
        RedisConnectionError | RedisTimeoutError | RedisClusterException | OSError | TimeoutError,
    ):
        return RedisState.UNREACHABLE
    return None


def describe(exc: BaseException) -> str:
    """``is not reachable (ConnectionError)``: the state and the exception's class (never its
    text, which can quote hosts, keys or data), for one-line reports."""
    state = classify(exc)
    return f"{state.value if state else 'failed'} ({type(exc).__name__})"


class OutageLog:
    """Logs a failing dependency once when the failure starts (or changes kind) and once when
    it ends, instead of once per retry; the attempts in between go to DEBUG.

    ``what`` names the loop in each line ("reaper", "stream hub"), ``where`` the server
    (``redis_url``, or the URL itself, masked). Callers that never learn of a success (the
    API's error middleware only sees failures) pass ``quiet_after``: a failure after that many
    seconds without one is logged again, as a new outage.
    """

    def __init__(
        self,
        logger: logging.Logger,
        what: str,
        *,
        where: str = "redis_url",
        quiet_after: float | None = None,
        meanwhile: str = "retrying quietly until it answers",
    ) -> None:
        self.logger = logger
        self.what = what
        self.where = where
        self.quiet_after = quiet_after
        self.meanwhile = meanwhile
        self.state: RedisState | str | None = None
        self.failures = 0
        self._since = 0.0
        self._last = 0.0

    @property
    def failing(self) -> bool:
        return self.state is not None

    def failed(self, exc: BaseException) -> None:
        state: RedisState | str = classify(exc) or type(exc).__name__
        now = time.monotonic()
        lapsed = self.quiet_after is not None and now - self._last > self.quiet_after
        if state != self.state or lapsed:
            phrase = state.value if isinstance(state, RedisState) else f"failed ({state})"
            self.logger.warning(
                "%s: %s %s: %s: %s; %s",
                self.what,
                self.where,
                phrase,
                type(exc).__name__,
                exc,
                self.meanwhile,
            )
            self.failures, self._since = 0, now
        else:
            self.logger.debug("%s: %s still failing: %r", self.what, self.where, exc)
        self.state, self._last = state, now
        self.failures += 1

    def ok(self) -> None:
        if self.state is None:
            return
        self.logger.info(
            "%s: %s answers again (after %d failed attempts in %.1f s)",
            self.what,
            self.where,
            self.failures,
            time.monotonic() - self._since,
        )
        self.state = None
