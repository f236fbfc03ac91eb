"""Sustained load (TARGETS, reliability): 10,000 runs at 256 concurrency across two API replicas
and two workers; every run must end terminal and every reader must get every event exactly once,
including readers that drop mid-stream and resume on the *other* replica with ``Last-Event-ID``.

Each closed-loop client posts a run to one replica (alternating), then reads its events from the
other. Every second run's reader drops its connection after a random number of frames (0–21)
and resumes with the last ``id:`` it saw on the replica it did not read from. A reader passes
when its frame ids strictly increase across the drop (no duplicate), its ``message.delta``
frames spell the echo reply exactly (21 tokens; deltas may arrive merged), then ``run.completed``
and ``: stream closed``. At the end every run record in Redis is checked: all ``completed``, nothing
queued, running or blocked, the queue empty.

    python -m bench.soak [--runs 10000] [--concurrency 256] [--delay 0.005]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import random
import time
from collections import Counter
from typing import Any

import aiohttp

from bench.lib import deploy, report, traffic

INPUT_WORDS = 20
EXPECTED = "Echo: " + traffic.words(INPUT_WORDS)


async def read_frames(
    session: aiohttp.ClientSession, url: str, after: str | None, stop_after: int | None
) -> tuple[list[tuple[str, dict[str, Any]]], bool]:
    """(id, payload) of each data frame, and whether ``: stream closed`` came; stops (drops the
    connection) after ``stop_after`` frames when given."""
    frames: list[tuple[str, dict[str, Any]]] = []
    headers = {"Last-Event-ID": after} if after else {}
    frame_id = ""
    async with session.get(url, headers=headers) as response:
        if response.status != 200:
            raise RuntimeError(f"events answered {response.status}")
        async for raw in response.content:
            line = raw.rstrip(b"\n")
            if line.startswith(b"id: "):
                frame_id = line[4:].decode()
            elif line.startswith(b"data: "):
                frames.append((frame_id, json.loads(line[6:])))
                if stop_after is not None and len(frames) >= stop_after:
                    return frames, False  # leaving the block drops the connection
            elif line == b": stream closed":
                return frames, True
    return frames, False


def check(frames: list[tuple[str, dict[str, Any]]], closed: bool) -> str | None:
    """Why this reader's view is wrong, or None."""
    ids = [tuple(int(x) for x in frame_id.split("-")) for frame_id, _ in frames]
    if any(b <= a for a, b in itertools.pairwise(ids)):
        return "duplicate or reordered id"
    deltas = [p.get("delta", "") for _, p in frames if p.get("event") == "message.delta"]
    # Deltas that piled up behind an append in flight arrive merged: the text is what counts.
    if not deltas or "".join(deltas) != EXPECTED:
        return f"{len(deltas)} deltas, text {''.join(deltas)[:40]!r}"
    if frames[-1][1].get("event") != "run.completed" or not closed:
        return f"ended with {frames[-1][1].get('event')}, closed={closed}"
    return None


async def soak(bases: list[str], runs: int, concurrency: int, limit_s: float) -> dict[str, Any]:
    text = traffic.words(INPUT_WORDS)
    remaining = runs
    outcomes: Counter[str] = Counter()
    failures: list[str] = []
    run_ids: list[str] = []
    rng = random.Random(7)

    async def client(session: aiohttp.ClientSession, index: int) -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            post_to = bases[index % 2]
            read_from = bases[(index + 1) % 2]
            index += 1
            drop = rng.randint(0, INPUT_WORDS + 1) if index % 2 else None
            try:
                run_id = await traffic.post_run(session, post_to, text)
                run_ids.append(run_id)
                url = f"/v1/runs/{run_id}/events"
                frames, closed = await read_frames(session, read_from + url, None, drop)
                if drop is not None and not closed:
                    after = frames[-1][0] if frames else None
                    rest, closed = await read_frames(session, post_to + url, after, None)
                    frames += rest
                    outcomes["resumed"] += 1
            except Exception as exc:
                outcomes["error"] += 1
                failures.append(repr(exc)[:200])
                continue
            problem = check(frames, closed)
            outcomes["bad" if problem else "ok"] += 1
            if problem:
                failures.append(f"{run_id}: {problem}")

    async with traffic.client_session(limit=concurrency * 2 + 16) as session:
        started = time.monotonic()
        tasks = [asyncio.create_task(client(session, i)) for i in range(concurrency)]
        _done, pending = await asyncio.wait(tasks, timeout=limit_s)
        elapsed = time.monotonic() - started
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    return {
        "runs": runs,
        "posted": len(run_ids),
        "outcomes": dict(outcomes),
        "failure_samples": failures[:5],
        "timed_out": bool(pending),
        "elapsed_s": round(elapsed, 1),
        "runs_per_s": round(outcomes["ok"] / elapsed, 1),
        "run_ids": run_ids,
    }


def final_states(dep: deploy.Deployment, run_ids: list[str]) -> dict[str, Any]:
    """Status of every posted run's record, and what is left queued anywhere."""
    statuses: Counter[str] = Counter()
    pipe = dep.redis.pipeline(transaction=False)
    for run_id in run_ids:
        pipe.hget(dep.keys.run(run_id), "status")
    for status in pipe.execute():
        statuses[status.decode() if status else "missing"] += 1
    return {
        "statuses": dict(statuses),
        "queued": dep.redis.zcard(dep.keys.queue),
        "leased": dep.redis.zcard(dep.keys.leases),
        "blocked": dep.redis.zcard(dep.keys.blocked),
    }


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--delay", type=float, default=0.005, help="echo seconds per token")
    parser.add_argument("--worker-concurrency", type=int, default=128)
    parser.add_argument("--timeout", type=float, default=600.0)
    return parser.parse_args()


async def run_soak(args: argparse.Namespace) -> dict[str, Any]:
    """Two API replicas and two workers under the load; what the readers saw, and every
    posted run's record afterwards (``final``)."""
    with deploy.Deployment("soak", {"echo_token_delay": args.delay}) as dep:
        bases = [await dep.start_api(), await dep.start_api()]
        await dep.start_workers(2, worker_concurrency=args.worker_concurrency)
        result = await soak(bases, args.runs, args.concurrency, args.timeout)
        run_ids = result.pop("run_ids")
        # Every posted run had its stream read to the end, so each is terminal by now.
        result["final"] = final_states(dep, run_ids)
    return result


def print_result(args: argparse.Namespace, result: dict[str, Any]) -> None:
    final = result["final"]
    report.print_table(
        f"soak: {args.runs} runs at {args.concurrency} concurrency, 2 API replicas, 2 workers",
        ["runs/s", "ok", "bad", "errors", "resumed", "statuses", "queued", "leased", "blocked"],
        [
            [
                result["runs_per_s"],
                result["outcomes"].get("ok", 0),
                result["outcomes"].get("bad", 0),
                result["outcomes"].get("error", 0),
                result["outcomes"].get("resumed", 0),
                " ".join(f"{k}={v}" for k, v in sorted(final["statuses"].items())),
                final["queued"],
                final["leased"],
                final["blocked"],
            ]
        ],
    )
    for sample in result["failure_samples"]:
        print("  failure:", sample)


async def main() -> None:
    args = parse_args()
    traffic.raise_nofile(args.concurrency * 4 + 1024)
    result = await run_soak(args)
    print_result(args, result)
    report.emit_json("soak", {**result, "machine": report.machine_facts()})


if __name__ == "__main__":
    asyncio.run(main())
