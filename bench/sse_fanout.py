"""SSE fan-out: N concurrent SSE clients on one API process, against raw aiohttp SSE.

Per level and round, two servers get the same client load, hermes-queue first, then the
reference (each on a fresh process; hermes-queue also on a fresh Redis and namespace, so memory
figures do not inherit a previous level's heap):

- **hermes-queue.** ``--runs`` runs are enqueued while no worker is up, so they stay queued; N
  clients (spread evenly over the runs) open ``GET /v1/runs/{id}/events`` and sit idle. The API
  process's RSS and its TCP connections to Redis are sampled (idle figures, against a baseline
  taken after one warm-up run with no client connected). Then a worker starts and the runs
  stream (``--words`` + 1 deltas at ``--delay`` s per token, then ``run.completed``).
- **raw aiohttp SSE** (``lib/sse_raw.py``, its own process, no Redis): the same N clients spread
  over the same number of runs, the same frames (the warm-up run's payloads: same sizes, same
  ``id:``/``data:`` framing, same count), the same pacing, played by one in-process ticker that
  fans each frame out to every subscriber of its run.

Every client must receive every frame exactly once, in order (``id:`` strictly increasing),
ending with the terminal frame and ``: stream closed``; clients count frames without decoding
JSON (``lib/sse_count.py``), identically for both servers. Meanwhile ``/health`` is polled every
100 ms from a separate process, and for hermes-queue the API's Redis connections are sampled.

**Throughput** = data frames delivered to all clients ÷ the delivery window, the window running
from the first frame any client receives to the last client's ``: stream closed`` (client clock),
at a fixed client count, every client reading every frame. The producers are not the bottleneck:
both servers are offered the same load, ``runs`` runs of ``words + 2`` frames paced at
``delay`` s per delta, i.e. ``runs / delay`` events/s in and ``N / delay`` frames/s out. A
server that keeps up finishes in the nominal ``words × delay`` s and its throughput is the
offered ``N × (words + 2) / (words × delay)`` (the table's "offered f/s"); one that cannot keep
up falls behind, its window grows and its throughput is what it can deliver. So the ratio
ours/raw says something only when at least the raw server is near saturation (5,000 clients at
the defaults: 50,000 frames/s offered); when both keep up it is ~1 and CPU per frame is what
separates them. Server CPU = the serving process only (API vs reference, psutil) over the
stream phase; hermes-queue's worker and Redis CPU are reported next to it. Everything shares the
machine, clients included, so the raw server (no worker, no Redis) has more of the two cores.

    python -m bench.sse_fanout [--quick] [--clients 1000,5000] [--rounds 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

import aiohttp
import psutil

from bench.lib import deploy, report, traffic
from bench.lib.prober import Prober
from bench.lib.raw_sse import RawSseServer
from bench.lib.sse_count import Clients, delivery
from hermes_queue.redisio.embedded import free_port


def parse_frames(body: bytes) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in body.split(b"\n") if line.startswith(b"data: ")]


async def warm_template(
    dep: deploy.Deployment, session: aiohttp.ClientSession, base: str, text: str, delay: float
) -> list[dict[str, Any]]:
    """Warm-up (pool connections, script load, hub reader) with a temporary worker; the same
    input and token delay as the measured runs (so no deltas merge: a worker merges those that
    pile up behind an append), so its frames are the template."""
    [warm] = await dep.start_workers(1, echo_token_delay=delay)
    warm_id = await traffic.post_run(session, base, text)
    async with session.get(f"{base}/v1/runs/{warm_id}/events") as response:
        template = parse_frames(await response.read())
    dep.stop_workers([warm])
    await asyncio.sleep(1.0)
    return template


async def stream_phase(
    dep: deploy.Deployment, followers: Clients, base: str, delay: float, idle_conns: int
) -> dict[str, Any]:
    """A worker started under the idle clients: every run streamed to them, with ``/health``
    probed meanwhile; the clients' tallies and the API's, Redis's and the worker's CPU."""
    api = dep.api_procs[0]
    stream_conns = [idle_conns]
    prober = Prober({"health": base + "/health"})
    t0 = time.monotonic()
    redis_proc = [psutil.Process(dep.redis_server.process.pid)] if dep.redis_server else []
    before = [report.cpu_s(p) for p in [api, *redis_proc]]
    [worker] = await dep.start_workers(1, echo_token_delay=delay)
    tallies = await followers.finish(
        300.0, lambda: stream_conns.append(dep.redis_connections_of(api.pid))
    )
    ended = time.monotonic()
    after = [report.cpu_s(p) for p in [api, *redis_proc]]
    return {
        "t0": t0,
        "ended": ended,
        "tallies": tallies,
        "api_cpu_s": after[0] - before[0],
        "redis_cpu_s": round(after[1] - before[1], 3) if redis_proc else None,
        "worker_cpu_s": round(report.cpu_s(psutil.Process(worker.pid)), 3),
        "streaming_max": max(stream_conns),
        "health": (await prober.stop())["health"],
        "peak_rss": api.memory_info().rss,
    }


async def hermes_level(
    clients: int, runs: int, words: int, delay: float
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """hermes-queue's figures, and the warm-up run's payloads (the reference's frames)."""
    with deploy.Deployment("fanout", {"worker_concurrency": max(runs, 16)}) as dep:
        base = await dep.start_api()
        api = dep.api_procs[0]
        text = traffic.words(words)
        async with traffic.client_session(limit=clients + 64) as session:
            template = await warm_template(dep, session, base, text, delay)
            base_rss = api.memory_info().rss
            base_conns = dep.redis_connections_of(api.pid)
            run_ids = [await traffic.post_run(session, base, text) for _ in range(runs)]
            urls = [f"{base}/v1/runs/{run_ids[i % runs]}/events" for i in range(clients)]
            followers = Clients(session, urls)
            connect_s = await followers.wait_connected()
            await asyncio.sleep(2.0)  # let handlers settle into their idle wait
            idle_rss = api.memory_info().rss
            idle_conns = dep.redis_connections_of(api.pid)
            idle_cpu = api.cpu_percent(interval=2.0)
            streamed = await stream_phase(dep, followers, base, delay, idle_conns)
    ended = streamed["ended"]
    result = {
        "clients": clients,
        "runs": runs,
        "connected": followers.connected,
        "connect_s": round(connect_s, 2),
        "errors": len(followers.errors),
        "error_samples": followers.errors[:3],
        **delivery(streamed["tallies"], len(template), words + 1, streamed["api_cpu_s"], ended),
        "worker_cpu_s": streamed["worker_cpu_s"],  # the worker started with the phase
        "redis_cpu_s": streamed["redis_cpu_s"],
        "api_redis_conns": {
            "baseline": base_conns,
            "idle": idle_conns,
            "streaming_max": streamed["streaming_max"],
        },
        "api_rss_mib": {
            "baseline": round(base_rss / 2**20, 1),
            "idle": round(idle_rss / 2**20, 1),
            "peak": round(streamed["peak_rss"] / 2**20, 1),
        },
        "rss_kib_per_idle_client": round((idle_rss - base_rss) / 1024 / clients, 1),
        "api_cpu_percent_idle": idle_cpu,
        "stream_phase_s": round(ended - streamed["t0"], 2),  # includes the worker's start-up
        "health_ms": streamed["health"].summary(),
    }
    return result, template


async def raw_level(
    clients: int, runs: int, words: int, delay: float, frames: list[dict[str, Any]]
) -> dict[str, Any]:
    with RawSseServer(runs, delay, frames) as server:
        base = await server.start(free_port())
        assert server.proc is not None
        proc = server.proc
        async with traffic.client_session(limit=clients + 64) as session:
            await asyncio.sleep(1.0)
            base_rss = proc.memory_info().rss
            urls = [f"{base}/runs/{i % runs}/events" for i in range(clients)]
            followers = Clients(session, urls)
            connect_s = await followers.wait_connected()
            await asyncio.sleep(2.0)
            idle_rss = proc.memory_info().rss
            prober = Prober({"health": base + "/health"}, auth=False)
            t0 = time.monotonic()
            before = report.cpu_s(proc)
            await server.trigger()
            tallies = await followers.finish(300.0)
            ended = time.monotonic()
            cpu = report.cpu_s(proc) - before
            health = (await prober.stop())["health"]
    return {
        "clients": clients,
        "runs": runs,
        "connected": followers.connected,
        "connect_s": round(connect_s, 2),
        "errors": len(followers.errors),
        "error_samples": followers.errors[:3],
        **delivery(tallies, len(frames), words + 1, cpu, ended),
        "rss_mib": {"baseline": round(base_rss / 2**20, 1), "idle": round(idle_rss / 2**20, 1)},
        "rss_kib_per_idle_client": round((idle_rss - base_rss) / 1024 / clients, 1),
        "stream_phase_s": round(ended - t0, 2),
        "health_ms": health.summary(),
    }


def comparison(ours: dict[str, Any], raw: dict[str, Any]) -> dict[str, float]:
    return {
        "frames_per_s": round(ours["frames_per_s"] / max(raw["frames_per_s"], 1e-9), 3),
        "cpu_per_frame": round(
            ours["server_cpu_ms_per_1k_frames"] / max(raw["server_cpu_ms_per_1k_frames"], 1e-9),
            2,
        ),
    }


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--clients", default="1000,5000")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--words", type=int, default=40)
    parser.add_argument("--delay", type=float, default=0.1)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    args.levels = [int(c) for c in args.clients.split(",")]
    if args.quick:
        args.levels, args.rounds = [1000], 1
    return args


async def run_levels(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every client count, ``args.rounds`` times: ours, then raw aiohttp on the same frames."""
    results = []
    for clients in args.levels:
        for index in range(args.rounds):
            ours, frames = await hermes_level(clients, args.runs, args.words, args.delay)
            raw = await raw_level(clients, args.runs, args.words, args.delay, frames)
            ratio = comparison(ours, raw)
            results.append(
                {
                    "clients": clients,
                    "round": index + 1,
                    **ours,
                    "raw": raw,
                    "ratio_ours_over_raw": ratio,
                }
            )
            print(
                f"{clients} clients round {index + 1}: ours {ours['frames_per_s']} frames/s "
                f"({ours['clients_complete']} complete), raw {raw['frames_per_s']} frames/s "
                f"({raw['clients_complete']} complete), ratio {ratio['frames_per_s']}",
                flush=True,
            )
    return results


def print_ours(args: argparse.Namespace, results: list[dict[str, Any]]) -> None:
    report.print_table(
        f"SSE fan-out, one API process, {args.runs} runs × {args.words + 1} deltas "
        f"at {args.delay * 1000:g} ms/token",
        [
            "clients",
            "round",
            "complete",
            "errors",
            "redis conns base/idle/max",
            "RSS base/idle MiB",
            "KiB/idle client",
            "health p50/p99/max ms",
            "connect s",
        ],
        [
            [
                r["clients"],
                r["round"],
                r["clients_complete"],
                r["errors"],
                "/".join(str(v) for v in r["api_redis_conns"].values()),
                f"{r['api_rss_mib']['baseline']}/{r['api_rss_mib']['idle']}",
                r["rss_kib_per_idle_client"],
                "/".join(str(r["health_ms"][q]) for q in ("p50", "p99", "max")),
                r["connect_s"],
            ]
            for r in results
        ],
    )


def print_against_raw(args: argparse.Namespace, results: list[dict[str, Any]]) -> None:
    # What a server that keeps up reaches: every client's frames within the nominal window.
    nominal_s = args.words * args.delay
    offered = {c: round(c * (args.words + 2) / nominal_s, 1) for c in args.levels}
    rows = []
    for r in results:
        for name, s in (("hermes-queue", r), ("raw aiohttp", r["raw"])):
            rows.append(
                [
                    r["clients"],
                    r["round"],
                    name,
                    s["clients_complete"],
                    offered[r["clients"]],
                    s["frames_per_s"],
                    f"{s['window_s']} ({nominal_s:g})",
                    s["server_cpu_s"],
                    s["server_cpu_ms_per_1k_frames"],
                    s["rss_kib_per_idle_client"],
                    "/".join(str(s["health_ms"][q]) for q in ("p50", "p99", "max")),
                    r["ratio_ours_over_raw"]["frames_per_s"] if name == "raw aiohttp" else "",
                ]
            )
    report.print_table(
        "against raw aiohttp SSE, same run (throughput = frames delivered ÷ first frame → last "
        "close; target ours/raw ≥ 0.5)",
        [
            "clients",
            "round",
            "server",
            "complete",
            "offered f/s",
            "frames/s",
            "window s (nominal)",
            "server CPU s",
            "CPU ms/1k frames",
            "KiB/idle client",
            "health p50/p99/max ms",
            "ours/raw",
        ],
        rows,
    )


def summarize(results: list[dict[str, Any]], levels: list[int]) -> list[dict[str, Any]]:
    """Per client count: the medians over rounds of ours/raw."""
    return [
        {
            "clients": c,
            "rounds": len(rs),
            "ratio_frames_per_s_median": statistics.median(
                r["ratio_ours_over_raw"]["frames_per_s"] for r in rs
            ),
            "ratio_cpu_per_frame_median": statistics.median(
                r["ratio_ours_over_raw"]["cpu_per_frame"] for r in rs
            ),
        }
        for c in levels
        if (rs := [r for r in results if r["clients"] == c])
    ]


async def main() -> None:
    args = parse_args()
    traffic.raise_nofile(max(args.levels) * 2 + 1024)
    results = await run_levels(args)
    print_ours(args, results)
    print_against_raw(args, results)
    report.emit_json(
        "sse_fanout",
        {
            "runs": args.runs,
            "words": args.words,
            "delay": args.delay,
            "levels": results,
            "summary": summarize(results, args.levels),
            "machine": report.machine_facts(),
        },
    )


if __name__ == "__main__":
    asyncio.run(main())
