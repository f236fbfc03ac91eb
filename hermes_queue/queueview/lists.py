"""The runs a queue snapshot lists (``queueview/snapshot.py``): a page of the ready queue (with
each run's position and wait), a page of the in-flight runs, and the recent failures.

Each list is one read per shard queued on the snapshot's first pipeline (the head of a sorted
set, so O(log n + page) whatever the queue holds), merged across shards by score here, then one
``HMGET`` per listed run on its second pipeline for the record's fields. A run that ended and
expired between the two reads is left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from redis.asyncio.client import Pipeline

from hermes_queue.keys import Keys

IN_FLIGHT_FIELDS = ("session_id", "status", "worker", "attempt", "created_at", "started_at")
QUEUED_FIELDS = ("session_id", "status", "attempt", "created_at")
FAILED_FIELDS = ("session_id", "error", "reason", "attempt")
# Failures listed by a snapshot that asks for them (newest first); the count covers them all.
RECENT_FAILURES = 20

Entry = tuple[bytes, float]  # (member, score) of a sorted set


def _int(value: Any) -> int:
    return int(value) if value not in (None, b"", "") else 0


def _float(value: Any) -> float:
    return float(value) if value not in (None, b"", "") else 0.0


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else ("" if value is None else str(value))


@dataclass(frozen=True)
class InFlightRun:
    run_id: str
    session_id: str
    status: str
    worker: str
    attempt: int
    created_at: float
    started_at: float
    # Since this attempt was claimed.
    age_seconds: float


@dataclass(frozen=True)
class QueuedRun:
    """A ready run: in the queue, its start time reached, no worker yet."""

    run_id: str
    # 1: the next run a worker takes (the queue is oldest first, across shards).
    position: int
    session_id: str
    # 0 before its first claim; more for a run handed back (drain, lost worker).
    attempt: int
    created_at: float
    # When it (last) entered the queue, and how long it has waited since.
    queued_at: float
    age_seconds: float


@dataclass(frozen=True)
class FailedRun:
    run_id: str
    session_id: str
    failed_at: float
    error: str
    reason: str
    attempt: int


def merged(
    rows: list[list[Entry]], offset: int, limit: int, *, newest_first: bool = False
) -> list[Entry]:
    """Entries ``offset`` to ``offset + limit`` of several shards' pages together, by score."""
    entries = sorted((e for row in rows for e in row), key=lambda e: e[1], reverse=newest_first)
    return entries[offset : offset + limit]


def ask_ready(pipe: Pipeline, keys: Keys, shard: int, now_ms: int, count: int) -> None:
    """Queue the read of the shard's first ``count`` ready runs (queued at or before now)."""
    pipe.zrangebyscore(keys.queue_at(shard), "-inf", now_ms, start=0, num=count, withscores=True)


def ask_leases(pipe: Pipeline, keys: Keys, shard: int, count: int) -> None:
    """Queue the read of the shard's first ``count`` leases, soonest deadline first."""
    pipe.zrange(keys.leases_at(shard), 0, count - 1, withscores=True)


def ask_failures(pipe: Pipeline, keys: Keys, shard: int, since_ms: int, count: int) -> None:
    """Queue the read of the shard's last ``count`` failures since ``since_ms``."""
    pipe.zrevrangebyscore(
        keys.failures_at(shard), "+inf", since_ms, start=0, num=count, withscores=True
    )


def ask_fields(pipe: Pipeline, keys: Keys, entries: list[Entry], fields: tuple[str, ...]) -> None:
    for run_id, _score in entries:
        pipe.hmget(keys.run(text(run_id)), list(fields))


def in_flight_runs(entries: list[Entry], rows: list[Any], now: float) -> list[InFlightRun]:
    return [
        InFlightRun(
            run_id=text(run_id),
            session_id=text(row[0]),
            status=text(row[1]),
            worker=text(row[2]),
            attempt=_int(row[3]),
            created_at=_float(row[4]),
            started_at=_float(row[5]),
            age_seconds=round(max(0.0, now - _float(row[5])), 3) if row[5] else 0.0,
        )
        for (run_id, _deadline), row in zip(entries, rows, strict=True)
        if row[1] is not None  # finished and expired between the two round trips
    ]


def queued_runs(entries: list[Entry], rows: list[Any], now: float, offset: int) -> list[QueuedRun]:
    return [
        QueuedRun(
            run_id=text(run_id),
            position=offset + i + 1,
            session_id=text(row[0]),
            attempt=_int(row[2]),
            created_at=_float(row[3]),
            queued_at=round(queued_ms / 1000, 3),
            age_seconds=round(max(0.0, now - queued_ms / 1000), 3),
        )
        for i, ((run_id, queued_ms), row) in enumerate(zip(entries, rows, strict=True))
        if row[1] is not None  # claimed, finished and expired between the two reads
    ]


def failed_runs(entries: list[Entry], rows: list[Any]) -> list[FailedRun]:
    return [
        FailedRun(
            run_id=text(run_id),
            session_id=text(row[0]),
            failed_at=round(failed_ms / 1000, 3),
            error=text(row[1]),
            reason=text(row[2]),
            attempt=_int(row[3]),
        )
        for (run_id, failed_ms), row in zip(entries, rows, strict=True)
        if row[0] is not None  # expired since (retention_seconds shorter than the window)
    ]
