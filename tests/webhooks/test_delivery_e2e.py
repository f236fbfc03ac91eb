"""Run webhooks end to end, with real API and worker processes and a real receiver that
verifies every delivery with ``standardwebhooks``: one verified delivery per finished run with
its ``hermes.run`` body, the same ``webhook-id`` through retries and through a SIGKILLed
worker, ``410`` stops, a spent schedule leaves a dead letter."""

from __future__ import annotations

from typing import Any

from hermes_queue.client import HermesQueueClient
from tests.support.polling import eventually
from tests.support.processes import Cluster
from tests.support.webhook_receiver import Receiver


async def finished(client: HermesQueueClient, run_id: str) -> dict[str, Any]:
    async for _id, _payload in client.iter_events(run_id):
        pass
    return await client.get_run(run_id)


def shown(status: dict[str, Any]) -> dict[str, Any]:
    """GET /v1/runs/{id} less the webhook's own state: what the delivery's body holds."""
    return {k: v for k, v in status.items() if k != "webhook"}


async def webhook_state(
    client: HermesQueueClient, run_id: str, state: str, within: float = 20
) -> dict[str, Any]:
    status = await eventually(
        lambda: client.get_run(run_id),
        lambda s: s["webhook"]["state"] == state,
        within=within,
        what=f"{run_id}'s webhook {state}",
    )
    return dict(status["webhook"])


async def test_each_finished_run_delivers_once_verified_with_its_status(
    cluster: Cluster, client_for: Any, receiver: Receiver
) -> None:
    url = await cluster.start_api()
    await cluster.start_worker()
    async with client_for(url) as client:
        done = await client.create_run("hello", webhook=receiver.url)
        failed = await client.create_run("boom [fail]", webhook=receiver.url)
        plain = await client.create_run("no webhook here")
        statuses = {run: await finished(client, run) for run in (done, failed, plain)}
        for run in (done, failed):
            await webhook_state(client, run, "delivered")
        cancelled = await client.create_run("stop me [slow:5]", webhook=receiver.url)
        await client.stop_run(cancelled)
        statuses[cancelled] = await finished(client, cancelled)
        state = await webhook_state(client, cancelled, "delivered")
    assert len(receiver.received) == 3 and all(r.verified for r in receiver.received)
    assert all(len(r.signatures) == 2 for r in receiver.received)  # one per secret
    for run, kind in ((done, "run.completed"), (failed, "run.failed")):
        (got,) = receiver.of_run(run)
        assert got.body == {"type": kind, **shown(statuses[run])}
    (got,) = receiver.of_run(cancelled)
    assert got.body["type"] == "run.cancelled" and got.body["status"] == "cancelled"
    assert receiver.of_run(plain) == [] and "webhook" not in statuses[plain]
    assert state["id"] == got.webhook_id and state["attempt_count"] == 1


async def test_retries_after_5xx_keep_the_webhook_id_until_taken(
    cluster: Cluster, client_for: Any, receiver: Receiver
) -> None:
    receiver.answers = [(500, {}), (503, {"Retry-After": "1"})]
    url = await cluster.start_api()
    await cluster.start_worker()
    async with client_for(url) as client:
        run_id = await client.create_run("retry me", webhook=receiver.url)
        await finished(client, run_id)
        state = await webhook_state(client, run_id, "delivered")
    attempts = receiver.of_run(run_id)
    assert [r.verified for r in attempts] == [True, True, True]
    assert {r.webhook_id for r in attempts} == {state["id"]}
    assert len({r.raw for r in attempts}) == 1  # the same body each time
    assert state["attempt_count"] == 3 and state["last_status"] == 200
    # The 503's Retry-After (1 s) was waited out, not the schedule's 0.3 s.
    assert int(attempts[2].timestamp) - int(attempts[1].timestamp) >= 1


async def test_410_gone_stops_retrying(
    cluster: Cluster, client_for: Any, receiver: Receiver
) -> None:
    receiver.answers = [(410, {})]
    url = await cluster.start_api()
    await cluster.start_worker()
    async with client_for(url) as client:
        run_id = await client.create_run("gone", webhook=receiver.url)
        await finished(client, run_id)
        state = await webhook_state(client, run_id, "gone")
        later = await client.create_run("after it", webhook=receiver.url)
        await finished(client, later)
        await webhook_state(client, later, "delivered")
    assert len(receiver.of_run(run_id)) == 1
    assert state["attempt_count"] == 1 and state["last_status"] == 410


async def test_a_spent_schedule_leaves_a_dead_letter(
    cluster: Cluster, client_for: Any, receiver: Receiver
) -> None:
    receiver.answers = [(500, {})] * 3
    url = await cluster.start_api()
    await cluster.start_worker()
    async with client_for(url) as client:
        run_id = await client.create_run("doomed", webhook=receiver.url)
        await finished(client, run_id)
        state = await webhook_state(client, run_id, "dead")
    # The first attempt and the schedule's two retries, then nothing more.
    assert len(receiver.of_run(run_id)) == 3
    assert state["attempt_count"] == 3 and state["last_status"] == 500


async def test_a_worker_killed_mid_delivery_leaves_it_to_another(
    cluster: Cluster, client_for: Any, receiver: Receiver
) -> None:
    url = await cluster.start_api()
    doomed = await cluster.start_worker()
    async with client_for(url) as client:
        receiver.hold()
        run_id = await client.create_run("deliver me", webhook=receiver.url)
        await finished(client, run_id)
        first = await receiver.next()
        await receiver.held.wait()  # its attempt is in flight, held open by the receiver
        doomed.kill()
        receiver.release()
        await cluster.start_worker()
        again = await receiver.next(within=30)
        state = await webhook_state(client, run_id, "delivered")
    assert first.verified and again.verified
    assert first.webhook_id == again.webhook_id == state["id"]
    assert first.raw == again.raw
    assert state["attempt_count"] == 2
