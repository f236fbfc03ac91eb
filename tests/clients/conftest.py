"""Fixtures of the strict-client suite: the Python 3.13 that runs the client, and a live stack
(one API process, two worker processes) per agent backend."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from hermes_queue.config import Settings
from hermes_queue.providers import ProviderSettings
from tests.clients.harness import ECHO, HERMES, Backend, Stack
from tests.clients.venv import ClientsPythonError, clients_python
from tests.conftest import require_hermes
from tests.support.fake_llm import FakeLLM
from tests.support.processes import Cluster

FAKE_KEY = "sk-strict-client-0123456789abcdef"
FAKE_KEY_VAR = "HQ_TEST_STRICT_FAKE_KEY"


@pytest.fixture(scope="session")
def strict_python() -> str:
    """A Python 3.13 with ``hermes-agent-api-client`` (built once and cached; never skipped)."""
    try:
        return clients_python()
    except ClientsPythonError as error:
        pytest.fail(str(error), pytrace=False)


def _hermes_settings(settings: Settings, fake: FakeLLM, home: Path) -> Settings:
    """The hermes backend against the fake LLM, as tests/e2e/test_hermes_e2e.py configures it
    (one provider, no fallback: a failed call must fail the turn)."""
    return settings.replace(
        agent_backend="hermes",
        providers={"fake": ProviderSettings("fake", fake.base_url, api_key_env=FAKE_KEY_VAR)},
        default_provider="fake",
        default_model="fake-model",
        hermes_home=str(home),
        hermes_toolsets=("terminal", "todo"),
        hermes_max_iterations=4,
    ).validate()


@pytest.fixture(params=[ECHO, HERMES], ids=lambda backend: backend.name)
async def stack(
    request: pytest.FixtureRequest,
    settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    strict_python: str,
) -> AsyncIterator[Stack]:
    backend: Backend = request.param
    async with contextlib.AsyncExitStack() as exits:
        fake: FakeLLM | None = None
        configured = settings.replace(agent_backend="echo")
        if backend is HERMES:
            require_hermes()
            monkeypatch.setenv(FAKE_KEY_VAR, FAKE_KEY)  # the workers inherit it
            fake = await exits.enter_async_context(FakeLLM(expected_key=FAKE_KEY))
            configured = _hermes_settings(settings, fake, tmp_path / "hermes")
        cluster = Cluster(configured)
        exits.callback(cluster.stop_all)
        url, first, second = await asyncio.gather(
            cluster.start_api(), cluster.start_worker(), cluster.start_worker()
        )
        headers = {"Authorization": f"Bearer {configured.api.api_key}"}
        session = await exits.enter_async_context(aiohttp.ClientSession(headers=headers))
        ready = Stack(backend, cluster, url, [first, second], session, strict_python, fake)
        try:
            yield ready
        finally:
            for driver in ready.drivers:
                await driver.close()
