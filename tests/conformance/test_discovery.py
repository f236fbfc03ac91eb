"""Health, models and capabilities (HERMES_API §5)."""

from __future__ import annotations

import pytest

from tests.conformance.conftest import Sides
from tests.conformance.exchange import Side
from tests.conformance.pending import CAPABILITIES_SELF, MODEL_ALIASES, case
from tests.conformance.scripts import conform


@pytest.mark.parametrize(
    "path",
    [
        "/health",
        "/v1/health",
        case("/v1/models", until=(MODEL_ALIASES,)),
        case("/v1/capabilities", until=(CAPABILITIES_SELF,)),
    ],
)
async def test_discovery(sides: Sides, path: str) -> None:
    async def script(side: Side) -> None:
        await side.call("GET", path)

    await conform(sides, script)
