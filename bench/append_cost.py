"""What one event append costs the worker's event loop, layer by layer, with nothing idle.

A streamed token at one client is one append (docs/performance.md, "The floor"). This
separates what our layers add to it from the round trip underneath, in one process, in a
tight loop (so no wake-up from idle is in any figure; ``wakeup_cost.py`` measures those):

- ``RunEventSink.delta`` + ``flush``: the path a token takes once on the worker's loop (the
  sink's backlog, its flusher task, the batch token, the retry wrapper) and everything below;
- ``Attempt.append``: the fenced append script with one event (arguments, JSON, reply);
- ``RunEventSink.step`` and ``Attempt.append_step``: a durable step (docs/reliability.md): one
  event and a step record the size of a short tool result, in one fenced script call;
- ``PING`` on the same pipelined connection: the round trip alone (pack, send, reply future);
- redis-py's own ``PING`` through its pool, for scale.

CPU of this process per call (``time.process_time``; Redis' own CPU is not in it), each
``--count`` calls, ``--rounds`` rounds. Needs a Redis: the bundled ``redis-server`` is started
unless ``HERMES_QUEUE_BENCH_REDIS_URL`` names one (a namespace of its own is used and removed).

    python -m bench.append_cost [--count 3000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable

import redis.asyncio as aioredis
import uvloop

from bench.lib import deploy, report
from hermes_queue.agents.steps import tool_result
from hermes_queue.config import Settings
from hermes_queue.redisio.pipeline import PipelinedConnection
from hermes_queue.runs.attempt import Attempt
from hermes_queue.runs.model import NewRun
from hermes_queue.runs.placement import new_run_id
from hermes_queue.runs.repository import RunRepository
from hermes_queue.runs.turn_request import TurnRequest
from hermes_queue.workers.sink import RunEventSink

Layer = Callable[[int], Awaitable[None]]
# A tool call's result record, as the echo backend writes it (~250 bytes of JSON).
STEP = tool_result(
    "call_1",
    "terminal",
    {"role": "tool", "tool_call_id": "call_1", "tool_name": "terminal", "content": "ok " * 40},
)


async def cpu_per_call(layer: Layer, count: int) -> float:
    start = time.process_time()
    for index in range(count):
        await layer(index)
    return (time.process_time() - start) / count * 1e6


def layers(attempt: Attempt, redis: aioredis.Redis) -> dict[str, Layer]:
    sink = RunEventSink(attempt)
    connection = attempt.scripts.appends

    async def sink_delta(_: int) -> None:
        await sink.delta("token ")
        await sink.flush()

    async def attempt_append(index: int) -> None:
        await attempt.append([("message.delta", {"delta": "token "})], f"bench.{index}")

    async def sink_step(_: int) -> None:
        await sink.tool_completed("terminal", "call_1", result="ok")
        await sink.step(STEP)

    async def attempt_step(index: int) -> None:
        await attempt.append_step([("message.delta", {"delta": "token "})], STEP, f"step.{index}")

    async def pool_ping(_: int) -> None:
        await redis.ping()

    measured: dict[str, Layer] = {
        "RunEventSink.delta + flush": sink_delta,
        "Attempt.append (one event)": attempt_append,
        "RunEventSink.step (one event + a step)": sink_step,
        "Attempt.append_step (one event + a step)": attempt_step,
    }
    # One pipelined connection to PING on; on a Redis Cluster (``SlotPipelines``: one per slot,
    # script calls only) there is none, and the round trip alone is left out.
    if isinstance(connection, PipelinedConnection):

        async def pipelined_ping(_: int) -> None:
            await connection.call("PING")

        measured["PING, same pipelined connection"] = pipelined_ping
    measured["PING, redis-py pool"] = pool_ping
    return measured


async def measure(url: str, count: int, rounds: int) -> dict[str, list[float]]:
    settings = Settings.of(
        redis_url=url, namespace=f"bench-append-{uuid.uuid4().hex[:8]}"
    ).validate()
    redis = aioredis.Redis.from_url(url)
    repo = RunRepository(redis, settings.redis.keys, settings.runs)
    results: dict[str, list[float]] = {}
    try:
        for _ in range(rounds):
            run_id = new_run_id()
            await repo.create(NewRun(run_id, "bench", TurnRequest()))
            attempt = await repo.claim(run_id, "bench")
            assert attempt is not None
            for name, layer in layers(attempt, redis).items():
                await layer(-1)  # connections made, scripts loaded
                results.setdefault(name, []).append(await cpu_per_call(layer, count))
            await attempt.cancel()  # ends the run and its lease
        await repo.aclose()
    finally:
        async for key in redis.scan_iter(match=f"{settings.redis.namespace}:*"):
            await redis.delete(key)
        await redis.aclose()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=3000, help="calls per layer and round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with deploy.bench_redis_url() as url:
        results = uvloop.run(measure(url, args.count, args.rounds))
    rows = [
        [name, round(statistics.median(values), 1), " ".join(f"{v:.1f}" for v in values)]
        for name, values in results.items()
    ]
    report.print_table(
        f"CPU µs per call on the caller's side ({args.count} calls × {args.rounds} rounds, "
        "tight loop: nothing wakes from idle)",
        ["layer", "median", "rounds"],
        rows,
    )
    report.emit_json(
        "append_cost",
        {
            "count": args.count,
            "rounds": args.rounds,
            "us_per_call": {name: values for name, values in results.items()},
            "machine": report.machine_facts(),
        },
    )


if __name__ == "__main__":
    main()
