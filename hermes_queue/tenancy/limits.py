"""Per-tenant limits (docs/tenants.md, "Limits"): how many runs a tenant may have running, how
many waiting for a worker, and how fast it may create them.

Three settings, each written like ``tenant_weights``: comma-separated ``tenant=value`` pairs,
where ``*`` stands for every tenant not named and 0 means "no limit":

- ``tenant_max_running`` (``acme=8,*=4``): runs of the tenant running at once; the claim script
  leaves a run of a tenant at its limit queued (``runs/lua/claim.lua``);
- ``tenant_max_ready`` (``acme=200,*=50``): runs of the tenant waiting for a worker; a
  run-creating request past it answers 429 ``queue_full`` (``api/turns/backpressure.py``);
- ``tenant_max_rate`` (``acme=5/s,*=100/m``): runs the tenant may create, per second (``/s``,
  or a bare number) or per minute (``/m``), with a burst of one second's worth (at least 1).

``*`` never covers the operator's tenant ``default``: the operator's own runs are limited only
where ``default`` is named, and never in running turns (``default`` is not counted there: a
single-tenant deployment's claim does exactly what it did before tenants).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

from hermes_queue.tenancy.keys import DEFAULT_TENANT, tenant_problem

ANY_TENANT = "*"
MAX_LIMIT = 1_000_000


class LimitError(ValueError):
    """A limits setting that cannot be used; the message names the setting and the entry."""


def _count(value: str) -> float:
    number = int(value)
    if not 0 <= number <= MAX_LIMIT:
        raise ValueError
    return float(number)


def _rate(value: str) -> float:
    """Runs per second from ``5``, ``5/s`` or ``300/m``."""
    amount, _, unit = value.partition("/")
    per = {"": 1.0, "s": 1.0, "m": 60.0}[unit.strip()]
    rate = float(amount) / per
    if not 0 <= rate <= MAX_LIMIT or math.isnan(rate):
        raise ValueError
    return rate


_EXPECTED = {
    "tenant_max_running": "a whole number from 0 (no limit) up to 1000000",
    "tenant_max_ready": "a whole number from 0 (no limit) up to 1000000",
    "tenant_max_rate": "runs per second (5 or 5/s) or per minute (300/m), 0 for no limit",
}


def _parse(setting: str, text: str, read: Callable[[str], float]) -> dict[str, float]:
    """``setting``'s pairs: tenant (or ``*``) -> value; raises :class:`LimitError`."""
    limits: dict[str, float] = {}
    for number, pair in enumerate((p.strip() for p in text.split(",")), start=1):
        if not pair:
            continue
        tenant, sep, value = (part.strip() for part in pair.partition("="))
        where = f"{setting} (HERMES_QUEUE_{setting.upper()}) entry {number} {pair[:60]!r}"
        if not sep:
            raise LimitError(f"{where}: no '=' between tenant and limit")
        if tenant != ANY_TENANT and (problem := tenant_problem(tenant)) is not None:
            raise LimitError(f"{where}: {problem} (or '*' for every other tenant)")
        if tenant in limits:
            raise LimitError(f"{where}: {tenant!r} named twice")
        if setting == "tenant_max_running" and tenant == DEFAULT_TENANT:
            raise LimitError(
                f"{where}: the operator's tenant 'default' is not limited in running turns "
                "(worker_concurrency bounds them)"
            )
        try:
            limits[tenant] = read(value)
        except (ValueError, KeyError):
            raise LimitError(f"{where}: {value[:20]!r} is not {_EXPECTED[setting]}") from None
    return limits


@dataclass(frozen=True)
class TenantLimits:
    """The three limits read; :meth:`running`, :meth:`ready`, :meth:`rate` answer 0 for none."""

    running_by: dict[str, float]
    ready_by: dict[str, float]
    rate_by: dict[str, float]

    @staticmethod
    def _of(table: dict[str, float], tenant: str) -> float:
        if tenant in table:
            return table[tenant]
        return 0.0 if tenant == DEFAULT_TENANT else table.get(ANY_TENANT, 0.0)

    def running(self, tenant: str) -> int:
        return int(self._of(self.running_by, tenant))

    def ready(self, tenant: str) -> int:
        return int(self._of(self.ready_by, tenant))

    def rate(self, tenant: str) -> float:
        """Runs per second the tenant may create (0: no limit)."""
        return self._of(self.rate_by, tenant)

    @property
    def any_running(self) -> bool:
        return any(self.running_by.values())

    @property
    def running_spec(self) -> str:
        """The running limits as the claim script reads them: ``,acme=8,*=4,`` (a tenant's
        entry, else ``*``'s; '' when none is set, and the claim checks nothing)."""
        if not self.any_running:
            return ""
        return "," + "".join(f"{t}={int(n)}," for t, n in sorted(self.running_by.items()))

    def describe(self, tenant: str) -> dict[str, float | int]:
        """The tenant's limits as ``/v1/queue`` shows them (0: none)."""
        return {
            "running": self.running(tenant),
            "ready": self.ready(tenant),
            "rate_per_second": self.rate(tenant),
        }


@functools.cache
def tenant_limits(running: str = "", ready: str = "", rate: str = "") -> TenantLimits:
    """The settings ``tenant_max_running``, ``tenant_max_ready`` and ``tenant_max_rate``
    read; raises :class:`LimitError` naming the setting and the entry."""
    return TenantLimits(
        _parse("tenant_max_running", running, _count),
        _parse("tenant_max_ready", ready, _count),
        _parse("tenant_max_rate", rate, _rate),
    )


def rate_burst(per_second: float) -> int:
    """A rate limit's bucket: one second's worth of runs, at least one."""
    return max(1, math.floor(per_second))


NO_LIMITS = TenantLimits({}, {}, {})
"""No tenant limited (no limits setting set)."""
