"""What a pooled Redis call costs its caller: hermes-queue's ``BoundedPool`` against redis-py's
``BlockingConnectionPool``, the pool it replaced (``hermes_queue/redisio/pool.py`` says why).

Both bounded at 32 connections (``redis_pool_size``'s default); ``PING`` through a
``redis.asyncio.Redis`` on each, ``--count`` calls spread over 1, 32 and 256 concurrent callers
(``--callers``), pools alternating, ``--rounds`` rounds. Reported per pool and level: CPU of
this process per call (Redis' own is not in it) and wall time per call, medians of the rounds.
Needs a Redis: the bundled ``redis-server`` is started unless ``HERMES_QUEUE_BENCH_REDIS_URL``
names one (``PING`` only: nothing is written).

    python -m bench.pool_cost [--count 6000] [--callers 1,32,256] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import redis.asyncio as aioredis
import uvloop

from bench.lib import deploy, report
from hermes_queue.redisio.pool import BoundedPool

POOLS: dict[str, type[aioredis.ConnectionPool]] = {
    "hermes-queue BoundedPool": BoundedPool,
    "redis-py BlockingConnectionPool": aioredis.BlockingConnectionPool,
}


async def one_round(
    url: str, pool_class: type[aioredis.ConnectionPool], callers: int, count: int
) -> tuple[float, float]:
    pool = pool_class.from_url(url, max_connections=32, timeout=5)
    client = aioredis.Redis(connection_pool=pool)
    await asyncio.gather(*(client.ping() for _ in range(64)))  # connections made

    async def caller(calls: int) -> None:
        for _ in range(calls):
            await client.ping()

    calls = count // callers
    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(caller(calls) for _ in range(callers)))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    await client.aclose()
    return cpu / (calls * callers) * 1e6, wall / (calls * callers) * 1e6


async def measure(url: str, levels: list[int], count: int, rounds: int) -> list[list[object]]:
    rows: list[list[object]] = []
    for callers in levels:
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in POOLS}
        for _ in range(rounds):
            for name, pool_class in POOLS.items():
                samples[name].append(await one_round(url, pool_class, callers, count))
        for name, values in samples.items():
            cpu = statistics.median(v[0] for v in values)
            wall = statistics.median(v[1] for v in values)
            rows.append([callers, name, round(cpu, 1), round(wall, 1)])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=6000, help="calls per pool and round")
    parser.add_argument("--callers", default="1,32,256", help="concurrent callers per level")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    levels = [int(level) for level in args.callers.split(",")]
    with deploy.bench_redis_url() as url:
        rows = uvloop.run(measure(url, levels, args.count, args.rounds))
    report.print_table(
        f"a pooled PING, 32 connections ({args.count} calls per pool and round, medians of "
        f"{args.rounds} rounds)",
        ["callers", "pool", "CPU µs per call", "wall µs per call"],
        rows,
    )
    report.emit_json(
        "pool_cost",
        {
            "count": args.count,
            "rounds": args.rounds,
            "rows": [
                {"callers": c, "pool": p, "cpu_us": cpu, "wall_us": wall}
                for c, p, cpu, wall in rows
            ],
            "machine": report.machine_facts(),
        },
    )


if __name__ == "__main__":
    main()
