"""The queue at a glance: one snapshot behind ``/metrics``, ``GET /v1/queue`` and the CLI.

Operators scrape this every few seconds while the queue may hold 100,000 runs, so every figure
is read in O(1) or O(log n) from structures the run scripts keep up to date, never by walking
keys: ready and deferred are ``ZCOUNT``s of the queue split at now, the oldest ready run is the
queue's head, running is the lease set's size, blocked is the size of the blocked set that the
park/promote scripts maintain, throughput comes from per-minute counters, and in-flight runs
are one page of the lease set. A snapshot is two pipelined round trips and a fixed number of
commands, plus one per live worker and one per listed run: independent of the queue's size.

Backpressure (``admission``) reads the same structures, and only the two or three it needs;
readiness (``/health/detailed``) only the live workers (``live_workers``), read as here.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.client import Pipeline

from hermes_queue.keys import Keys
from hermes_queue.queueview.figures import (
    Depth,
    QueueSnapshot,
    Refusal,
    Throughput,
    WorkerInfo,
    desired_workers,
    retry_after_seconds,
)
from hermes_queue.queueview.lists import (
    FAILED_FIELDS,
    IN_FLIGHT_FIELDS,
    QUEUED_FIELDS,
    RECENT_FAILURES,
    ask_failures,
    ask_fields,
    ask_leases,
    ask_ready,
    failed_runs,
    in_flight_runs,
    merged,
    queued_runs,
)
from hermes_queue.queueview.tenants import (
    NO_VIEW,
    TenantView,
    ask_tenants,
    tenant_figures,
    text,
)

# Per-minute counter buckets read for throughput: the current (partial) minute and 4 before it.
STATS_MINUTES = 5
STATS_FIELDS = ("claimed", "completed", "failed", "cancelled")
MAX_PAGE = 500
WORKER_FIELDS = ("slots", "busy", "metrics_port")


def _int(value: Any) -> int:
    return int(value) if value not in (None, b"", "") else 0


def _float(value: Any) -> float:
    return float(value) if value not in (None, b"", "") else 0.0


def stats_window(keys: Keys, now: float) -> tuple[list[str], float]:
    minute = int(now // 60)
    window = (STATS_MINUTES - 1) * 60 + (now - minute * 60)
    shards = keys.shard_ids
    return [keys.stats_at(s, minute - i) for i in range(STATS_MINUTES) for s in shards], window


def _throughput(rows: list[dict[Any, Any]], window: float) -> Throughput:
    """The counts of the stats hashes ``rows`` (read whole: per-tenant fields beside)."""
    totals = {name: 0 for name in STATS_FIELDS}
    for row in rows:
        for name, count in row.items():
            if text(name) in totals:
                totals[text(name)] += _int(count)
    return Throughput(window, *totals.values())


def _ask_live_workers(pipe: Pipeline, keys: Keys, now: float, lease_seconds: float) -> None:
    """Queue the read of the live workers' ids and last heartbeats. Live = a heartbeat within
    one lease: older than that, the reaper treats the worker's runs as lost."""
    since_ms = int((now - lease_seconds) * 1000)
    pipe.zrangebyscore(keys.workers, since_ms, "+inf", withscores=True)


def _ask_worker_fields(pipe: Pipeline, keys: Keys, workers: list[Any]) -> None:
    """Queue the read of each live worker's ``WORKER_FIELDS``."""
    for worker_id, _seen in workers:
        pipe.hmget(keys.worker(text(worker_id)), list(WORKER_FIELDS))


def _worker_infos(workers: list[Any], rows: list[Any], now_ms: int) -> list[WorkerInfo]:
    """The registry entries ``workers`` with their ``WORKER_FIELDS`` rows."""
    return [
        WorkerInfo(
            text(worker_id),
            _int(row[0]),
            _int(row[1]),
            round(max(0, now_ms - seen_ms) / 1000, 3),
            _int(row[2]) or None,
        )
        for (worker_id, seen_ms), row in zip(workers, rows, strict=True)
    ]


async def live_workers(redis: aioredis.Redis, keys: Keys, lease_seconds: float) -> list[WorkerInfo]:
    """The live workers (seen within ``lease_seconds``) and their slots, as a snapshot lists
    them, in two round trips (one when none is live)."""
    now = time.time()
    async with redis.pipeline(transaction=False) as pipe:
        _ask_live_workers(pipe, keys, now, lease_seconds)
        (workers,) = await pipe.execute()
    if not workers:
        return []
    async with redis.pipeline(transaction=False) as pipe:
        _ask_worker_fields(pipe, keys, workers)
        rows = await pipe.execute()
    return _worker_infos(workers, rows, int(now * 1000))


async def snapshot(
    redis: aioredis.Redis,
    keys: Keys,
    lease_seconds: float,
    *,
    default_slots: int,
    limit: int = 0,
    offset: int = 0,
    failures: int = 0,
    tenants: TenantView = NO_VIEW,
) -> QueueSnapshot:
    """The whole picture; ``limit`` > 0 also lists that page of in-flight runs and of ready
    runs, ``failures`` > 0 that many of the failures counted (newest first). Live workers are
    those seen within ``lease_seconds``; ``default_slots``: the slots a worker is assumed to
    have when none is live (``worker_concurrency``), for the desired worker count.

    In-flight runs are paged over the lease set, ordered by lease deadline (soonest first):
    renewals reorder it, so a run can move between pages from one call to the next. Ready runs
    are paged in the order workers take them (``position`` 1 is next).
    """
    limit = max(0, min(limit, MAX_PAGE))
    failures = max(0, min(failures, RECENT_FAILURES))
    now = time.time()
    now_ms = int(now * 1000)
    stats_keys, window = stats_window(keys, now)
    shards = list(keys.shard_ids)  # one without a cluster; summed over on a cluster
    async with redis.pipeline(transaction=False) as pipe:
        for shard in shards:
            pipe.zcount(keys.queue_at(shard), "-inf", now_ms)
            pipe.zcard(keys.queue_at(shard))
            pipe.zrange(keys.queue_at(shard), 0, 0, withscores=True)
            pipe.zcard(keys.leases_at(shard))
            pipe.zcard(keys.blocked_at(shard))
        _ask_live_workers(pipe, keys, now, lease_seconds)
        ask_tenants(pipe, keys, stats_keys)  # the fair hashes, then the stats hashes whole
        for shard in shards if limit else ():
            ask_leases(pipe, keys, shard, offset + limit)
            ask_ready(pipe, keys, shard, now_ms, offset + limit)
        for shard in shards if failures else ():
            ask_failures(pipe, keys, shard, now_ms - int(window * 1000), failures)
        first = await pipe.execute()
    per_shard = [first[5 * i : 5 * i + 5] for i in range(len(shards))]
    rest = first[5 * len(shards) :]
    workers, rest = rest[0], rest[1:]
    fair_rows, rest = rest[: len(shards)], rest[len(shards) :]
    stats_rows, rest = rest[: len(stats_keys)], rest[len(stats_keys) :]
    pages, rest = rest[: 2 * len(shards) if limit else 0], rest[2 * len(shards) if limit else 0 :]
    leased = merged(pages[0::2], offset, limit)
    ready_page = merged(pages[1::2], offset, limit)
    failed = merged(rest, 0, failures, newest_first=True)
    depth = _depth(per_shard, now_ms)

    async with redis.pipeline(transaction=False) as pipe:
        _ask_worker_fields(pipe, keys, workers)
        ask_fields(pipe, keys, leased, IN_FLIGHT_FIELDS)
        ask_fields(pipe, keys, ready_page, QUEUED_FIELDS)
        ask_fields(pipe, keys, failed, FAILED_FIELDS)
        rows = await pipe.execute() if workers or leased or ready_page or failed else []
    cuts = itertools.accumulate([len(workers), len(leased), len(ready_page)])
    worker_rows, leased_rows, ready_rows, failed_rows = _split(rows, list(cuts))

    infos = _worker_infos(workers, worker_rows, now_ms)
    per_worker = round(sum(i.slots for i in infos) / len(infos)) if infos else default_slots
    throughput = _throughput(stats_rows, window)
    return QueueSnapshot(
        at=round(now, 3),
        depth=depth,
        workers=infos,
        throughput=throughput,
        desired_workers=desired_workers(depth, per_worker),
        in_flight=in_flight_runs(leased, leased_rows, now),
        limit=limit,
        offset=offset,
        queued=queued_runs(ready_page, ready_rows, now, offset),
        recent_failures=failed_runs(failed, failed_rows) if failures else None,
        tenants=tenant_figures(
            [*fair_rows, *stats_rows], len(shards), depth.running, throughput.claimed, tenants
        ),
        limits=tenants.limits_of(),
    )


def _depth(per_shard: list[list[Any]], now_ms: int) -> Depth:
    """Depth by state from each shard's counts and queue head (oldest first)."""
    ready, total, running, blocked = (sum(row[i] for row in per_shard) for i in (0, 1, 3, 4))
    heads = [row[2][0] for row in per_shard if row[2]]
    oldest = 0.0
    head = min(heads, key=lambda entry: entry[1]) if heads else None
    if head is not None and head[1] <= now_ms:
        oldest = round(max(0.0, now_ms - head[1]) / 1000, 3)
    return Depth(ready, max(0, total - ready), running, blocked, oldest)


def _split(rows: list[Any], cuts: list[int]) -> list[list[Any]]:
    """``rows`` cut at ``cuts`` (running totals) into len(cuts) + 1 lists (empty ones too)."""
    bounds = [0, *cuts, max(len(rows), cuts[-1] if cuts else 0)]
    return [rows[a:b] for a, b in itertools.pairwise(bounds)]


async def admission(
    redis: aioredis.Redis, keys: Keys, max_depth: int, max_age: float
) -> Refusal | None:
    """None when a new run may be enqueued; otherwise why not and the Retry-After.

    The ready queue is full when it holds ``max_depth`` runs (``max_ready_depth``) or when a
    ready run has waited longer than ``max_age`` seconds (``max_ready_age_seconds``); 0 turns
    that limit off. Retry-After is the time the measured drain
    rate (claims per second over the last few minutes) needs to clear what is over the limit:
    the runs beyond the depth limit, or the runs older than the age limit.
    """
    if not max_depth and not max_age:
        return None
    now = time.time()
    now_ms = int(now * 1000)
    stats_keys, window = stats_window(keys, now)
    shards = list(keys.shard_ids)
    async with redis.pipeline(transaction=False) as pipe:
        for shard in shards:
            pipe.zcount(keys.queue_at(shard), "-inf", now_ms)
            pipe.zcount(keys.queue_at(shard), "-inf", f"({now_ms - int(max_age * 1000)}")
        for key in stats_keys:
            pipe.hget(key, "claimed")
        replies = await pipe.execute()
    counts, claims = replies[: 2 * len(shards)], replies[2 * len(shards) :]
    ready, overdue = sum(counts[0::2]), sum(counts[1::2])
    over_depth = ready - max_depth + 1 if max_depth and ready >= max_depth else 0
    overdue = overdue if max_age else 0
    if not over_depth and not overdue:
        return None
    drain = sum(_int(c) for c in claims) / window if window > 0 else 0.0
    return Refusal(
        reason="depth" if over_depth >= overdue else "age",
        retry_after=retry_after_seconds(max(over_depth, overdue), drain),
        ready=ready,
    )
