"""What ``bench/chaos.py`` reads from a fault's load and prints: per fault, runs accepted,
terminal and lost, readers' duplicate ids and unannounced losses, re-executed tools and
repeated model calls (from the workers' shared tool log), webhook deliveries expected, received,
missing and duplicated, and the table of them over the rounds.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from typing import Any

from bench.lib import report
from hermes_queue.agents.echo_tools import read_tool_log
from tests.support.load import Load, RunTrace, record_problems
from tests.support.polling import NeverHeld, eventually
from tests.support.webhook_receiver import Receiver

HEADER = [
    "fault",
    "rounds",
    "accepted",
    "terminal",
    "lost",
    "dup ids",
    "unannounced",
    "restart/gap/resume",
    "re-run tools",
    "repeated model calls",
    "max repeated steps per run",
    "to terminal s p50/max",
    "recovery s p50/max",
    "refused",
    "promoted/replica back s, drain s",
    "webhooks expected/received/missing",
]


async def webhooks(load: Load, receiver: Receiver, within: float) -> dict[str, int]:
    """Deliveries expected (runs whose record ended), received (their verified webhook-ids,
    waited for), missing, and webhook-ids received more than once."""
    ended = {
        t.run_id
        for t in load.accepted
        if t.record.get("status") in ("completed", "failed", "cancelled")
    }

    def got() -> dict[str, Counter[str]]:
        seen: dict[str, Counter[str]] = {}
        for r in receiver.received:
            run_id = str(r.body.get("run_id"))
            if r.verified and run_id in ended:
                seen.setdefault(run_id, Counter())[r.webhook_id] += 1
        return seen

    with contextlib.suppress(NeverHeld):
        await eventually(got, lambda seen: len(seen) >= len(ended), within=within)
    seen = got()
    return {
        "webhooks_expected": len(ended),
        "webhooks_received": len(seen),
        "webhooks_missing": len(ended - set(seen)),
        "webhooks_duplicates": sum(n - 1 for ids in seen.values() for n in ids.values()),
        "webhook_ids_per_run_max": max((len(ids) for ids in seen.values()), default=0),
    }


def repeated(tool_log: str, runs: set[str]) -> dict[str, int]:
    """Tool calls started more than once (read-only tools aside: none here) and model calls
    made more than once, over ``runs``, from the workers' shared tool log."""
    starts: Counter[tuple[str, str]] = Counter()
    models: Counter[tuple[str, str]] = Counter()
    for line in read_tool_log(tool_log):
        if line["run_id"] not in runs:
            continue
        if line["phase"] == "start":
            starts[(line["run_id"], line["call_id"])] += 1
        elif line["phase"] == "model":
            models[(line["run_id"], line["call_id"])] += 1
    per_run: Counter[str] = Counter()
    for (run_id, _), n in [*starts.items(), *models.items()]:
        per_run[run_id] += n - 1
    return {
        "rerun_tools": sum(n - 1 for n in starts.values() if n > 1),
        "repeated_model_calls": sum(n - 1 for n in models.values() if n > 1),
        # Steps run twice in one run: durable steps promise at most the one in flight.
        "max_repeated_per_run": max(per_run.values(), default=0),
    }


def summarise(load: Load, fault_at: float, repaired_at: float) -> dict[str, Any]:
    traces = load.accepted
    caught = [t for t in traces if t.created_at < fault_at and (t.ended_at or 1e18) > fault_at]
    to_terminal = [round(t.ended_at - fault_at, 2) for t in caught if t.ended_at is not None]
    # Served again: the first event of a run created after the fault (one that completed).
    after = [
        t.first_at - fault_at
        for t in traces
        if t.created_at > fault_at and t.first_at is not None and completed(t)
    ]
    return {
        "accepted": len(traces),
        "terminal": sum(1 for t in traces if t.end == "terminal"),
        "error_frames": sum(1 for t in traces if t.end == "error"),
        "lost": sum(1 for t in traces if record_problems(t)),
        "duplicated_ids": sum(1 for t in traces if t.duplicates()),
        "unannounced": sum(1 for t in traces if any("unannounced" in p for p in t.problems())),
        "restarted_or_gap": sum(1 for t in traces if t.warned()),
        "caught_in_flight": len(caught),
        "to_terminal_s": to_terminal,
        "recovery_s": round(min(after), 2) if after else None,
        "repair_s": round(repaired_at - fault_at, 2),
        "refused": dict(load.refused),
        "hangs": load.hangs,
    }


def completed(trace: RunTrace) -> bool:
    return (trace.terminal or {}).get("event") == "run.completed"


def table(results: dict[str, list[dict[str, Any]]]) -> list[list[Any]]:
    rows = []
    for fault, rounds in results.items():
        terminal_s = [s for r in rounds for s in r["to_terminal_s"]]
        recovery = [r["recovery_s"] for r in rounds if r["recovery_s"] is not None]
        refused: Counter[str] = Counter()
        for r in rounds:
            refused.update(r["refused"])
        rows.append(
            [
                fault,
                len(rounds),
                sum(r["accepted"] for r in rounds),
                sum(r["terminal"] for r in rounds),
                sum(r["lost"] for r in rounds),
                sum(r["duplicated_ids"] for r in rounds),
                sum(r["unannounced"] for r in rounds),
                sum(r["restarted_or_gap"] for r in rounds),
                sum(r["rerun_tools"] for r in rounds),
                sum(r["repeated_model_calls"] for r in rounds),
                max(r["max_repeated_per_run"] for r in rounds),
                f"{report.percentile(terminal_s, 50):.1f}/{max(terminal_s, default=0):.1f}",
                f"{report.percentile(recovery, 50):.1f}/{max(recovery, default=0):.1f}",
                ", ".join(f"{k}: {v}" for k, v in sorted(refused.items())) or "-",
                _milestones(rounds),
                "{}/{}/{} ({} dup)".format(
                    sum(r["webhooks_expected"] for r in rounds),
                    sum(r["webhooks_received"] for r in rounds),
                    sum(r["webhooks_missing"] for r in rounds),
                    sum(r["webhooks_duplicates"] for r in rounds),
                ),
            ]
        )
    return rows


def _milestones(rounds: list[dict[str, Any]]) -> str:
    """The redis fault's promotion / replica-back times per round, seconds after the kill;
    the drain fault's time for the worker to exit."""
    marks = [f"{r['promoted_s']}/{r['replica_back_s']}" for r in rounds if "promoted_s" in r]
    marks += [f"drain {r['drain_s']}" for r in rounds if "drain_s" in r]
    return " ".join(marks) or "-"
