"""The README's first command and the tail command, as a user runs them."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from typing import Any

from hermes_queue.client import HermesQueueClient
from hermes_queue.redisio.embedded import free_port
from tests.support.processes import REPO_ROOT, Cluster, child_env


async def _read_until(process: asyncio.subprocess.Process, pattern: str) -> str:
    seen = ""
    assert process.stdout is not None
    while not re.search(pattern, seen):
        line = await asyncio.wait_for(process.stdout.readline(), 30)
        if not line:
            raise AssertionError(f"process ended before {pattern!r}:\n{seen}")
        seen += line.decode()
    return seen


async def test_dev_runs_everything_in_one_process_with_a_private_redis(tmp_path: Any) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_QUEUE_")}
    env["PYTHONPATH"] = str(REPO_ROOT)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "hermes_queue",
        "dev",
        "--port",
        str(port),
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        banner = await _read_until(process, r"agent:")
        key = re.search(r"API key:\s+(\S+)", banner).group(1)  # type: ignore[union-attr]
        assert f"http://127.0.0.1:{port}" in banner and "(embedded)" in banner
        async with HermesQueueClient(f"http://127.0.0.1:{port}", key) as client:
            run_id = await client.create_run("hello from dev")
            events = [p async for _, p in client.iter_events(run_id)]
        assert events[-1] == {
            **events[-1],
            "event": "run.completed",
            "output": "Echo: hello from dev",
        }
    finally:
        process.terminate()
        assert await asyncio.wait_for(process.wait(), 30) == 0


async def test_tail_follows_a_run_to_its_end(cluster: Cluster, client_for: Any) -> None:
    url = await cluster.start_api()
    await cluster.start_worker(echo_token_delay=0.02)
    async with client_for(url) as client:
        run_id = await client.create_run("tail me please")
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "hermes_queue",
        "tail",
        run_id,
        "--url",
        url,
        env=child_env(cluster.settings),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 0, err.decode()
    lines = out.decode().strip().splitlines()
    assert '"event": "run.completed"' in lines[-1]
    assert all(re.match(r"^\d+-\d+ \{", line) for line in lines)
