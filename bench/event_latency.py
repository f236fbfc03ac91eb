"""Event latency: a worker appends an event → an SSE client of the API receives it.

The echo backend streams one delta every ``--delay`` seconds per run; ``rate × delay``
closed-loop clients each start a long run (``--words`` words, so ``words × delay`` seconds) and
read its SSE, so about ``rate`` deltas per second flow through the API's stream hub overall.
Latency per delta = client receive time − the payload's ``timestamp`` (the worker's wall clock
just before its append script; same host, same clock). Includes the worker → Redis round trip,
the hub's XREAD, rendering and the loopback HTTP hop to a client in another process.

The workers run with ``stream_coalesce_ms`` 0 (``--coalesce-ms``), so each delta is an entry and
a frame of its own: this measures the path, not the delta window (whose wait comes before the
timestamp and which would cut the events per second).

    python -m bench.event_latency [--quick] [--rates 100,1000] [--rounds 3] [--coalesce-ms 0]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

from bench.lib import deploy, report, traffic


async def measure(base: str, clients: int, words: int, duration: float) -> dict[str, Any]:
    text = traffic.words(words)
    latencies: list[float] = []
    failures = 0
    stop_at = time.monotonic() + duration
    measuring = False  # skip each level's ramp-up: the first second of runs starting

    def on_event(payload: dict[str, Any], now: float) -> None:
        if measuring and payload.get("event") == "message.delta":
            latencies.append(now - payload["timestamp"])

    async def client(session: Any, offset: float) -> None:
        nonlocal failures
        await asyncio.sleep(offset)  # spread run starts so tokens are not in lockstep
        while time.monotonic() < stop_at:
            try:
                run_id = await traffic.post_run(session, base, text)
                _events, closed = await traffic.read_events(session, base, run_id, on_event)
                failures += not closed
            except Exception:
                failures += 1

    async with traffic.client_session(limit=clients + 16) as session:
        tasks = [asyncio.create_task(client(session, i / clients)) for i in range(clients)]
        await asyncio.sleep(2.0)
        measuring = True
        window_start = time.monotonic()
        count_start = len(latencies)
        await asyncio.sleep(max(0.0, stop_at - time.monotonic()))
        measuring = False
        window = time.monotonic() - window_start
        rate = (len(latencies) - count_start) / window
        await asyncio.gather(*tasks)
    return {
        "clients": clients,
        "events_per_s": round(rate, 1),
        "latency_ms": report.summary_ms(latencies),
        "failures": failures,
    }


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rates", default="100,1000", help="target deltas/s, comma-separated")
    parser.add_argument("--delay", type=float, default=0.02, help="echo seconds per token")
    parser.add_argument("--words", type=int, default=100)
    parser.add_argument("--duration", type=float, default=15.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--coalesce-ms", type=float, default=0.0, help="stream_coalesce_ms")
    args = parser.parse_args()
    if args.quick:
        args.duration, args.rounds = 6.0, 1
    args.rate_list = [int(r) for r in args.rates.split(",")]
    return args


async def run_rates(args: argparse.Namespace) -> tuple[list[dict[str, Any]], str]:
    """Every target rate, ``args.rounds`` times, on one deployment: each round's figures and
    Redis's version."""
    results = []
    with deploy.Deployment("event-latency") as dep:
        base = await dep.start_api()
        await dep.start_workers(
            1,
            echo_token_delay=args.delay,
            worker_concurrency=256,
            stream_coalesce_ms=args.coalesce_ms,
        )
        await measure(base, 2, 10, 1.5)  # warm-up
        for rate in args.rate_list:
            # Each token takes the delay plus the append's round trip: ~12 % more clients.
            clients = max(1, round(rate * args.delay * 1.12))
            for index in range(args.rounds):
                r = await measure(base, clients, args.words, args.duration)
                r.update(target_rate=rate, round=index + 1)
                results.append(r)
                print(
                    f"rate={rate} round={index + 1}: {r['events_per_s']} ev/s, "
                    f"p50 {r['latency_ms']['p50']} ms, p99 {r['latency_ms']['p99']} ms",
                    flush=True,
                )
        return results, dep.redis_version()


def summarize(results: list[dict[str, Any]], rates: list[int]) -> list[dict[str, Any]]:
    """Per target rate: medians over rounds, failures summed."""
    summary = []
    for rate in rates:
        rs = [r for r in results if r["target_rate"] == rate]
        summary.append(
            {
                "target_ev_s": rate,
                "rounds": len(rs),
                "ev_s": round(statistics.median(r["events_per_s"] for r in rs), 1),
                **{
                    f"{q}_ms": round(statistics.median(r["latency_ms"][q] for r in rs), 2)
                    for q in ("p50", "p95", "p99", "max")
                },
                "failures": sum(r["failures"] for r in rs),
            }
        )
    return summary


async def main() -> None:
    args = parse_args()
    results, redis_version = await run_rates(args)
    summary = summarize(results, args.rate_list)
    report.print_table(
        f"event latency worker append → SSE client ({args.delay * 1000:g} ms/token, "
        f"medians over rounds; target p50 ≤ 2 ms, p99 ≤ 10 ms at 1,000 ev/s)",
        list(summary[0].keys()),
        [list(row.values()) for row in summary],
    )
    report.emit_json(
        "event_latency",
        {
            "delay": args.delay,
            "summary": summary,
            "rounds": results,
            "redis": redis_version,
            "machine": report.machine_facts(),
        },
    )


if __name__ == "__main__":
    asyncio.run(main())
