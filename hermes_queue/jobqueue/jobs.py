"""What the queue holds, the queue's own time limit, and arq's serializer.

The queue is one sorted set (``keys.queue_at``, one per shard on a Redis Cluster) of run ids
scored by the time they were queued (ms). The run record holds the accepted turn and its
resolved route, so a queue entry carries nothing else, and nothing secret. The run scripts
(``runs/lua``) add entries in the same step as the run's state changes (create, requeue,
hand-back, a parked session run's turn), and the claim script removes one as a worker takes it:
that removal is the pickup, so there is no per-job key, no in-progress marker and no retry
counter for a worker to keep (arq keeps all three per job; its worker loop is used here only as
the process shell, see ``worker.py``). How long a run may wait in the queue is the run record's
business (``runs/model.py`` ``QUEUE_WAIT_SECONDS``): the queue only holds ids.
"""

from __future__ import annotations

from typing import Any

import msgpack

from hermes_queue.redisio.health import OUTAGE_WAIT_SECONDS

# The name the run job is registered under in arq's worker (which never dispatches it: the
# queue loop hands deliveries to the handler itself).
RUN_TURN = "run_turn"


def job_timeout_seconds(turn_timeout_seconds: int) -> int:
    """The queue's own timeout for a delivery: a minute beyond the turn's and the wait of its
    writes for Redis (a turn timing out during an outage ends once its writes gave up), so
    ours acts first."""
    return turn_timeout_seconds + 60 + int(OUTAGE_WAIT_SECONDS)


def serialize(data: dict[str, Any]) -> bytes:
    """arq's job serializer, should anything of arq's ever encode one: msgpack, never pickle."""
    return msgpack.packb(data, use_bin_type=True)  # type: ignore[no-any-return]


def deserialize(raw: bytes) -> dict[str, Any]:
    """arq's job deserializer: msgpack, never pickle (a write to Redis must not become code
    execution in a worker)."""
    return msgpack.unpackb(raw, raw=False)  # type: ignore[no-any-return]
