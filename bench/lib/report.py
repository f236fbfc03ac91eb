"""Figures and their output: percentiles and medians, CPU and memory of processes, the printed
table and the machine-readable ``BENCH_JSON`` line."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); NaN for no data."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def summary_ms(values_s: Sequence[float]) -> dict[str, float]:
    """p50/p95/p99/max of seconds, in milliseconds (rounded to 0.01 ms)."""
    return {
        "n": len(values_s),
        **{
            name: round(percentile(values_s, q) * 1000, 2)
            for name, q in (("p50", 50), ("p95", 95), ("p99", 99), ("max", 100))
        },
    }


def median(values: Sequence[float]) -> float:
    """The median of the values that are numbers (NaN left out), rounded to 0.01; NaN if none."""
    numbers = [v for v in values if v == v]
    return round(statistics.median(numbers), 2) if numbers else float("nan")


def rss_mib(proc: psutil.Process) -> float:
    return round(float(proc.memory_info().rss) / 2**20, 1)


def cpu_s(proc: psutil.Process) -> float:
    """User + system CPU seconds of a process so far."""
    times = proc.cpu_times()
    return float(times.user + times.system)


def tree_cpu(proc: psutil.Process) -> float:
    """User + system CPU seconds of ``proc``, its reaped children and its live descendants."""
    try:
        times = proc.cpu_times()
        total = float(times.user + times.system + times.children_user + times.children_system)
        children = proc.children(recursive=True)
    except psutil.NoSuchProcess:
        return 0.0
    for child in children:
        with contextlib.suppress(psutil.NoSuchProcess):
            t = child.cpu_times()
            total += t.user + t.system
    return total


def print_table(title: str, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[str(c) for c in header], *[[_fmt(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    print(f"\n{title}")
    for index, row in enumerate(cells):
        print("  " + "  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))
        if index == 0:
            print("  " + "  ".join("-" * w for w in widths))


def _fmt(value: Any) -> str:
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def emit_json(benchmark: str, result: dict[str, Any]) -> None:
    """The machine-readable line: one JSON object, prefixed so it is easy to grep."""
    line = {"benchmark": benchmark, "python": platform.python_version(), **result}
    print("BENCH_JSON " + json.dumps(line, sort_keys=True), flush=True)


def machine_facts() -> dict[str, Any]:
    model = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    return {
        "nproc": os.cpu_count(),
        "mem_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "cpu": model,
        "python": platform.python_version(),
    }
