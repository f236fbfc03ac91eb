"""The queue per tenant: what ``GET /v1/queue``, ``hermes-queue status`` and the metrics show
of each tenant, and the claims behind a tenant's Retry-After (``api/turns/backpressure.py``).

Every figure comes from counters the run scripts keep (``keys.py``): the shards' fair-turn
hashes (``n:<tenant>`` queued, ``r:<tenant>`` running, ``h:<tenant>`` held at the running
limit) and the per-minute stats (``claimed:<tenant>``, ``refused:<tenant>``), so a read is a
fixed number of commands whatever the queue holds. The operator's tenant ``default`` is not
counted where that would cost a single-tenant deployment a command per claim: its running runs
and claims are the totals less the other tenants'.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from redis.asyncio.client import Pipeline

from hermes_queue.keys import Keys
from hermes_queue.tenancy.keys import DEFAULT_TENANT
from hermes_queue.tenancy.limits import NO_LIMITS, TenantLimits

# The fair-hash counters by their prefix, and the stats' per-tenant ones.
_FAIR = {"n:": "ready", "r:": "running", "h:": "held"}
_STATS = {"claimed:": "claimed", "refused:": "refused", "waited_ms:": "waited_ms"}
# The stats field of all claims' waits (claim.lua), of which ``default`` has what the others
# do not.
_WAITED_TOTAL = "waited_ms"


@dataclass
class TenantFigures:
    """One tenant's share of the queue: ``ready`` (queued, ``held`` of them left queued at the
    running limit), ``running``, and over the stats window ``claimed`` (its drain), the time
    those runs had waited in the queue (``waited_ms``, summed) and ``refused`` (429s answered
    to it)."""

    tenant: str
    ready: int = 0
    running: int = 0
    held: int = 0
    claimed: int = 0
    refused: int = 0
    waited_ms: int = 0

    @property
    def mean_wait_seconds(self) -> float | None:
        """How long its runs that workers took in the window had waited, on average (None:
        none taken). With ``ready`` and ``held`` beside it: whether it is served its share."""
        return round(self.waited_ms / self.claimed / 1000, 3) if self.claimed else None

    def to_json(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "ready": self.ready,
            "running": self.running,
            "held": self.held,
            "claimed": self.claimed,
            "refused": self.refused,
            "mean_wait_seconds": self.mean_wait_seconds,
        }


def text(value: Any) -> str:
    """A Redis reply as text ('' for none)."""
    return value.decode() if isinstance(value, bytes) else ("" if value is None else str(value))


@dataclass(frozen=True)
class TenantView:
    """What the deployment knows of its tenants beside the counters: the configured ones
    (listed even when idle) and their limits."""

    known: frozenset[str] = frozenset()
    limits: TenantLimits = NO_LIMITS

    def limits_of(self) -> dict[str, dict[str, float | int]]:
        """Each configured tenant's limits (and default's), {} when no limit is set."""
        if not (self.limits.running_by or self.limits.ready_by or self.limits.rate_by):
            return {}
        return {t: self.limits.describe(t) for t in sorted({DEFAULT_TENANT, *self.known})}


NO_VIEW = TenantView()
"""No tenant configured beside ``default``, no limits."""


def ask_tenants(pipe: Pipeline, keys: Keys, stats_keys: list[str]) -> int:
    """Queue the reads :func:`tenant_figures` takes; returns how many replies they make."""
    for shard in keys.shard_ids:
        pipe.hgetall(keys.fair_at(shard))
    for key in stats_keys:
        pipe.hgetall(key)
    return len(keys.shard_ids) + len(stats_keys)


def tenant_figures(
    replies: list[Any], shards: int, running: int, claimed: int, view: TenantView = NO_VIEW
) -> list[TenantFigures]:
    """The tenants from :func:`ask_tenants`' replies and the configured ones (``view``),
    ``default`` first then by name; ``running`` and ``claimed``: the totals, of which
    ``default`` has what the others do not."""
    found = {t: TenantFigures(t) for t in sorted({DEFAULT_TENANT, *view.known})}
    waited = 0
    for i, row in enumerate(replies):
        table = _FAIR if i < shards else _STATS
        for raw_field, raw_value in row.items():
            name = text(raw_field)
            if name == _WAITED_TOTAL and table is _STATS:
                waited += int(text(raw_value))
                continue
            prefix = name[: name.find(":") + 1]
            if prefix in table:
                tenant = name[len(prefix) :]
                figures = found.setdefault(tenant, TenantFigures(tenant))
                what = table[prefix]
                setattr(figures, what, getattr(figures, what) + int(text(raw_value)))
    default = found[DEFAULT_TENANT]
    others = [f for f in found.values() if f.tenant != DEFAULT_TENANT]
    default.running = max(0, running - sum(f.running for f in others))
    default.claimed = max(0, claimed - sum(f.claimed for f in others))
    default.waited_ms = max(0, waited - sum(f.waited_ms for f in others))
    return [default, *sorted(others, key=lambda f: f.tenant)]


def ask_claims(pipe: Pipeline, stats_keys: list[str], tenant: str) -> None:
    """Queue the read of ``tenant``'s claims in ``stats_keys`` (all of each hash for
    ``default``, whose claims are the total less the other tenants')."""
    for key in stats_keys:
        if tenant == DEFAULT_TENANT:
            pipe.hgetall(key)
        else:
            pipe.hget(key, f"claimed:{tenant}")


def tenant_claims(replies: list[Any], tenant: str) -> int:
    """``tenant``'s claims from :func:`ask_claims`' replies."""
    if tenant != DEFAULT_TENANT:
        return sum(int(text(c)) for c in replies if c is not None)
    total = 0
    for row in replies:
        for raw_field, raw_value in row.items():
            name = text(raw_field)
            if name == "claimed":
                total += int(text(raw_value))
            elif name.startswith("claimed:"):
                total -= int(text(raw_value))
    return max(0, total)
