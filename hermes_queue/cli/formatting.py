"""How the CLI's tables show values: compact tables, durations and times, for terminals as
narrow as a watch needs (``status``, ``runs``, ``webhooks``)."""

from __future__ import annotations

from datetime import datetime

from rich import box
from rich.table import Table


def table(*columns: str, title: str | None = None) -> Table:
    """A compact table (no outer border, so a watch fits 24 lines); ``name>`` right-aligns."""
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    for c in columns:
        table.add_column(c.rstrip(">"), justify="right" if c.endswith(">") else "left")
    return table


def age(seconds: float) -> str:
    """Compact durations for narrow terminals: 0.4s, 12s, 3m05s, 27h07m."""
    s = int(seconds)
    if s < 60:
        return f"{seconds:.1f}s" if seconds < 10 else f"{s}s"
    return f"{s // 60}m{s % 60:02d}s" if s < 3600 else f"{s // 3600}h{s % 3600 // 60:02d}m"


def clock(ts: float) -> str:
    return datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S") if ts else "-"
