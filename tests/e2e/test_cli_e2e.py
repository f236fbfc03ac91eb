"""The README's first command and the tail command, as a user runs them."""

from __future__ import annotations

import asyncio
import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

from hermes_queue.client import HermesQueueClient
from hermes_queue.config import Settings
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


async def _hq(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "hermes_queue",
        *args,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_the_cli_finds_a_running_dev_by_itself(tmp_path: Any, state_dir: str) -> None:
    """After `hermes-queue dev`, status, runs and tail in another shell (no HERMES_QUEUE_*
    set) talk to dev's private Redis and API, and say so; they did read 127.0.0.1:6379."""
    port = free_port()
    env = child_env()  # no HERMES_QUEUE_* at all, as in a fresh shell
    dev = await asyncio.create_subprocess_exec(
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
        banner = await _read_until(dev, r"export HERMES_QUEUE_REDIS_URL=\S+ HERMES_QUEUE_API_KEY=")
        key = re.search(r"API key:\s+(\S+)", banner).group(1)  # type: ignore[union-attr]
        redis_url = re.search(r"redis:\s+(\S+)", banner).group(1)  # type: ignore[union-attr]
        state = Path(state_dir) / "hermes-queue" / "dev.json"
        assert f"find this instance ({state})" in banner
        assert stat.S_IMODE(state.stat().st_mode) == 0o600  # it holds the key
        assert dev.pid is not None

        code, out, err = await _hq("status", env=env)
        assert code == 0, err
        assert out.splitlines()[0] == f"{redis_url} (hermes-queue dev, pid {dev.pid})"
        assert "Workers: 1 live" in out and "warning" not in err

        async with HermesQueueClient(f"http://127.0.0.1:{port}", key) as client:
            run_id = await client.create_run("found you")
        code, out, err = await _hq("tail", run_id, env=env)  # dev's API and key, no --url
        assert code == 0, err
        assert '"output": "Echo: found you"' in out.splitlines()[-1]
        code, out, _err = await _hq("runs", "show", run_id, env=env)
        assert code == 0 and re.search(r"status\s+completed", out)
    finally:
        dev.terminate()
        assert await asyncio.wait_for(dev.wait(), 30) == 0
    assert not state.exists()  # removed on the way out
    code, out, err = await _hq("status", "--json", env=env)
    assert "(default)" in err.splitlines()[0]  # back to the defaults, and saying so


async def test_tail_fails_fast_when_no_api_answers(tmp_path: Any) -> None:
    """It hung for 45 s before: a stream that never started is not one to resume."""
    port = free_port()
    code, out, err = await _hq(
        "tail", "run_x", "--url", f"http://127.0.0.1:{port}", env=child_env()
    )
    assert code == 1 and out == ""
    assert err.splitlines()[-1] == (
        f"error: no API answers at http://127.0.0.1:{port} (connection refused): start one "
        "(hermes-queue dev, or hermes-queue api), or name it with --url (or HERMES_QUEUE_HOST "
        "and HERMES_QUEUE_PORT)"
    )


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


async def test_tail_follows_a_tenants_run_with_the_operators_key(settings: Settings) -> None:
    """A tenant's run is not the operator's own (404 without --tenant); --tenant acts as it."""
    tenant_key = "tail-acme-key-5b0e8f1d9c3a7264"
    cluster = Cluster(settings.replace(api_keys=f"acme={tenant_key}"))
    try:
        url = await cluster.start_api()
        await cluster.start_worker()
        async with HermesQueueClient(url, tenant_key) as acme:
            run_id = await acme.create_run("tail me for acme")
        env = child_env(cluster.settings)
        code, out, err = await _hq("tail", run_id, "--url", url, env=env)
        assert code == 1 and "404" in err, err
        code, out, err = await _hq("tail", run_id, "--url", url, "--tenant", "acme", env=env)
        assert code == 0, err
        assert '"event": "run.completed"' in out.strip().splitlines()[-1]
        code, out, err = await _hq("tail", run_id, "--url", url, "--tenant", "Acme!", env=env)
        assert code == 1 and "--tenant: tenant name" in err
    finally:
        cluster.stop_all()
