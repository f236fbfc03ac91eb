"""Both servers, once per test run: upstream's gateway (hermes-agent 0.19.0, only its
``api_server`` platform) and a hermes-queue stack (API and worker processes, ``hermes``
backend) per session store, on one fake LLM, all over loopback. The fixtures are scoped to
this package, so the processes stop when its last test is done, not at the end of the run.

The fake LLM lives in the package's event loop, so every test here runs in that loop too
(``pytest_collection_modifyitems`` below). Both sides read the same Hermes ``config.yaml``
(the fake as a custom endpoint, one API attempt per model call so a failing provider fails
fast on both). Keyless servers (upstream's, and an extra API process of ours) start only when
a test asks for them.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from pytest_asyncio import is_async_test

from hermes_queue.config import Settings
from hermes_queue.providers import ProviderSettings, RouteSettings
from tests.conformance.exchange import Side
from tests.conformance.pending import MARKER, Pending
from tests.conftest import require_hermes, store_variant
from tests.support.fake_llm import FakeLLM
from tests.support.processes import Cluster
from tests.support.upstream import UpstreamGateway, hermes_config, write_hermes_home

API_KEY = "conformance-key-0123456789abcdef"
LLM_KEY = "sk-conformance-llm-0123456789abcdef"
LLM_KEY_VAR = "HQ_CONFORMANCE_LLM_KEY"
MISSING_KEY_VAR = "HQ_CONFORMANCE_NEVER_SET"
MODEL = "fake-model"
# A model alias whose provider has no credentials on either side (the "missing credentials"
# scenario): upstream cannot resolve a key for its provider; ours has no key in its variable.
NOKEY_ALIAS = "nokey"
UPSTREAM_ROUTES = {NOKEY_ALIAS: {"model": "nokey-model", "provider": "deepseek"}}
SHARED_HERMES_CONFIG: dict[str, Any] = {"agent": {"api_max_retries": 1}}
HERE = Path(__file__).parent


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}(*fixes): the pending fixes whose differences this test shows"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    package_loop = pytest.mark.asyncio(loop_scope="package")
    for item in items:
        if HERE in Path(str(item.path)).parents and is_async_test(item):
            item.add_marker(package_loop, append=False)


@dataclass
class Stack:
    """Our side for one store: the cluster and its API URL."""

    cluster: Cluster
    url: str
    store: str


@pytest.fixture(scope="package")
def llm_key_env() -> Iterator[None]:
    """Our workers read the fake's key from this variable, as a deployment would."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(LLM_KEY_VAR, LLM_KEY)
        patch.delenv(MISSING_KEY_VAR, raising=False)
        yield


@pytest_asyncio.fixture(scope="package", loop_scope="package")
async def fake_llm() -> AsyncIterator[FakeLLM]:
    require_hermes()
    async with FakeLLM(expected_key=LLM_KEY) as fake:
        yield fake


@pytest_asyncio.fixture(scope="package", loop_scope="package")
async def upstream(
    fake_llm: FakeLLM, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[str]:
    async with _upstream(fake_llm, tmp_path_factory.mktemp("upstream"), API_KEY) as url:
        yield url


@pytest_asyncio.fixture(scope="package", loop_scope="package")
async def upstream_keyless(
    fake_llm: FakeLLM, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[str]:
    async with _upstream(fake_llm, tmp_path_factory.mktemp("upstream-keyless"), "") as url:
        yield url


@contextlib.asynccontextmanager
async def _upstream(fake_llm: FakeLLM, home: Path, api_key: str) -> AsyncIterator[str]:
    gateway = UpstreamGateway(
        fake_llm.base_url,
        home,
        llm_key=LLM_KEY,
        model=MODEL,
        api_key=api_key,
        api_server={"model_routes": UPSTREAM_ROUTES},
        extra_config=SHARED_HERMES_CONFIG,
    )
    try:
        await gateway.wait_ready()
        yield gateway.base_url
    finally:
        gateway.stop()


@pytest_asyncio.fixture(scope="package", loop_scope="package", params=["sqlite", "postgres"])
async def ours(
    request: pytest.FixtureRequest,
    redis_url: str,
    fake_llm: FakeLLM,
    llm_key_env: None,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[Stack]:
    home = write_hermes_home(
        tmp_path_factory.mktemp(f"ours-{request.param}"),
        hermes_config(fake_llm.base_url, LLM_KEY, MODEL, SHARED_HERMES_CONFIG),
    )
    base = Settings.of(
        redis_url=redis_url,
        namespace=f"conf{uuid.uuid4().hex[:10]}",
        api_key=API_KEY,
        metrics_port=0,
        keepalive_seconds=30.0,  # as upstream 0.19: no keepalive comment within a test
        store_url=f"sqlite:///{home}/store.db",
        agent_backend="hermes",
        providers={
            "fake": ProviderSettings("fake", fake_llm.base_url, api_key_env=LLM_KEY_VAR),
            "nokey": ProviderSettings("nokey", fake_llm.base_url, api_key_env=MISSING_KEY_VAR),
        },
        model_routes={NOKEY_ALIAS: RouteSettings(NOKEY_ALIAS, "nokey", "nokey-model")},
        default_provider="fake",
        default_model=MODEL,
        hermes_home=str(home),
    )
    async with store_variant(base, request.param) as settings:
        cluster = Cluster(settings.validate())
        try:
            url = await cluster.start_api()
            await cluster.start_worker()
            yield Stack(cluster, url, request.param)
        finally:
            cluster.stop_all()
            _drop_keys(cluster)


@pytest_asyncio.fixture(scope="package", loop_scope="package")
async def ours_keyless(ours: Stack) -> str:
    """Another API process of the same stack, without an API key (loopback only)."""
    return await ours.cluster.start_api(api_key="")


def _drop_keys(cluster: Cluster) -> None:
    client = cluster.redis()
    try:
        keys = list(client.scan_iter(match=f"{cluster.settings.redis.namespace}:*", count=500))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


@dataclass
class Sides:
    upstream: Side
    ours: Side
    nonce: str  # unique per test, the same on both sides: names sessions, marks prompts
    pending: list[Pending]  # the fixes this test waits for (its pending marks)

    def __iter__(self) -> Iterator[Side]:
        return iter((self.upstream, self.ours))


def _pending(request: pytest.FixtureRequest) -> list[Pending]:
    return [fix for mark in request.node.iter_markers(MARKER) for fix in mark.args]


@pytest_asyncio.fixture(loop_scope="package")
async def sides(request: pytest.FixtureRequest, upstream: str, ours: Stack) -> AsyncIterator[Sides]:
    async with aiohttp.ClientSession() as http:
        yield Sides(
            Side("upstream", upstream, API_KEY, http),
            Side("ours", ours.url, API_KEY, http),
            uuid.uuid4().hex[:10],
            _pending(request),
        )


@pytest_asyncio.fixture(loop_scope="package")
async def keyless_sides(
    request: pytest.FixtureRequest, upstream_keyless: str, ours_keyless: str
) -> AsyncIterator[Sides]:
    async with aiohttp.ClientSession() as http:
        yield Sides(
            Side("upstream", upstream_keyless, "", http),
            Side("ours", ours_keyless, "", http),
            uuid.uuid4().hex[:10],
            _pending(request),
        )
