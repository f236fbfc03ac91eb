"""Redis clients with timeouts, so an unresponsive Redis is an error within seconds, never a
hang: the API answers 503 and a worker's append retries or fails the turn."""

from __future__ import annotations

import redis.asyncio as aioredis

from hermes_queue.config import Settings

COMMAND_TIMEOUT = 5.0
CONNECT_TIMEOUT = 2.0


def connect(settings: Settings, *, for_pubsub: bool = False) -> aioredis.Redis:
    """A pooled async client. ``for_pubsub`` has no read timeout: a quiet channel is normal.

    The pool is bounded (``redis_pool_size``): a burst of requests waits for a connection
    instead of opening one per request, so a process's connection count stays constant.
    """
    pool = aioredis.BlockingConnectionPool.from_url(
        settings.redis_url,
        max_connections=settings.redis_pool_size,
        timeout=COMMAND_TIMEOUT,
        socket_timeout=None if for_pubsub else COMMAND_TIMEOUT,
        socket_connect_timeout=CONNECT_TIMEOUT,
        health_check_interval=30,
    )
    return aioredis.Redis(connection_pool=pool)
