"""The arq job contract shared by the API (which enqueues) and the workers (which run).

Jobs are serialised with msgpack, never pickle: a write to Redis must not become code execution
in a worker. A job carries only the run id; the run record holds the accepted turn and its
resolved route, so nothing secret is ever in a job payload.
"""

from __future__ import annotations

import time
from typing import Any

import msgpack
from arq.jobs import serialize_job

RUN_TURN = "run_turn"
# How long an accepted run may wait in the queue before arq drops its job (the run record and
# the reaper still make sure it ends visibly).
JOB_TTL_MS = 86_400_000


def serialize(data: dict[str, Any]) -> bytes:
    return msgpack.packb(data, use_bin_type=True)  # type: ignore[no-any-return]


def deserialize(raw: bytes) -> dict[str, Any]:
    return msgpack.unpackb(raw, raw=False)  # type: ignore[no-any-return]


def run_job_payload(run_id: str) -> bytes:
    return serialize_job(
        RUN_TURN, (), {"run_id": run_id}, None, int(time.time() * 1000), serializer=serialize
    )


def arq_job_timeout(job_timeout_seconds: int) -> int:
    """arq's own timeout for a turn job: a minute beyond the turn's, so ours acts first."""
    return job_timeout_seconds + 60


def arq_in_progress_seconds(job_timeout_seconds: int) -> int:
    """How long arq keeps a picked-up job's in-progress key: its largest job timeout + 10 s
    (arq's rule). The reaper reads a key's age from it to spot pickups that were never
    claimed."""
    return arq_job_timeout(job_timeout_seconds) + 10
