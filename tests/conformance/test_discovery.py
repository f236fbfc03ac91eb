"""Health, models and capabilities (upstream-api.md §5)."""

from __future__ import annotations

import contextlib

import pytest

from tests.conformance.conftest import Sides
from tests.conformance.exchange import Side
from tests.conformance.scripts import conform
from tests.support.polling import NeverHeld, eventually


async def catalog_published(side: Side) -> None:
    """Our ``skills_api`` turns true once a worker has published its backend's catalog, which
    a freshly started worker does shortly after it takes jobs: wait for it (bounded)."""
    with contextlib.suppress(NeverHeld):  # if it never does, the comparison shows it
        await eventually(
            lambda: side.call("GET", "/v1/capabilities", record=False),
            lambda answer: answer.body["features"].get("skills_api"),
            within=20,
            every=0.1,
        )


@pytest.mark.parametrize("path", ["/health", "/v1/health", "/v1/models", "/v1/capabilities"])
async def test_discovery(sides: Sides, path: str) -> None:
    await catalog_published(sides.ours)

    async def script(side: Side) -> None:
        await side.call("GET", path)

    await conform(sides, script)
