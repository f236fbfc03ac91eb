"""What a Redis server executed, counted from ``INFO commandstats`` (commands run inside scripts
included): for tests that hold a code path to the Redis work it costs. Counts are server-wide,
so such a test uses a private server (``EmbeddedRedis``) that nothing else talks to."""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis

# The counting itself (INFO) and resetting it (CONFIG RESETSTAT).
_OWN = frozenset({"info", "config|resetstat", "config"})


async def command_calls(redis: aioredis.Redis) -> Counter[str]:
    """Calls per command (lower case, ``config|resetstat`` style for subcommands) since the
    server's counters were last reset, the counting's own commands left out."""
    stats = await redis.info("commandstats")
    calls: Counter[str] = Counter()
    for name, entry in stats.items():
        command = str(name).removeprefix("cmdstat_")
        if command not in _OWN:
            calls[command] = int(entry["calls"])
    return calls


async def commands_for(redis: aioredis.Redis, action: Callable[[], Awaitable[Any]]) -> Counter[str]:
    """The commands the server executed while ``action`` ran."""
    await redis.config_resetstat()
    await action()
    return await command_calls(redis)
