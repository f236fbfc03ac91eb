"""Where a run lives: the one rule that places run ids in shards.

A run's keys sit in the shard its id hashes to (``Keys.shard_of``). A run of a stored session
must sit in its session's shard (``Keys.session_shard``), because the scripts that keep the
session's one-turn-at-a-time rule name the session's keys and the run's together, and on a
Redis Cluster one script may name keys of one slot only. So a session's run ids are drawn until
one falls in the session's shard. Without a cluster there is one shard and every id fits.

A scheduled tick's run id must be the same on every worker (it is what makes a tick fire once),
yet its session (the job session's live tip) is only known at fire time: on a cluster the first
worker pins the id it drew for the tick (``SET NX``) and every other one takes it.

The starter (``runs/start.py``), through which the API's turns and the scheduler's fires are
started, and the repository, which refuses a misplaced session run, ask this module; nothing
else decides where a run goes.
"""

from __future__ import annotations

import itertools
import uuid

import redis.asyncio as aioredis

from hermes_queue.keys import Keys

# How long a tick's pinned run id is kept (cluster only): longer than any worker takes to fire it.
TICK_PIN_TTL = 2 * 86_400


def new_run_id() -> str:
    """A fresh run id, placed nowhere in particular (a run beside any other)."""
    return f"run_{uuid.uuid4().hex}"


class RunPlacement:
    def __init__(self, keys: Keys, redis: aioredis.Redis) -> None:
        self.keys = keys
        self._redis = redis

    def fits(self, run_id: str, session_id: str) -> bool:
        """Whether ``run_id`` may be a run of ``session_id`` (always, without a cluster)."""
        return self.keys.shard_of(run_id) == self.keys.session_shard(session_id)

    def new_run_id(self, session_id: str | None = None) -> str:
        """A fresh run id; given ``session_id``, one in the session's shard (drawn until one
        falls there: ~``keys.shards`` tries on a cluster, the first one otherwise)."""
        while True:
            run_id = new_run_id()
            if session_id is None or self.fits(run_id, session_id):
                return run_id

    async def tick_run_id(self, base_run_id: str, session_id: str) -> str:
        """The run id a scheduled tick fires as in ``session_id``: ``base_run_id`` (the same on
        every worker) when it fits the session's shard, else the id the first worker to fire
        the tick drew from it and pinned."""
        if self.fits(base_run_id, session_id):
            return base_run_id
        candidates = (f"{base_run_id}_{n}" for n in itertools.count())
        drawn = next(c for c in candidates if self.fits(c, session_id))
        pinned = await self._redis.set(
            self.keys.tick(base_run_id), drawn, nx=True, get=True, ex=TICK_PIN_TTL
        )
        return drawn if pinned is None else pinned.decode()

    def require(self, run_id: str, session_id: str) -> None:
        """Refuse a session run placed outside its session's shard: its keys and the session's
        would sit in different slots of a cluster."""
        if not self.fits(run_id, session_id):
            raise ValueError(f"run {run_id} is not in the shard of session {session_id}")
