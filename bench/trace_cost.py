"""What tracing costs one turn's processes, span by span, without the noise of a deployment:
the spans of one echo turn (request, enqueue, wait, claim, turn, finish, a reader's request and
first frame) made through hermes-queue's own tracing code in a tight loop, exported over OTLP/HTTP
(batched, protobuf, as deployed) to ``bench/otlp_sink.py`` in another process. CPU of this
process per turn (its exporter thread included), against the same loop with tracing off (the
hooks' None checks).

    python -m bench.trace_cost [--turns 5000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

from bench.lib import report
from hermes_queue import tracing
from hermes_queue.redisio.embedded import free_port
from hermes_queue.routing.selection import Selection
from hermes_queue.runs.model import RunRecord
from hermes_queue.runs.turn_request import TurnRequest

if TYPE_CHECKING:
    from hermes_queue.tracing.spans import Tracing

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@dataclass(frozen=True)
class Created:
    run_id: str
    session_id: str


async def ok(request: web.Request) -> web.StreamResponse:
    return web.Response(status=202)


def post_request() -> Any:
    """What the middleware reads of a request (a real one would cost the same either way)."""
    resource = SimpleNamespace(canonical="/v1/runs")
    return SimpleNamespace(
        method="POST",
        path="/v1/runs",
        headers=CIMultiDictProxy(CIMultiDict(traceparent=TRACEPARENT)),
        match_info=SimpleNamespace(route=SimpleNamespace(resource=resource)),
    )


async def one_turn(index: int, traced: Tracing | None) -> None:
    """The hooks of one turn, in the order a turn meets them (untraced: ``traced`` None)."""
    post = post_request()
    carrier: dict[str, str] = {}

    async def created(given: dict[str, str]) -> Created:
        carrier.update(given)
        return Created(f"run_{index}", f"run_{index}")

    async def handler(request: web.Request) -> web.StreamResponse:
        if traced is not None:
            await traced.enqueue(created)
        return await ok(request)

    middleware = traced.http_middleware() if traced is not None else None
    if middleware is not None:
        await middleware(post, handler)
    else:
        await handler(post)
    record = RunRecord(
        f"run_{index}",
        f"run_{index}",
        "running",
        created_at=time.time() - 0.001,
        route=Selection(provider="p", model="m"),
        request=TurnRequest("hi", trace=carrier or None),
    )
    if traced is not None:
        turn = traced.begin_turn(record, 1, "w", time.time_ns())
        with traced.finish_span("completed", {}):
            pass
        turn.end("completed")
        traced.first_frame(record.run_id, time.time(), 1)


async def measure(turns: int, traced: Tracing | None) -> float:
    """CPU µs per turn of this process (all its threads)."""
    await one_turn(0, traced)
    start = time.process_time()
    for index in range(turns):
        await asyncio.create_task(one_turn(index, traced))  # a task each, as jobs and requests
    if traced is not None:
        traced.provider.force_flush()  # type: ignore[attr-defined]
    return (time.process_time() - start) * 1e6 / turns


async def rounds(turns: int, count: int) -> dict[str, list[float]]:
    results: dict[str, list[float]] = {"off": [], "on": []}
    for _ in range(count):
        results["off"].append(await measure(turns, None))
        traced = tracing.install(os.environ, "bench")
        assert traced is not None, "the OTEL_* variables this benchmark sets ask for traces"
        results["on"].append(await measure(turns, traced))
        traced.shutdown()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    port = free_port()
    sink = subprocess.Popen(
        [sys.executable, "-m", "bench.otlp_sink", "--port", str(port)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert sink.stdout is not None and "OTLP sink" in sink.stdout.readline()
        os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{port}"
        # A tight loop outruns the exporter: a queue that holds a round drops nothing, so
        # every span made is also encoded and sent (and counted).
        os.environ.setdefault("OTEL_BSP_MAX_QUEUE_SIZE", str(8 * (args.turns + 1)))
        results = asyncio.run(rounds(args.turns, args.rounds))
    finally:
        sink.terminate()
        out, _ = sink.communicate(timeout=30)
    off, on = statistics.median(results["off"]), statistics.median(results["on"])
    report.print_table(
        f"tracing cost per turn, {args.turns} turns x {args.rounds} rounds (medians)",
        ["tracing", "cpu_us_per_turn", "rounds"],
        [["off", round(off, 1), results["off"]], ["on", round(on, 1), results["on"]]],
    )
    print(f"  on - off: {on - off:.1f} µs of CPU per turn (its 7 spans, exported)")
    print("  sink: " + (out.strip().splitlines()[-1] if out.strip() else "no summary"))
    report.emit_json("trace_cost", {"off_us": off, "on_us": on, "rounds": results})


if __name__ == "__main__":
    main()
