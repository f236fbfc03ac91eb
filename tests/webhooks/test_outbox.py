"""The outbox's scripts against a real Redis: a delivery is queued by the script that ends its
run and by nothing else; claims lapse to the next sender; a stale claim cannot settle; dead
letters are listed and redelivered; the operator's CLI reads and redelivers them."""

from __future__ import annotations

import asyncio
import json

import redis.asyncio as aioredis
from click.testing import CliRunner

from hermes_queue.cli import main
from hermes_queue.config import Settings, settings_env
from hermes_queue.keys import Keys
from hermes_queue.runs.model import NewRun
from hermes_queue.runs.repository import RunRepository
from hermes_queue.runs.turn_request import TurnRequest
from hermes_queue.webhooks.messages import RunEvent, deliveries
from hermes_queue.webhooks.outbox import Outbox

HOOK = "https://client.example.com/hook"


def _run(run_id: str, webhook: str = "") -> NewRun:
    return NewRun(run_id, "sess", TurnRequest("hi"), webhook=webhook)


async def _outbox_members(redis: aioredis.Redis, keys: Keys) -> list[str]:
    return [m.decode() for m in await redis.zrange(keys.webhook_outbox_at(0), 0, -1)]


async def test_only_the_end_of_a_run_that_wants_it_queues_a_delivery(
    redis: aioredis.Redis, keys: Keys, settings: Settings
) -> None:
    runs = RunRepository(redis, keys, settings.runs)
    await runs.create(_run("run_hooked", HOOK))
    await runs.create(_run("run_plain"))
    assert await _outbox_members(redis, keys) == []  # nothing before the end
    for run_id in ("run_hooked", "run_plain"):
        await runs.request_stop(run_id)  # a queued run ends cancelled, in stop.lua
    assert await _outbox_members(redis, keys) == ["e:run_hooked"]
    subscribed = RunRepository(redis, keys, settings.runs, subscribed=True)
    await subscribed.create(_run("run_any"))
    await subscribed.request_stop("run_any")
    assert sorted(await _outbox_members(redis, keys)) == ["e:run_any", "e:run_hooked"]


async def _expanded(redis: aioredis.Redis, keys: Keys, settings: Settings) -> tuple[Outbox, str]:
    runs = RunRepository(redis, keys, settings.runs)
    await runs.create(_run("run_1", HOOK))
    await runs.request_stop("run_1")
    outbox = Outbox(redis, keys)
    (event,) = await outbox.claim(0, 10, 30)
    assert event.member == "e:run_1" and event.claim == 0
    parsed = RunEvent.parse(event.member)
    assert parsed is not None
    made = deliveries(parsed, await redis.hgetall(keys.run("run_1")), {})
    assert await outbox.expand(0, event.member, made)
    assert not await outbox.expand(0, event.member, made)  # done once
    return outbox, made[0].id


async def test_a_lapsed_claim_goes_to_the_next_sender_and_the_stale_one_cannot_settle(
    redis: aioredis.Redis, keys: Keys, settings: Settings
) -> None:
    outbox, delivery_id = await _expanded(redis, keys, settings)
    (first,) = await outbox.claim(0, 10, 0.05)
    assert first.member == delivery_id and first.claim == 1
    assert json.loads(first.fields["body"])["status"] == "cancelled"
    assert await outbox.claim(0, 10, 30) == []  # held by the first sender's claim
    await asyncio.sleep(0.1)  # the claim's 50 ms pass: the first sender is presumed lost
    (second,) = await outbox.claim(0, 10, 30)
    assert second.member == delivery_id and second.claim == 2
    settle = {"keep_seconds": 60, "dead_seconds": 60, "fields": {"tries": "1"}}
    assert not await outbox.settle(0, delivery_id, 1, "delivered", **settle)  # fenced out
    assert await outbox.settle(0, delivery_id, 2, "dead", **settle)
    dead = await outbox.recent(10, "dead")
    assert [(d.id, d.state, [a.outcome for a in d.attempts]) for d in dead] == [
        (delivery_id, "dead", ["lost", "lost"])  # neither attempt recorded a result here
    ]
    stats = await outbox.stats()
    assert (stats.pending, stats.dead_letters) == (0, 1)
    assert await outbox.redeliver(delivery_id)
    (again,) = await outbox.claim(0, 10, 30)
    assert again.member == delivery_id and again.fields["tries"] == "0"
    assert (await outbox.stats()).dead_letters == 0


def test_the_cli_lists_dead_letters_and_redelivers(settings: Settings) -> None:
    async def prepare() -> str:
        client = aioredis.Redis.from_url(settings.redis.url)
        try:
            outbox, delivery_id = await _expanded(client, settings.redis.keys, settings)
            (claimed,) = await outbox.claim(0, 10, 30)
            fields = {"tries": "1", "attempt:1": json.dumps({"outcome": "5xx", "status": 500})}
            await outbox.settle(
                0,
                delivery_id,
                claimed.claim,
                "dead",
                keep_seconds=60,
                dead_seconds=60,
                fields=fields,
            )
            return delivery_id
        finally:
            await client.aclose()

    async def cleanup() -> None:
        client = aioredis.Redis.from_url(settings.redis.url)
        try:
            found = [k async for k in client.scan_iter(match=f"{settings.redis.namespace}:*")]
            if found:
                await client.delete(*found)
        finally:
            await client.aclose()

    delivery_id = asyncio.run(prepare())
    env = settings_env(settings)
    try:
        runner = CliRunner()
        listed = runner.invoke(main, ["webhooks", "list", "--state", "dead", "--json"], env=env)
        assert listed.exit_code == 0, listed.output
        (shown,) = json.loads(listed.output)
        assert (shown["id"], shown["state"], shown["last_status"]) == (delivery_id, "dead", 500)
        table = runner.invoke(main, ["webhooks", "list"], env=env)
        assert table.exit_code == 0 and "dead" in table.output and "500" in table.output
        again = runner.invoke(main, ["webhooks", "redeliver", delivery_id], env=env)
        assert again.exit_code == 0 and "due now" in again.output
        listed = runner.invoke(main, ["webhooks", "list", "--state", "pending", "--json"], env=env)
        assert [d["id"] for d in json.loads(listed.output)] == [delivery_id]
        unknown = runner.invoke(
            main, ["webhooks", "redeliver", "msg_0123456789abcdef_run_x"], env=env
        )
        assert unknown.exit_code == 1 and "not found" in unknown.output
    finally:
        asyncio.run(cleanup())
