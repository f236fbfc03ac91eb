"""Session chat across OS processes: two API replicas and a worker sharing one session store."""

from __future__ import annotations

import aiohttp

from hermes_queue.client import SSEFrame, iter_sse
from hermes_queue.config import Settings
from tests.support.processes import Cluster


async def test_session_turn_resumes_on_another_replica_and_is_persisted(
    store_settings: Settings,
) -> None:
    cluster = Cluster(store_settings)
    try:
        first, second = await cluster.start_api(), await cluster.start_api()
        await cluster.start_worker(echo_token_delay=0.02)
        headers = {"Authorization": f"Bearer {store_settings.api.api_key}"}
        async with aiohttp.ClientSession(headers=headers) as http:
            created = await http.post(f"{first}/api/sessions", json={"id": "multi", "title": "M"})
            assert created.status == 201
            response = await http.post(
                f"{first}/api/sessions/multi/chat/stream",
                json={"message": " ".join(f"w{i}" for i in range(30))},
            )
            run_id = response.headers["X-Hermes-Run-Id"]
            head: list[SSEFrame] = []
            async for frame in iter_sse(response):
                if frame.data:
                    head.append(frame)
                if len(head) == 5:
                    break
            response.close()  # the client drops mid-turn on the first replica

            resumed = await http.get(
                f"{second}/api/sessions/multi/chat/stream",
                params={"run_id": run_id},
                headers={"Last-Event-ID": head[-1].id},
            )
            tail = [f async for f in iter_sse(resumed) if f.data]
            replay = await http.get(
                f"{first}/api/sessions/multi/chat/stream", params={"run_id": run_id}
            )
            full = [f async for f in iter_sse(replay) if f.data]
            page = await (await http.get(f"{second}/api/sessions/multi/messages")).json()
            listed = await (await http.get(f"{second}/api/sessions")).json()

        assert [f.id for f in head + tail] == [f.id for f in full]
        assert [f.event for f in full][-3:] == ["assistant.completed", "run.completed", "done"]
        assert [m["role"] for m in page["data"]] == ["user", "assistant"]
        assert page["data"][1]["content"] == full[-3].json()["content"]
        assert [s["id"] for s in listed["data"]] == ["multi"]
    finally:
        cluster.stop_all()
