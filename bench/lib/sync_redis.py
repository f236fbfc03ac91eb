"""redis-py's sync client, read with the types its replies have.

redis-py types each command once for its sync and its asyncio client (``Awaitable[Any] | Any``);
a sync client's reply is never the awaitable, so the benchmarks say what it is, here once.
"""

from __future__ import annotations

from typing import Any, cast

import redis


def info(client: redis.Redis, section: str) -> dict[str, Any]:
    """``INFO section``, as redis-py parses it (a field per key; ``commandstats``: a dict each)."""
    return cast(dict[str, Any], client.info(section))
