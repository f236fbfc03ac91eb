"""Operator commands (``status``, ``runs``, ``check``) against a real Redis, through click.

The commands run their own event loop (``asyncio.run``), so these tests are synchronous and
prepare Redis state in short loops of their own. Every invocation sees the test's settings the
way an operator's shell would: as ``HERMES_QUEUE_*`` variables.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis.asyncio as aioredis
from click.testing import CliRunner, Result
from rich.console import Console

from hermes_queue.cli import check as cli_check
from hermes_queue.cli import main
from hermes_queue.cli import ops as cli_ops
from hermes_queue.cli.jobs import JobsView, render_jobs
from hermes_queue.config import Settings, settings_env
from hermes_queue.keys import Keys
from hermes_queue.runs.model import NewRun
from hermes_queue.runs.repository import RunRepository
from hermes_queue.runs.turn_request import TurnRequest
from hermes_queue.schedules.definitions import parse_create, pause_changes
from hermes_queue.store import create_store
from hermes_queue.store.migrations import LATEST_VERSION
from hermes_queue.workers.warmup import READY, WARMING, WarmUpState
from tests.support.not_redis import http_server

T = TypeVar("T")
Setup = Callable[[aioredis.Redis, RunRepository, Keys], Awaitable[T]]


@pytest.fixture
def env(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    """The test settings exported as the environment; the namespace's keys removed after."""
    for name, value in settings_env(settings).items():
        monkeypatch.setenv(name, value)
    yield settings

    async def cleanup() -> None:
        client = aioredis.Redis.from_url(settings.redis.url)
        try:
            found = [k async for k in client.scan_iter(match=f"{settings.redis.namespace}:*")]
            if found:
                await client.delete(*found)
        finally:
            await client.aclose()

    asyncio.run(cleanup())


def prepare(settings: Settings, setup: Setup[T]) -> T:
    """Run ``setup`` against Redis in a loop of its own (the CLI runs in another)."""

    async def go() -> T:
        client = aioredis.Redis.from_url(settings.redis.url)
        try:
            return await setup(
                client,
                RunRepository(client, settings.redis.keys, settings.runs),
                Keys(settings.redis.namespace),
            )
        finally:
            await client.aclose()

    return asyncio.run(go())


def invoke(*args: str) -> Result:
    result = CliRunner().invoke(main, list(args))
    assert "Traceback" not in result.output, result.output
    return result


async def create(repo: RunRepository, *run_ids: str) -> None:
    for run_id in run_ids:
        assert await repo.create(NewRun(run_id, f"s_{run_id}", TurnRequest()))


def dead_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- status ------------------------------------------------------------------------------------


def status_json() -> dict[str, Any]:
    result = invoke("status", "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def test_status_json_numbers_move_with_runs(env: Settings) -> None:
    before = status_json()
    assert before["object"] == "hermes.queue"
    assert before["depth"] == {"ready": 0, "deferred": 0, "running": 0, "blocked": 0}
    assert before["workers"]["count"] == 0

    async def setup(redis: aioredis.Redis, repo: RunRepository, keys: Keys) -> None:
        await create(repo, "run_a", "run_b", "run_c")
        await redis.zadd(keys.queue, {"run_later": int((time.time() + 3600) * 1000)})
        assert await repo.claim("run_a", "w1") is not None
        await redis.zadd(keys.workers, {"w1": int(time.time() * 1000)})
        await redis.hset(keys.worker("w1"), mapping={"slots": 4, "busy": 1})  # type: ignore[misc]

    prepare(env, setup)
    after = status_json()
    assert after["depth"] == {"ready": 2, "deferred": 1, "running": 1, "blocked": 0}
    assert after["oldest_ready_age_seconds"] >= 0
    assert after["workers"]["count"] == 1
    assert after["workers"]["slots"] == 4 and after["workers"]["free_slots"] == 3
    assert after["throughput"]["claimed"] == 1


def test_status_table_renders_the_numbers(env: Settings) -> None:
    async def setup(redis: aioredis.Redis, repo: RunRepository, keys: Keys) -> None:
        await create(repo, "run_a", "run_b", "run_c", "run_d")
        for later in ("run_x", "run_y"):
            await redis.zadd(keys.queue, {later: int((time.time() + 3600) * 1000)})
        assert await repo.claim("run_a", "worker-one") is not None
        assert (await repo.request_stop("run_d")).status == "cancelled"
        await redis.zadd(keys.workers, {"worker-one": int(time.time() * 1000)})
        await redis.hset(keys.worker("worker-one"), mapping={"slots": 8, "busy": 1})  # type: ignore[misc]

    prepare(env, setup)
    result = invoke("status")
    assert result.exit_code == 0, result.output
    out = result.stdout
    for state, count in (("ready", 2), ("deferred", 2), ("running", 1), ("blocked", 0)):
        assert re.search(rf"{state}\s+{count}\b", out), (state, out)
    assert "worker-one" in out
    assert "1 live · 8 slots · 1 busy · 7 free" in out
    assert re.search(r"total\s+1\s+0\s+0\s+1\b", out), out  # claimed, completed, failed, cancelled
    assert "0 failed, 1 cancelled" in out


@pytest.fixture
def tenanted(env: Settings, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Two tenants, one with limits, exported as the environment (``env`` cleans up)."""
    local = env.replace(
        api_keys="alpha=alpha-4d6f8a0c2e4b6d8f0a2c,beta=beta-7e9a1c3e5b7d9f1a3c5e",
        tenant_max_running="alpha=1",
        tenant_max_ready="alpha=10",
    ).validate()
    for name, value in settings_env(local).items():
        monkeypatch.setenv(name, value)
    return local


def test_status_per_tenant(tenanted: Settings) -> None:
    async def setup(redis: aioredis.Redis, repo: RunRepository, keys: Keys) -> None:
        for run_id, tenant in (("run_a1", "alpha"), ("run_a2", "alpha"), ("run_b1", "beta")):
            assert await repo.create(NewRun(run_id, f"s_{run_id}", TurnRequest(), tenant=tenant))
        for run_id in ("run_a1", "run_b1"):
            assert await repo.claim(run_id, "w1") is not None
        assert await repo.claim("run_a2", "w1") is None  # alpha at its running limit: held
        await redis.hincrby(keys.stats(int(time.time() // 60)), "refused:beta", 3)

    prepare(tenanted, setup)
    tenants = {t["tenant"]: t for t in status_json()["tenants"]["data"]}
    assert list(tenants) == ["default", "alpha", "beta"]
    alpha, beta = tenants["alpha"], tenants["beta"]
    assert (alpha["ready"], alpha["held"], alpha["running"], alpha["claimed"]) == (1, 1, 1, 1)
    assert (beta["ready"], beta["running"], beta["refused"]) == (0, 1, 3)
    assert alpha["limits"] == {"running": 1, "ready": 10, "rate_per_second": 0.0}
    out = invoke("status").stdout
    assert "Tenants" in out
    # ready, held, running, claimed, their mean wait (taken at once), refused, limits
    assert re.search(r"alpha\s+1\s+1\s+1\s+1\s+0\.\ds\s+0\s+run 1 ready 10\b", out), out
    assert re.search(r"beta\s+0\s+0\s+1\s+1\s+0\.\ds\s+3\s+-", out), out
    assert alpha["mean_wait_seconds"] < 1 and tenants["default"]["mean_wait_seconds"] is None


def test_status_of_one_tenant_shows_no_tenant_table(env: Settings) -> None:
    assert "Tenants" not in invoke("status").stdout
    assert [t["tenant"] for t in status_json()["tenants"]["data"]] == ["default"]


def test_status_without_workers_says_so(env: Settings) -> None:
    result = invoke("status")
    assert result.exit_code == 0 and "no live worker" in result.stdout


def test_status_warns_when_it_finds_no_worker_and_no_run(env: Settings) -> None:
    """The usual cause: the CLI reads another Redis (or namespace) than the deployment's."""
    empty = invoke("status")
    warning = (
        f"warning: no live worker and no run here in the last hour: is {env.redis.url} "
        "(HERMES_QUEUE_REDIS_URL) the deployment you meant? check HERMES_QUEUE_REDIS_URL and "
        f"HERMES_QUEUE_NAMESPACE ({env.redis.namespace})"
    )
    assert warning in empty.stderr
    assert warning in invoke("runs", "list").stderr
    prepare(env, lambda redis, repo, keys: create(repo, "run_a"))
    assert "warning" not in invoke("status").stderr  # a run is here: this is a deployment


def test_status_says_when_fewer_workers_live_than_desired(env: Settings) -> None:
    async def setup(redis: aioredis.Redis, repo: RunRepository, keys: Keys) -> None:
        await create(repo, *(f"run_{i}" for i in range(40)))  # 40 ready: 3 workers of 16

    prepare(env, setup)
    out = invoke("status").stdout
    assert "fewer live workers than desired: 0 live, 3 desired" in " ".join(out.split())


def test_status_watch_refreshes_then_ends(env: Settings) -> None:
    table = invoke("status", "--watch", "0.1", "--iterations", "2")
    assert table.exit_code == 0, table.output
    assert "Queue" in table.stdout and "ready" in table.stdout
    lines = invoke("status", "--json", "--watch", "0.1", "--iterations", "3")
    assert lines.exit_code == 0, lines.output
    snapshots = [json.loads(line) for line in lines.stdout.splitlines()]
    assert len(snapshots) == 3 and all(s["object"] == "hermes.queue" for s in snapshots)


def test_status_watch_ctrl_c_exits_0(env: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    read = cli_ops.read_status
    calls = 0

    async def interrupted(redis: aioredis.Redis, settings: Settings) -> cli_ops.StatusView:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise KeyboardInterrupt
        return await read(redis, settings)

    monkeypatch.setattr(cli_ops, "read_status", interrupted)
    result = invoke("status", "--watch", "0.1")
    assert result.exit_code == 0, result.output
    assert calls == 3


def test_status_with_redis_down_is_one_line_with_the_password_masked(
    env: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = dead_port()
    monkeypatch.setenv("HERMES_QUEUE_REDIS_URL", f"redis://:hunter2@127.0.0.1:{port}/0")
    for args in (("status",), ("status", "--json"), ("runs", "list"), ("runs", "show", "r")):
        result = invoke(*args)
        assert result.exit_code == 1, args
        assert result.output.strip().splitlines() == [
            f"redis://:***@127.0.0.1:{port}/0 (HERMES_QUEUE_REDIS_URL)",  # which deployment
            f"error: Redis at redis://:***@127.0.0.1:{port}/0 is not reachable (ConnectionError)",
        ]
        assert "hunter2" not in result.output


# -- runs --------------------------------------------------------------------------------------


def test_runs_list_pages_queued_and_in_flight_runs(env: Settings) -> None:
    async def setup(redis: aioredis.Redis, repo: RunRepository, keys: Keys) -> None:
        await create(repo, "run_a", "run_b", "run_c", "run_d")
        for run_id in ("run_a", "run_b"):
            assert await repo.claim(run_id, "w1") is not None

    prepare(env, setup)
    table = invoke("runs", "list", "--wide")
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    assert lines[0] == f"{env.redis.url} (HERMES_QUEUE_REDIS_URL)"  # which deployment
    assert "Queued (ready, next first): 2" in table.stdout and "In flight: 2" in table.stdout
    queued = [line.split() for line in lines if line.strip().startswith(("run_c", "run_d"))]
    assert [(row[0], row[1]) for row in queued] == [("run_c", "1"), ("run_d", "2")]  # positions
    assert "s_run_b" in table.stdout

    pages = json.loads(invoke("runs", "list", "--json", "--limit", "1", "--offset", "1").stdout)
    page = pages["in_flight"]
    assert page["total"] == 2 and page["limit"] == 1 and page["offset"] == 1
    [run] = page["data"]
    assert run["run_id"] in ("run_a", "run_b")
    assert run["status"] == "running" and run["worker"] == "w1" and run["attempt"] == 1
    [ready] = pages["queued"]["data"]
    assert (pages["queued"]["total"], ready["run_id"], ready["position"]) == (2, "run_d", 2)
    assert ready["session_id"] == "s_run_d" and ready["attempt"] == 0
    assert 0 <= ready["age_seconds"] < 60
    first = invoke("runs", "list", "--limit", "1")
    assert "next page: --offset 1" in first.stdout


def test_run_ids_are_never_cut_in_80_columns(env: Settings) -> None:
    """Ids are pasted into the next command: full, on one line, at 80 columns too."""
    long_ids = [f"run_{'0ec4d8296a' * 3}{i}" for i in range(3)]

    async def setup(redis: aioredis.Redis, repo: RunRepository, keys: Keys) -> None:
        await create(repo, *long_ids)
        assert await repo.claim(long_ids[0], "a-rather-long-host-name:1234:abcdef") is not None

    prepare(env, setup)
    narrow = invoke("runs", "list")  # CliRunner's terminal is 80 columns wide
    assert narrow.exit_code == 0, narrow.output
    assert all(len(line) <= 80 for line in narrow.stdout.splitlines())
    for run_id in long_ids:
        assert re.search(rf"^\s*{run_id}\s", narrow.stdout, re.MULTILINE), narrow.stdout
    assert "(--wide adds worker, session)" in narrow.stdout
    wide = invoke("runs", "list", "--wide").stdout
    assert "a-rather-long-host-name:1234:abcdef" in wide and f"s_{long_ids[0]}" in wide


def test_runs_show_gives_status_attempt_and_worker(env: Settings) -> None:
    async def setup(redis: aioredis.Redis, repo: RunRepository, keys: Keys) -> None:
        await create(repo, "run_a")
        assert await repo.claim("run_a", "w7") is not None

    prepare(env, setup)
    body = json.loads(invoke("runs", "show", "run_a", "--json").stdout)
    assert body["object"] == "hermes.run" and body["run_id"] == "run_a"
    assert body["status"] == "running" and body["attempt"] == 1 and body["worker"] == "w7"
    assert body["session_id"] == "s_run_a" and body["reason"] is None
    human = invoke("runs", "show", "run_a")
    assert human.exit_code == 0, human.output
    assert re.search(r"status\s+running", human.stdout) and re.search(r"worker\s+w7", human.stdout)


def test_runs_show_gives_a_pending_approval_and_runs_approve_answers_it(env: Settings) -> None:
    """The operator's way to see what an agent asks and to answer it (the path
    POST /v1/runs/{id}/approval takes: same choices, same aliases, same refusals)."""

    async def setup(redis: aioredis.Redis, repo: RunRepository, keys: Keys) -> None:
        await create(repo, "run_ask")
        attempt = await repo.claim("run_ask", "w1")
        assert attempt is not None
        data = {"request_id": "apr_1", "command": "rm -rf /tmp/x", "description": "cleanup"}
        assert await attempt.request_approval("apr_1", {**data, "choices": ["once", "deny"]})

    prepare(env, setup)
    shown = invoke("runs", "show", "run_ask").stdout
    assert re.search(r"status\s+waiting_for_approval", shown)
    assert re.search(r"command\s+rm -rf /tmp/x", shown)
    assert re.search(r"description\s+cleanup", shown)
    assert "hermes-queue runs approve run_ask once|deny" in " ".join(shown.split())
    assert json.loads(invoke("runs", "show", "run_ask", "--json").stdout)["approval"]["command"]

    bad = invoke("runs", "approve", "run_ask", "maybe")
    assert bad.exit_code == 1
    assert bad.stderr.splitlines()[-1] == (
        "error: invalid approval choice 'maybe'; expected one of: once, session, always, deny"
    )
    answered = invoke("runs", "approve", "run_ask", " Approve ")  # upstream's alias of once
    assert answered.exit_code == 0, answered.output
    assert answered.stdout.strip() == "run_ask: answered once (request apr_1); its worker goes on"

    async def choice(redis: aioredis.Redis, repo: RunRepository, keys: Keys) -> Any:
        record = await repo.get("run_ask")
        assert record is not None
        return record.status, await repo.approvals.choice("run_ask", "apr_1")

    assert prepare(env, choice) == ("running", "once")
    again = invoke("runs", "approve", "run_ask", "deny")
    assert again.exit_code == 1
    assert again.stderr.splitlines()[-1] == "error: no approval is pending for run run_ask"
    missing = invoke("runs", "approve", "run_nope", "once")
    assert missing.exit_code == 1 and "run run_nope not found" in missing.stderr


def test_runs_stop_cancels_a_queued_run_and_stops_a_running_one(env: Settings) -> None:
    async def setup(redis: aioredis.Redis, repo: RunRepository, keys: Keys) -> None:
        await create(repo, "run_q", "run_r")
        assert await repo.claim("run_r", "w1") is not None

    prepare(env, setup)
    queued = invoke("runs", "stop", "run_q")
    assert queued.exit_code == 0 and queued.stdout.strip() == "run_q: cancelled"
    running = invoke("runs", "stop", "run_r")
    assert running.exit_code == 0 and running.stdout.startswith("run_r: stopping")
    again = invoke("runs", "stop", "run_q")
    assert again.exit_code == 0 and again.stdout.strip() == "run_q: cancelled"

    async def statuses(redis: aioredis.Redis, repo: RunRepository, keys: Keys) -> list[str]:
        return [(await repo.get(r)).status for r in ("run_q", "run_r")]  # type: ignore[union-attr]

    assert prepare(env, statuses) == ["cancelled", "stopping"]
    assert json.loads(invoke("runs", "show", "run_q", "--json").stdout)["status"] == "cancelled"


@pytest.mark.parametrize("args", [("runs", "show", "run_nope"), ("runs", "stop", "run_nope")])
def test_unknown_run_is_one_error_line_and_exit_1(env: Settings, args: tuple[str, ...]) -> None:
    result = invoke(*args)
    assert result.exit_code == 1
    [where, line] = result.output.strip().splitlines()
    assert where.endswith("(HERMES_QUEUE_REDIS_URL)")
    assert line.startswith("error: run run_nope not found")


# -- check -------------------------------------------------------------------------------------


def test_check_passes_with_redis_and_a_migrated_store(env: Settings) -> None:
    assert invoke("migrate").exit_code == 0
    result = invoke("check", "--role", "api")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("ok    redis ") and lines[1].startswith("ok    session_store ")
    assert lines[-1] == "api: healthy"


def test_worker_check_also_needs_a_warmed_up_worker(env: Settings) -> None:
    assert invoke("migrate").exit_code == 0
    cold = invoke("check", "--role", "worker")
    assert cold.exit_code == 1 and "FAIL  warm_up" in cold.output
    state = WarmUpState(env.redis.namespace)  # what a worker process in this container writes
    state.set(WARMING)
    try:
        assert "still warming up" in invoke("check", "--role", "worker").output
        state.set(READY)
        result = invoke("check", "--role", "worker")
        assert result.exit_code == 0, result.output
        assert result.stdout.splitlines()[-2].startswith("ok    warm_up ")
        assert result.stdout.splitlines()[-1] == "worker: healthy"
    finally:
        state.clear()


def test_check_fails_on_an_unmigrated_store(env: Settings) -> None:
    result = invoke("check")
    assert result.exit_code == 1
    assert "hermes-queue migrate" in result.output and "api: UNHEALTHY" in result.output


def test_check_fails_with_redis_down(env: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    assert invoke("migrate").exit_code == 0
    monkeypatch.setenv("HERMES_QUEUE_REDIS_URL", f"redis://u:pw@127.0.0.1:{dead_port()}/0")
    result = invoke("check", "--role", "worker")
    assert result.exit_code == 1
    assert "FAIL  redis          redis://u:***@127.0.0.1:" in result.output
    assert "is not reachable (ConnectionError)" in result.output
    assert "ok    session_store" in result.output and ":pw@" not in result.output


def test_check_fails_with_a_broken_store(env: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HERMES_QUEUE_STORE_URL", "postgresql://nobody@127.0.0.1:1/none")
    result = invoke("check")
    assert result.exit_code == 1
    assert "ok    redis" in result.output
    # Where the store is, without the user (nor a password) of its URL.
    assert "FAIL  session_store  postgresql://127.0.0.1:1/none is not reachable" in result.output


def test_check_rejects_a_store_url_without_quoting_it(
    env: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HERMES_QUEUE_STORE_URL", "mysql://root:secret@db/x")
    result = invoke("check")
    assert result.exit_code == 2  # a bad setting, before anything is probed
    assert "has the unsupported scheme 'mysql'" in result.output
    assert "secret" not in result.output


def test_check_tells_not_redis_from_not_reachable(
    env: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An HTTP server where Redis should be is "answers, but not as Redis": the fix is the
    port, not starting Redis."""
    assert invoke("migrate").exit_code == 0
    with http_server() as port:
        monkeypatch.setenv("HERMES_QUEUE_REDIS_URL", f"redis://127.0.0.1:{port}/0")
        result = invoke("check")
    assert result.exit_code == 1
    assert result.stdout.splitlines()[0] == (
        f"FAIL  redis          redis://127.0.0.1:{port}/0 answers, but not as Redis (another "
        "service listens on that port) (InvalidResponse)"
    )
    monkeypatch.setenv("HERMES_QUEUE_REDIS_URL", f"redis://127.0.0.1:{port}/0")  # now closed
    closed = invoke("check")
    assert closed.stdout.splitlines()[0].endswith("is not reachable (ConnectionError)")


def test_check_names_the_store_and_its_rows_and_never_creates_it(
    env: Settings, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    typo = tmp_path / "stroe.db"
    monkeypatch.setenv("HERMES_QUEUE_STORE_URL", f"sqlite:///{typo}")
    result = invoke("check")
    assert result.exit_code == 1
    assert result.stdout.splitlines()[1] == (
        f"FAIL  session_store  {typo} does not exist yet: run `hermes-queue migrate` "
        "(or check store_url)"
    )
    missing_dir = tmp_path / "nonexistent" / "x.db"
    monkeypatch.setenv("HERMES_QUEUE_STORE_URL", f"sqlite:///{missing_dir}")
    assert "a directory that does not exist" in invoke("check").output
    assert sorted(tmp_path.iterdir()) == []  # nothing created, not even -wal or -shm

    monkeypatch.setenv("HERMES_QUEUE_STORE_URL", env.store.url)
    assert invoke("migrate").exit_code == 0

    async def chat() -> None:
        store = create_store(env.store.url)
        try:
            await store.create_session("s1")
            await store.append_messages("s1", [{"role": "user", "content": "hi"}])
        finally:
            await store.close()

    asyncio.run(chat())
    files = sorted(p.name for p in Path(env.store.url.removeprefix("sqlite:///")).parent.iterdir())
    ok = invoke("check")
    assert ok.exit_code == 0, ok.output
    path = Path(env.store.url.removeprefix("sqlite:///")).resolve()
    assert ok.stdout.splitlines()[1] == (
        f"ok    session_store  {path} (schema {LATEST_VERSION}, 1 sessions, 1 messages)"
    )
    assert sorted(p.name for p in path.parent.iterdir()) == files  # read only


def test_mask_url() -> None:
    assert cli_check.mask_url("redis://:pw@h:6379/0") == "redis://:***@h:6379/0"
    assert cli_check.mask_url("postgresql://u:pw@h/db") == "postgresql://u:***@h/db"
    assert cli_check.mask_url("redis://h:6379/0") == "redis://h:6379/0"
    assert cli_check.mask_url("sqlite:///tmp/x.db") == "sqlite:///tmp/x.db"


# -- scheduled jobs in status ------------------------------------------------------------------


def test_jobs_table_keeps_its_columns_in_80_columns_across_midnight() -> None:
    """A fire within the day is shown by its time, whether or not it falls after midnight, so
    the row is as wide at 23:30 as at noon and no column is cut short."""
    rows = []
    for name, schedule, minutes in (("soon", "every 5m", 5), ("hourly", "every 1h", 60)):
        for clock in ("12:00:00", "23:30:00"):
            now = datetime.fromisoformat(f"2026-12-01T{clock}+00:00").timestamp()
            fire = now + minutes * 60
            job = {
                "id": "7dc58f0e9a4b",  # as definitions.new_job_id makes them
                "name": name,
                "schedule": schedule,
                "state": "scheduled",
                "enabled": True,
                "next_run_at": datetime.fromtimestamp(fire, UTC).isoformat(),
                "next_run_epoch": fire,
                "last_run_at": None,
                "last_status": None,
            }
            console = Console(width=80, record=True)
            console.print(render_jobs(JobsView([job]), now=now))
            row = next(line for line in console.export_text().splitlines() if name in line)
            rows.append(row)
            assert re.search(rf"7dc58f0e9a4b +{name} .* {schedule} .* scheduled .* \(in ", row), row
    assert len({len(row.rstrip()) for row in rows[:2]}) == 1  # noon and 23:30 alike
    assert len({len(row.rstrip()) for row in rows[2:]}) == 1


def test_status_lists_jobs_soonest_next_fire_first(env: Settings) -> None:
    now = time.time()

    async def setup() -> None:
        store = create_store(env.store.url)
        try:
            await store.migrate()
            for name, schedule in (("hourly", "every 1h"), ("soon", "every 5m")):
                body = {"name": name, "schedule": schedule, "prompt": "go"}
                await store.create_job(parse_create(body, now=now, tz=UTC))
            paused = parse_create(
                {"name": "off", "schedule": "every 1d", "prompt": "x"}, now=now, tz=UTC
            )
            await store.create_job(paused)
            await store.update_job(paused.id, pause_changes(paused, now))
        finally:
            await store.close()

    asyncio.run(setup())
    out = invoke("status").stdout
    assert "Scheduled jobs: 2 scheduled, 1 paused or done" in out
    lines = [line for line in out.splitlines() if re.search(r"\b(soon|hourly|off)\b", line)]
    assert [line.split()[1] for line in lines] == ["soon", "hourly", "off"]
    ids = {job["name"]: job["id"] for job in status_json()["jobs"]}
    assert [line.split()[0] for line in lines] == [ids["soon"], ids["hourly"], ids["off"]]
    assert re.search(r"soon .* every 5m .* scheduled .* \(in 4m5\ds\)", lines[0]), lines[0]
    assert re.search(r"off .* paused\s+-", lines[2]), lines[2]

    body = status_json()
    assert [(j["name"], j["state"]) for j in body["jobs"]] == [
        ("soon", "scheduled"),
        ("hourly", "scheduled"),
        ("off", "paused"),
    ]
    assert body["jobs"][0]["next_run_at"].endswith("+00:00")


def test_status_with_an_unreadable_store_still_shows_the_queue(env: Settings) -> None:
    result = invoke("status")  # the test store was never migrated
    assert result.exit_code == 0, result.output
    assert "no live worker" in result.stdout
    assert "Scheduled jobs: session store unreadable (StoreError)" in result.stdout
    assert status_json()["jobs"] is None
