"""Drain of a real API process (api/drain.py): after SIGTERM it reports not-ready at once, goes
on serving everything that reaches it (a new turn too), keeps a stream that does not resume
open until its turn ends, however long that takes, and only then exits.

The turn is longer than the ~15 s after which a SIGTERMed replica used to close (grace 5 s,
then aiohttp's two 5 s shutdown waits) and than the grace configured here: a slow tool call of
:data:`TOOL_SECONDS`. SIGTERM is sent once the stream has shown that tool starting, so the
turn is in flight by construction; everything after is awaited on what the client sees.
"""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import aiohttp

from hermes_queue.client import iter_sse
from hermes_queue.config import Settings
from tests.support.processes import Cluster

TOOL_SECONDS = 18
GRACE = 0.5


async def _chunks(stream: aiohttp.ClientResponse) -> Any:
    """The chat completion's frames as the openai SDK reads them: (event name, data)."""
    async for frame in iter_sse(stream):
        if frame.data:
            yield frame.event, frame.data


async def test_sigterm_keeps_a_long_stream_to_its_end_then_exits(
    cluster: Cluster, settings: Settings
) -> None:
    url, api = await cluster.start_api_process(drain_grace_seconds=GRACE)
    await cluster.start_worker()
    headers = {"Authorization": f"Bearer {settings.api.api_key}"}
    turn = {
        "stream": True,
        "messages": [{"role": "user", "content": f"long [tool:lookup] [slowtool:{TOOL_SECONDS}]"}],
    }
    async with aiohttp.ClientSession(headers=headers) as http:
        assert (await (await http.get(f"{url}/health/ready")).json()) == {"status": "ready"}
        async with http.post(f"{url}/v1/chat/completions", json=turn) as stream:
            assert stream.status == 200
            frames = _chunks(stream)
            seen: list[tuple[str, str]] = []
            async for event, data in frames:
                seen.append((event, data))
                if event == "hermes.tool.progress" and '"running"' in data:
                    break  # the slow tool is running: the turn is in flight
            api.process.send_signal(signal.SIGTERM)
            await api.wait_for_log("draining")

            # Not ready at once, and without the key.
            async with aiohttp.ClientSession() as anonymous:
                async with anonymous.get(f"{url}/health/ready") as ready:
                    assert ready.status == 503
                    assert await ready.json() == {"status": "draining"}
            # Still served, new turns included, each answer closing its connection.
            async with http.post(f"{url}/v1/runs", json={"input": "during the drain"}) as made:
                assert made.status == 202, await made.text()
                assert made.headers["Connection"] == "close"
                during = (await made.json())["run_id"]
            async with http.get(f"{url}/v1/runs/{during}") as read:
                assert read.status == 200

            async for event, data in frames:
                seen.append((event, data))
            assert seen[-1] == ("", "[DONE]")
            final = [data for event, data in seen if '"finish_reason": "stop"' in data]
            assert final, seen[-3:]
        # The process outlived the turn and exits after it, on its own, cleanly.
        assert await asyncio.to_thread(api.process.wait, 30) == 0
    assert "drained: nothing in flight" in api.log()
