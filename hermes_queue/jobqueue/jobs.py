"""The arq job a run is delivered as, arq's per-job keys, and arq's timeout and TTL rules.

Jobs are serialised with msgpack, never pickle: a write to Redis must not become code execution
in a worker. A job carries only the run id (its job id is the run id too); the run record holds
the accepted turn and its resolved route, so nothing secret is ever in a job payload.

The API never talks to arq: the run scripts create, recreate and drop a run's job themselves
(``runs/lua``), in the same step as the run's state changes. What they write must be what arq's
worker reads, so every arq-specific value they need comes from here as an argument:
``queued_job()`` (job key, payload bytes, TTL) and the in-progress key prefix and TTL.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import msgpack
from arq.constants import in_progress_key_prefix, job_key_prefix, retry_key_prefix
from arq.jobs import serialize_job

# The name the run job is registered and enqueued under.
RUN_TURN = "run_turn"
# How long an accepted run may wait in the queue before its job key expires (the run record and
# the reaper still make sure it ends visibly). arq's own enqueue uses the same default.
JOB_TTL_MS = 86_400_000
# arq refuses a job delivered more than max_tries times (it counts deliveries in its retry key).
# A run bounds its own attempts (settings.max_attempts, in the run record) and a delivery that
# finds nothing to claim is a no-op, so arq's limit is set out of reach.
DELIVERY_LIMIT = 1000
# The prefix of arq's in-progress keys (``<prefix><job id>``): the reaper reads their age.
IN_PROGRESS_PREFIX = in_progress_key_prefix


def serialize(data: dict[str, Any]) -> bytes:
    return msgpack.packb(data, use_bin_type=True)  # type: ignore[no-any-return]


def deserialize(raw: bytes) -> dict[str, Any]:
    return msgpack.unpackb(raw, raw=False)  # type: ignore[no-any-return]


def job_key(run_id: str) -> str:
    """String: the job (its serialised payload), until a delivery of it ends."""
    return job_key_prefix + run_id


def in_progress_key(run_id: str) -> str:
    """String: set by the worker that picked the job up; other workers skip the job while it
    lives (``in_progress_ttl_ms``), and arq deletes it when the delivery ends."""
    return in_progress_key_prefix + run_id


def retry_key(run_id: str) -> str:
    """String: arq's count of the job's deliveries (see ``DELIVERY_LIMIT``)."""
    return retry_key_prefix + run_id


@dataclass(frozen=True)
class QueuedJob:
    """What a run script writes to (re)create a run's job: ``PSETEX key ttl_ms payload``, then
    the run id added to the queue (a sorted set scored by run-at time in ms)."""

    key: str
    payload: bytes
    ttl_ms: int = JOB_TTL_MS


def queued_job(run_id: str) -> QueuedJob:
    payload = serialize_job(
        RUN_TURN, (), {"run_id": run_id}, None, int(time.time() * 1000), serializer=serialize
    )
    return QueuedJob(key=job_key(run_id), payload=payload)


def job_timeout_seconds(turn_timeout_seconds: int) -> int:
    """arq's own timeout for a turn job: a minute beyond the turn's, so ours acts first."""
    return turn_timeout_seconds + 60


def in_progress_ttl_ms(turn_timeout_seconds: int) -> int:
    """How long arq keeps a picked-up job's in-progress key: its largest job timeout + 10 s
    (arq's rule). The reaper reads a key's age from it to spot pickups never claimed."""
    return (job_timeout_seconds(turn_timeout_seconds) + 10) * 1000
