"""A streamed response dropped on one API process and resumed on another with starting_after."""

from __future__ import annotations

import json
from typing import Any

import aiohttp

from hermes_queue.client import iter_sse
from tests.support.processes import Cluster


async def read_events(response: aiohttp.ClientResponse, limit: int | None = None) -> list[Any]:
    got = []
    async for frame in iter_sse(response):
        if frame.data:
            got.append(json.loads(frame.data))
        if limit is not None and len(got) == limit:
            break
    return got


async def test_response_stream_resumes_on_another_process(cluster: Cluster) -> None:
    first, second = await cluster.start_api(), await cluster.start_api()
    await cluster.start_worker(echo_token_delay=0.03)
    headers = {"Authorization": f"Bearer {cluster.settings.api.api_key}"}
    async with aiohttp.ClientSession(headers=headers) as http:
        live = await http.post(
            f"{first}/v1/responses",
            json={"input": " ".join(f"w{i}" for i in range(25)), "stream": True},
        )
        head = await read_events(live, limit=6)
        live.close()  # the client drops mid-stream
        response_id = head[0]["response"]["id"]
        last = head[-1]["sequence_number"]
        resumed = await http.get(
            f"{second}/v1/responses/{response_id}",
            params={"stream": "true", "starting_after": str(last)},
        )
        tail = await read_events(resumed)
        whole = await read_events(
            await http.get(f"{second}/v1/responses/{response_id}", params={"stream": "true"})
        )
        stored = await (await http.get(f"{first}/v1/responses/{response_id}")).json()

    assert [e["sequence_number"] for e in head + tail] == list(range(len(whole)))
    assert head + tail == whole
    assert tail[-1]["type"] == "response.completed"
    assert stored["status"] == "completed"
    assert stored["output"][-1]["content"][0]["text"].startswith("Echo: w0 w1")
