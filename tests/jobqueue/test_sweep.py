"""On a Redis Cluster an idle worker's timed poll and webhook sender read the shards in turn,
not all of them each time (issue 35): every shard is still read within a sweep, and a shard
woken meanwhile is read at once."""

from __future__ import annotations

import redis.asyncio as aioredis

from hermes_queue.config import Settings
from hermes_queue.jobqueue.worker import SWEEP_POLLS, WakeableWorker, queue_worker
from hermes_queue.webhooks.sender import SWEEP_PASSES, WebhookSender

CLUSTER_URL = "redis+cluster://127.0.0.1:1"  # never connected to: nothing here talks to Redis


class _Handler:
    async def start(self, worker: WakeableWorker) -> None: ...

    async def run(self, run_id: str) -> str:
        return run_id

    async def stop(self) -> None: ...


def _worker(settings: Settings) -> WakeableWorker:
    settings = settings.replace(redis_url=CLUSTER_URL, redis_cluster_shards=16)
    return queue_worker(settings.redis, settings.worker, _Handler(), handle_signals=False)


def test_the_timed_poll_sweeps_every_shard_in_turn(settings: Settings) -> None:
    worker = _worker(settings)
    worker._poll_due = set()  # after the first poll (which reads every shard)
    read: list[int] = []
    for _ in range(SWEEP_POLLS):
        worker._timed_poll()
        due, worker._poll_due = worker._poll_due, set()
        assert due is not None and len(due) == 1
        read += due
    assert sorted(read) == list(range(16))
    worker.wake(7)
    worker._timed_poll()
    assert worker._poll_due == {7, 0}


def test_one_redis_keeps_its_one_queue_read_on_every_timed_poll(settings: Settings) -> None:
    worker = queue_worker(settings.redis, settings.worker, _Handler(), handle_signals=False)
    worker._poll_due = set()
    worker._timed_poll()
    assert worker._poll_due is None  # the one queue


async def test_the_webhook_sender_sweeps_the_shards_and_reads_a_woken_one_at_once(
    settings: Settings,
) -> None:
    settings = settings.replace(redis_url=CLUSTER_URL, redis_cluster_shards=16)
    client = aioredis.Redis()  # lazy: never used
    sender = WebhookSender(client, settings.redis.keys, settings.webhooks, retention_seconds=60)
    assert sender._shards_due() == list(range(16))  # the first pass reads every shard
    read: list[int] = []
    for _ in range(SWEEP_PASSES):
        due = sender._shards_due()
        assert len(due) == 2
        read += due
    assert sorted(read) == list(range(16))
    sender.wake(11)
    assert 11 in sender._shards_due()
    await client.aclose()
