"""Two tenants beside the operator, for the tests of ownership (docs/tenants.md)."""

from __future__ import annotations

from hermes_queue.config import Settings

ALPHA = "alpha-9d2e4f6a8b0c1d3e5f7a"
BETA = "beta-5e7a9c1b3d5f7a9c1e3b"


def with_tenants(settings: Settings) -> Settings:
    """``settings`` with tenant keys for ``alpha`` and ``beta`` (the operator's key kept)."""
    return settings.replace(api_keys=f"alpha={ALPHA},beta={BETA}").validate()


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}
