"""Webhook deliveries on a three-primary Redis Cluster: each run's end is queued in its own
shard's outbox by the script that ends it, and a sender (in process) expands, claims, sends
and settles them shard by shard, every script single-slot (the cluster refuses any other)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from hermes_queue.config import Settings
from hermes_queue.redisio.connect import connect_url
from hermes_queue.runs.model import NewRun
from hermes_queue.runs.placement import new_run_id
from hermes_queue.runs.repository import RunRepository
from hermes_queue.runs.turn_request import TurnRequest
from hermes_queue.webhooks.sender import WebhookSender
from tests.support.polling import eventually
from tests.support.webhook_receiver import Receiver, new_secret, receiving


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with receiving([new_secret()]) as started:
        yield started


async def test_runs_in_every_shard_deliver_once(
    cluster_settings: Settings, receiver: Receiver
) -> None:
    settings = cluster_settings.replace(
        webhook_secret=tuple(receiver.secrets),
        webhook_allowed_hosts=("127.0.0.1",),
        webhook_poll_seconds=0.05,
    ).validate()
    keys = settings.redis.keys
    redis = connect_url(settings.redis.url)
    repository = RunRepository(redis, keys, settings.runs)
    sender = WebhookSender(
        redis, keys, settings.webhooks, retention_seconds=settings.runs.retention_seconds
    )
    task = asyncio.create_task(sender.run_forever())
    try:
        run_ids = [new_run_id() for _ in range(12)]
        assert len({keys.shard_of(r) for r in run_ids}) > 3  # spread over shards and nodes
        for run_id in run_ids:
            run = NewRun(run_id, run_id, TurnRequest("hi"), webhook=receiver.url)
            assert await repository.create(run)
            await repository.request_stop(run_id)  # ends cancelled: its delivery is queued
        await eventually(
            lambda: {r.body["run_id"] for r in receiver.received} == set(run_ids),
            what="a delivery per run",
        )
        settled = await eventually(
            lambda: sender.outbox.recent(50),
            lambda found: len(found) == 12 and all(d.state == "delivered" for d in found),
            what="every delivery settled",
        )
        stats = await sender.outbox.stats()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await repository.aclose()
        await redis.aclose()
    assert all(r.verified for r in receiver.received) and len(receiver.received) == 12
    assert {d.run_id for d in settled} == set(run_ids)
    assert (stats.pending, stats.dead_letters) == (0, 0)
