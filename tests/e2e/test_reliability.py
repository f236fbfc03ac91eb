"""Worker death, frozen workers, stops: every accepted run ends visibly, and only once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hermes_queue.client import HermesQueueClient
from hermes_queue.events import RunEvent
from hermes_queue.streams.codec import decode_entry
from tests.support.processes import Cluster


async def first_event(client: HermesQueueClient, run_id: str, name: str) -> str:
    async for event_id, payload in client.iter_events(run_id):
        if payload["event"] == name:
            return event_id
    raise AssertionError(f"{run_id} ended before {name}")


async def rest(client: HermesQueueClient, run_id: str, after: str) -> list[dict[str, Any]]:
    return [payload async for _, payload in client.iter_events(run_id, after=after)]


def stream(cluster: Cluster, run_id: str) -> list[RunEvent]:
    with cluster.redis() as r:
        entries = r.xrange(cluster.keys.events(run_id))
    return [decode_entry(run_id, entry_id, fields) for entry_id, fields in entries]


async def test_killed_worker_run_fails_with_worker_lost(
    cluster: Cluster, client_for: Any, tmp_path: Path
) -> None:
    url = await cluster.start_api(max_attempts=1)
    worker = await cluster.start_worker(max_attempts=1)
    async with client_for(url) as client:
        # Held mid-reply until the gate file exists (never, here): killed while it runs.
        run_id = await client.create_run(f"long one [gate:{tmp_path / 'gate'}]")
        seen = await first_event(client, run_id, "message.delta")
        worker.kill()
        tail = await rest(client, run_id, seen)
        status = await client.get_run(run_id)
    assert tail[-1]["event"] == "run.failed"
    assert tail[-1]["reason"] == "worker_lost"
    assert status["status"] == "failed" and status["reason"] == "worker_lost"


async def test_killed_worker_run_is_retried_to_completion(
    cluster: Cluster, client_for: Any, tmp_path: Path
) -> None:
    url = await cluster.start_api(max_attempts=2)
    doomed = await cluster.start_worker(max_attempts=2)
    gate = tmp_path / "gate"
    async with client_for(url) as client:
        run_id = await client.create_run(f"again please [gate:{gate}]")
        seen = await first_event(client, run_id, "message.delta")
        doomed.kill()  # held mid-reply at the gate: it cannot have finished
        gate.touch()
        await cluster.start_worker(max_attempts=2)
        tail = await rest(client, run_id, seen)
        status = await client.get_run(run_id)
    names = [p["event"] for p in tail]
    assert "run.restarted" in names
    assert tail[names.index("run.restarted")]["attempt"] == 2
    assert names[-1] == "run.completed"
    after_restart = tail[names.index("run.restarted") + 1 :]
    text = "".join(p["delta"] for p in after_restart if p["event"] == "message.delta")
    assert text == tail[-1]["output"]
    assert status["status"] == "completed" and status["attempt"] == 2


async def test_frozen_worker_cannot_write_after_losing_its_lease(
    cluster: Cluster, client_for: Any, tmp_path: Path
) -> None:
    url = await cluster.start_api(max_attempts=1)
    worker = await cluster.start_worker(max_attempts=1)
    gate = tmp_path / "gate"
    async with client_for(url) as client:
        run_id = await client.create_run(f"frozen [gate:{gate}]")
        seen = await first_event(client, run_id, "message.delta")
        worker.pause()  # held mid-reply at the gate: frozen before it could finish
        tail = await rest(client, run_id, seen)
        assert tail[-1]["event"] == "run.failed"
        settled = stream(cluster, run_id)
        gate.touch()  # once thawed, it goes on with the reply: every write must be refused
        worker.resume()
        await worker.wait_for_log("lost its lease")
        status = await client.get_run(run_id)
    assert stream(cluster, run_id) == settled
    assert status["status"] == "failed"


async def test_stop_queued_run_never_starts(cluster: Cluster, client_for: Any) -> None:
    url = await cluster.start_api()
    async with client_for(url) as client:
        run_id = await client.create_run("never run me")
        assert (await client.get_run(run_id))["status"] == "queued"
        stopped = await client.stop_run(run_id)
        assert stopped == {"run_id": run_id, "status": "cancelled"}
        await cluster.start_worker()
        later = await client.create_run("but run me")
        assert [p["event"] async for _, p in client.iter_events(later)][-1] == "run.completed"
        events = [p["event"] async for _, p in client.iter_events(run_id)]
        status = await client.get_run(run_id)
        again = await client.stop_run(run_id)
    assert events == ["run.cancelled"]
    assert status["status"] == "cancelled"
    assert [e.type for e in stream(cluster, run_id)] == ["run.cancelled"]
    assert again["status"] == "cancelled" and again["object"] == "hermes.run"


async def test_stop_running_run_from_another_replica(
    cluster: Cluster, client_for: Any, tmp_path: Path
) -> None:
    first, second = await cluster.start_api(), await cluster.start_api()
    await cluster.start_worker()
    async with client_for(first) as client, client_for(second) as other:
        # Held mid-reply (the gate file never appears): running until it is stopped.
        run_id = await client.create_run(f"stop me [gate:{tmp_path / 'gate'}]")
        seen = await first_event(client, run_id, "message.delta")
        assert (await other.stop_run(run_id))["status"] == "stopping"
        tail = await rest(client, run_id, seen)
        status = await other.get_run(run_id)
    assert tail[-1]["event"] == "run.cancelled"
    assert status["status"] == "cancelled"


async def test_worker_drains_running_turn_on_sigterm(cluster: Cluster, client_for: Any) -> None:
    url = await cluster.start_api()
    worker = await cluster.start_worker(drain_seconds=20)
    async with client_for(url) as client:
        run_id = await client.create_run("finish me " + "x " * 10 + "[slow:0.05]")
        await first_event(client, run_id, "message.delta")
        worker.process.send_signal(15)
        events = [p async for _, p in client.iter_events(run_id)]
    assert worker.process.wait(20) == 0
    assert events[-1]["event"] == "run.completed"


async def test_worker_hands_back_unfinished_turn_after_drain_window(
    cluster: Cluster, client_for: Any, tmp_path: Path
) -> None:
    url = await cluster.start_api()
    leaving = await cluster.start_worker(drain_seconds=0)
    gate = tmp_path / "gate"
    async with client_for(url) as client:
        run_id = await client.create_run(f"hand me over [gate:{gate}]")
        seen = await first_event(client, run_id, "message.delta")
        leaving.process.send_signal(15)  # held mid-reply at the gate: unfinished for sure
        assert leaving.process.wait(20) == 0
        assert (await client.get_run(run_id))["status"] == "queued"
        gate.touch()
        await cluster.start_worker()
        tail = await rest(client, run_id, seen)
    names = [p["event"] for p in tail]
    assert names[0] == "run.restarted" and names[-1] == "run.completed"
