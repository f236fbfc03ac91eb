"""hermes-queue on a Redis Cluster of three primaries (issue 25): two API replicas and two
workers as OS processes, runs created on both replicas and read from both (every second reader
drops its connection and resumes with ``Last-Event-ID`` on the other replica), every reader's
view exact; the runs spread over every primary; a session's turns in order."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import aiohttp
import pytest
from redis.crc import key_slot

from hermes_queue.client import iter_sse
from hermes_queue.config import Settings
from tests.support.load import Load, record_problems
from tests.support.polling import eventually
from tests.support.processes import Cluster, child_env
from tests.support.redis_cluster import RedisCluster


@pytest.mark.timeout(180)
async def test_runs_through_two_replicas_and_two_workers_are_exact(
    cluster_settings: Settings, redis_cluster: RedisCluster
) -> None:
    deployment = Cluster(cluster_settings)
    try:
        urls = [await deployment.start_api(), await deployment.start_api()]
        for _ in range(2):
            # A slow timed poll: runs are picked up at once only if the shards' wake-ups work.
            await deployment.start_worker(echo_token_delay=0.01, poll_seconds=5.0)
        headers = {"Authorization": f"Bearer {cluster_settings.api.api_key}"}
        async with aiohttp.ClientSession(headers=headers) as session:
            load = Load(session, urls, clients=4, interval=0.2, max_runs=40)
            load.start()
            try:
                await load.wait_for_completed(40, within=120)
                await load.finish(within=60)
            finally:
                await load.cancel()
            await load.settle_records(within=30)
            async with session.get(f"{urls[1]}/v1/queue?limit=10") as answer:
                queue = await answer.json()
        status = await asyncio.create_subprocess_exec(
            sys.executable,
            *("-m", "hermes_queue", "status", "--json"),
            env=child_env(cluster_settings),
            stdout=subprocess.PIPE,
        )
        printed = json.loads((await status.communicate())[0])
        logs = "\n".join(p.log()[-1500:] for p in deployment.procs)
    finally:
        deployment.stop_all()

    assert load.hangs == 0 and not load.refused, (load.hangs, load.refused, logs)
    assert len(load.accepted) == 40
    for trace in load.accepted:
        assert trace.record.get("status") == "completed", (trace.run_id, record_problems(trace))
        assert not trace.problems(), (trace.run_id, trace.problems(), trace.events, logs)
        assert "stream.gap" not in trace.events and "run.restarted" not in trace.events
    assert any(trace.resumes for trace in load.accepted), "no reader resumed"
    waits = sorted((t.first_at or 0) - t.created_at for t in load.accepted)
    assert waits[len(waits) // 2] < 1.0, f"runs waited for the timed poll: {waits}"
    keys = cluster_settings.redis.keys
    ports = {
        redis_cluster.node_of_slot(key_slot(keys.run(t.run_id).encode())).port
        for t in load.accepted
    }
    primaries = {node.port for node in redis_cluster.primary_nodes()}
    assert ports == primaries, "the runs did not spread over every primary"
    # The operator surface sums over every shard (queueview/snapshot.py).
    assert queue["depth"] == {"ready": 0, "deferred": 0, "running": 0, "blocked": 0}
    assert queue["throughput"]["claimed"] == queue["throughput"]["completed"] == 40
    assert queue["workers"]["count"] == 2 and queue["in_flight"]["data"] == []
    assert printed["throughput"]["completed"] == 40  # hermes-queue status, the same sums


@pytest.mark.timeout(120)
async def test_a_sessions_turns_run_in_order(cluster_settings: Settings) -> None:
    deployment = Cluster(cluster_settings)
    try:
        first, second = await deployment.start_api(), await deployment.start_api()
        for _ in range(2):
            await deployment.start_worker(echo_token_delay=0.05)  # turns overlap: parked
        headers = {"Authorization": f"Bearer {cluster_settings.api.api_key}"}
        async with aiohttp.ClientSession(headers=headers) as http:
            created = await http.post(f"{first}/api/sessions", json={"id": "ordered"})
            assert created.status == 201
            # Every turn's stream stays open and is read to its end (a turn nobody reads any
            # more would be superseded by the next one: streams/presence.py).
            responses = []
            for turn in range(4):
                response = await http.post(
                    f"{(first, second)[turn % 2]}/api/sessions/ordered/chat/stream",
                    json={"message": f"turn {turn}", "multitask_strategy": "enqueue"},
                )
                assert response.status == 200, await response.text()
                responses.append(response)
            run_ids = [response.headers["X-Hermes-Run-Id"] for response in responses]
            for response in responses:
                frames = [f async for f in iter_sse(response) if f.data]
                assert frames[-2].event == "run.completed"
                response.close()

            async def messages() -> list[dict[str, str]]:
                page = await (await http.get(f"{second}/api/sessions/ordered/messages")).json()
                return list(page["data"])

            page = await eventually(messages, lambda rows: len(rows) == 8, within=30)
        keys = cluster_settings.redis.keys
        shards = {keys.shard_of(run_id) for run_id in run_ids}
    finally:
        deployment.stop_all()

    assert [m["role"] for m in page] == ["user", "assistant"] * 4
    assert [m["content"] for m in page[0::2]] == [f"turn {i}" for i in range(4)]
    assert shards == {keys.session_shard("ordered")}
