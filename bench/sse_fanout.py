"""SSE fan-out: N concurrent SSE clients on one API process.

Per level (a fresh Redis, API and namespace each, so memory figures do not inherit a previous
level's heap): ``--runs`` runs are enqueued while no worker is up, so they stay queued; N
clients (spread evenly over the runs) open ``GET /v1/runs/{id}/events`` and sit idle. Then:
the API process's RSS and its TCP connections to Redis are sampled (idle figures, against a
baseline taken after one warm-up run with no client connected). Then a worker starts and the
runs stream (``--words`` + 1 deltas at ``--delay`` s per token); every client must receive
every delta and ``run.completed`` exactly once, then ``: stream closed``. Meanwhile ``/health``
is polled every 100 ms from a separate process and the API's Redis connections are sampled.

    python bench/sse_fanout.py [--quick] [--clients 1000,5000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

import harness


async def one_level(clients: int, runs: int, words: int, delay: float) -> dict[str, Any]:
    with harness.Deployment("fanout", {"worker_concurrency": max(runs, 16)}) as dep:
        base = await dep.start_api()
        api = dep.api_procs[0]
        async with harness.client_session(limit=clients + 64) as session:
            # Warm-up (pool connections, script load, hub reader) with a temporary worker.
            [warm] = await dep.start_workers(1)
            await harness.read_events(session, base, await harness.post_run(session, base, "hi"))
            warm.terminate()
            warm.wait(30)
            dep.procs.remove(warm)
            await asyncio.sleep(1.0)
            base_rss = api.memory_info().rss
            base_conns = dep.redis_connections_of(api.pid)

            text = harness.words(words)
            run_ids = [await harness.post_run(session, base, text) for _ in range(runs)]
            received: list[list[dict[str, Any]]] = [[] for _ in range(clients)]
            connected = 0
            closed_ok = 0
            errors: list[str] = []

            async def follow(index: int) -> None:
                nonlocal connected, closed_ok
                url = f"{base}/v1/runs/{run_ids[index % runs]}/events"
                try:
                    async with session.get(url) as response:
                        connected += 1
                        async for raw in response.content:
                            if raw.startswith(b"data: "):
                                received[index].append(json.loads(raw[6:]))
                            elif raw.rstrip() == b": stream closed":
                                closed_ok += 1
                                return
                except Exception as exc:
                    errors.append(repr(exc)[:200])

            started = time.monotonic()
            tasks = [asyncio.create_task(follow(i)) for i in range(clients)]
            for _ in range(1200):  # at most 120 s to connect everyone
                if connected + len(errors) >= clients:
                    break
                await asyncio.sleep(0.1)
            connect_s = time.monotonic() - started
            await asyncio.sleep(2.0)  # let handlers settle into their idle wait
            idle_rss = api.memory_info().rss
            idle_conns = dep.redis_connections_of(api.pid)
            idle_cpu = api.cpu_percent(interval=2.0)

            stream_conns = [idle_conns]
            pinger = harness.HealthPinger(base)
            t0 = time.monotonic()
            await dep.start_workers(1, echo_token_delay=delay)
            gather = asyncio.gather(*tasks)
            for _ in range(3000):  # at most ~300 s
                if gather.done():
                    break
                stream_conns.append(dep.redis_connections_of(api.pid))
                await asyncio.sleep(0.1)
            await asyncio.wait_for(gather, 30)
            health = await pinger.stop()
            stream_s = time.monotonic() - t0
            peak_rss = api.memory_info().rss

    expected = words + 2  # deltas ("Echo:" + words) and run.completed
    complete = sum(
        1
        for events in received
        if len(events) == expected
        and sum(e.get("event") == "message.delta" for e in events) == words + 1
        and events[-1].get("event") == "run.completed"
    )
    return {
        "clients": clients,
        "runs": runs,
        "connected": connected,
        "connect_s": round(connect_s, 2),
        "errors": len(errors),
        "error_samples": errors[:3],
        "clients_complete": complete,
        "clients_closed_ok": closed_ok,
        "api_redis_conns": {
            "baseline": base_conns,
            "idle": idle_conns,
            "streaming_max": max(stream_conns),
        },
        "api_rss_mib": {
            "baseline": round(base_rss / 2**20, 1),
            "idle": round(idle_rss / 2**20, 1),
            "peak": round(peak_rss / 2**20, 1),
        },
        "rss_kib_per_idle_client": round((idle_rss - base_rss) / 1024 / clients, 1),
        "api_cpu_percent_idle": idle_cpu,
        "stream_phase_s": round(stream_s, 2),
        "health_ms": harness.summary_ms(health),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--clients", default="1000,5000")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--words", type=int, default=40)
    parser.add_argument("--delay", type=float, default=0.1)
    args = parser.parse_args()
    levels = [int(c) for c in args.clients.split(",")]
    if args.quick:
        levels = [1000]
    harness.raise_nofile(max(levels) * 2 + 1024)
    results = []
    for clients in levels:
        r = await one_level(clients, args.runs, args.words, args.delay)
        results.append(r)
        print(f"{clients} clients: {r}", flush=True)
    harness.print_table(
        f"SSE fan-out, one API process, {args.runs} runs × {args.words + 1} deltas "
        f"at {args.delay * 1000:g} ms/token",
        [
            "clients",
            "complete",
            "errors",
            "redis conns base/idle/max",
            "RSS base/idle MiB",
            "KiB/idle client",
            "health p99 ms",
            "connect s",
        ],
        [
            [
                r["clients"],
                r["clients_complete"],
                r["errors"],
                "/".join(str(v) for v in r["api_redis_conns"].values()),
                f"{r['api_rss_mib']['baseline']}/{r['api_rss_mib']['idle']}",
                r["rss_kib_per_idle_client"],
                r["health_ms"]["p99"],
                r["connect_s"],
            ]
            for r in results
        ],
    )
    harness.emit_json("sse_fanout", {"levels": results, "machine": harness.machine_facts()})


if __name__ == "__main__":
    asyncio.run(main())
