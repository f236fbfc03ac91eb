"""``hermes-queue status``'s table of the queue per tenant (the ``tenants`` of ``GET
/v1/queue``: ``queueview/tenants.py``), shown once the deployment has more than one tenant or a
limit; and the tenants the CLI knows of (the configured ones, their limits)."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.table import Table
from rich.text import Text

from hermes_queue.cli.formatting import age
from hermes_queue.config import Settings
from hermes_queue.queueview.tenants import TenantView


def tenant_view(settings: Settings) -> TenantView:
    """The configured tenants and limits, as the API counts them."""
    known = frozenset(key.tenant for key in settings.api.tenant_keys())
    return TenantView(known, settings.runs.limits)


def render_tenants(q: dict[str, Any]) -> Table | None:
    """One row per tenant: ready (held of them), running, claimed, the mean wait of those and
    refused over the throughput window, and its limits; None with a single tenant and no
    limits."""
    rows = q.get("tenants", {}).get("data", [])
    if len(rows) <= 1 and not any(row.get("limits") for row in rows):
        return None
    table = Table(title="Tenants", title_justify="left", box=box.SIMPLE_HEAD)
    for name in ("tenant", "ready", "held", "running", "claimed", "wait", "refused", "limits"):
        table.add_column(name, justify="left" if name in ("tenant", "limits") else "right")
    for row in rows:
        limits = row.get("limits") or {}
        named = (("run", "running"), ("ready", "ready"), ("rate/s", "rate_per_second"))
        shown = " ".join(f"{label} {limits[f]:g}" for label, f in named if limits.get(f))
        table.add_row(
            row["tenant"],
            str(row["ready"]),
            str(row["held"]),
            str(row["running"]),
            str(row["claimed"]),
            "-" if row.get("mean_wait_seconds") is None else age(row["mean_wait_seconds"]),
            Text(str(row["refused"]), style="red" if row["refused"] else ""),
            shown or "-",
        )
    return table
