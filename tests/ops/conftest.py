"""Helpers for the operations tests: Prometheus scrapes parsed, and bounded condition polls."""

from __future__ import annotations

import aiohttp
import pytest
from aiohttp.test_utils import TestClient
from prometheus_client.parser import text_string_to_metric_families

from hermes_queue.config import Settings
from tests.support.ports import unclaimed_port

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    """Every sample of a scrape, keyed by (sample name, sorted labels)."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


async def scrape_api(api: TestClient) -> Samples:
    response = await api.get("/metrics")
    assert response.status == 200, await response.text()
    assert response.headers["Content-Type"].startswith("text/plain")
    return parse(await response.text())


async def scrape_port(port: int) -> Samples:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}/metrics") as response,
    ):
        assert response.status == 200
        return parse(await response.text())


@pytest.fixture
def ops_settings(settings: Settings) -> Settings:
    """Test settings with the worker's metrics endpoint on a free port."""
    return settings.replace(metrics_port=unclaimed_port())
