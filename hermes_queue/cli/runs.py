"""``hermes-queue runs …``: the runs waiting and running, one run's details, and acting on one
(stop it, answer its approval request).

Run ids are what an operator copies from here into the next command, so they are never cut:
the id column comes first and keeps its full width, no cell wraps, and in a narrow terminal the
columns that fit least (worker, session) are left out, named under the table; ``--wide``
prints every column whatever the terminal's width.

Answers to approval requests take the path ``POST /v1/runs/{id}/approval`` takes
(``runs/approvals.py``: the same script, the same choices and aliases, the same refusals), so a
run cannot tell which one answered it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from hermes_queue.cli.formatting import age, clock, table
from hermes_queue.cli.ops import OpsError, read, read_snapshot
from hermes_queue.config import Settings
from hermes_queue.events import APPROVAL_CHOICES
from hermes_queue.runs.approvals import normalize_choice
from hermes_queue.runs.model import RunRecord, RunStatus
from hermes_queue.runs.repository import RunRepository

# Wide enough for any row on one line (``--wide``); rich never pads a table to it.
WIDE = 1_000


def runs_of(redis: Any, settings: Settings) -> RunRepository:
    return RunRepository(redis, settings.redis.keys, settings.runs)


def _console(wide: bool) -> Console:
    return Console(width=WIDE) if wide else Console()


@dataclass(frozen=True)
class Column:
    name: str
    cell: Callable[[dict[str, Any]], str]
    right: bool = False
    # Left out, last ones first, when the table would not fit the terminal (``--wide``: never).
    optional: bool = False


def _fitting(columns: list[Column], rows: list[list[str]], width: int) -> list[int]:
    """The indexes of the columns shown: all that fit in ``width``, the optional ones left out
    from the last while the table is too wide. The id column is never cut nor wrapped."""
    widths = [max([len(c.name), *(len(r[i]) for r in rows)]) + 3 for i, c in enumerate(columns)]
    shown = list(range(len(columns)))
    for i in reversed(range(len(columns))):
        if sum(widths[j] for j in shown) + 2 <= width:
            break
        if columns[i].optional:
            shown.remove(i)
    return shown


def _runs_table(
    title: str, columns: list[Column], runs: list[dict[str, Any]], out: Console
) -> Table:
    rows = [[column.cell(run) for column in columns] for run in runs]
    shown = _fitting(columns, rows, out.width)
    left_out = [columns[i].name for i in range(len(columns)) if i not in shown]
    result = table(title=title)
    if left_out:
        result.caption, result.caption_justify = f"(--wide adds {', '.join(left_out)})", "left"
    for i in shown:
        widest = max([len(columns[i].name), *(len(r[i]) for r in rows)])
        result.add_column(
            columns[i].name,
            justify="right" if columns[i].right else "left",
            no_wrap=True,
            min_width=widest if i == 0 else None,  # the id: never cut
        )
    for row in rows:  # Text: ids and names are data, never markup or emoji codes (":1234:")
        result.add_row(*(Text(row[i]) for i in shown))
    return result


QUEUED = [
    Column("run", lambda r: str(r["run_id"])),
    Column("#", lambda r: str(r["position"]), right=True),
    Column("waiting", lambda r: age(r["age_seconds"]), right=True),
    Column("attempt", lambda r: str(r["attempt"]), right=True),
    Column("session", lambda r: str(r["session_id"] or "-"), optional=True),
]
IN_FLIGHT = [
    Column("run", lambda r: str(r["run_id"])),
    Column("status", lambda r: str(r["status"] or "-")),
    Column("attempt", lambda r: str(r["attempt"]), right=True),
    Column("age", lambda r: age(r["age_seconds"]), right=True),
    Column("worker", lambda r: str(r["worker"] or "-"), optional=True),
    Column("session", lambda r: str(r["session_id"] or "-"), optional=True),
]


def runs_list(settings: Settings, *, limit: int, offset: int, as_json: bool, wide: bool) -> None:
    """The ready runs (in the order workers take them: position 1 is next) and the in-flight
    ones (soonest lease deadline first, as ``/v1/queue``), one page of each."""
    snap = read(settings, lambda r: read_snapshot(r, settings, limit, offset)).to_json()
    pages = {"queued": snap["queued"], "in_flight": snap["in_flight"]}
    if as_json:
        click.echo(json.dumps(pages, indent=2))
        return
    out = _console(wide)
    queued, in_flight = pages["queued"], pages["in_flight"]
    title = f"Queued (ready, next first): {queued['total']}"
    out.print(_runs_table(title, QUEUED, queued["data"], out))
    out.print(_runs_table(f"In flight: {in_flight['total']}", IN_FLIGHT, in_flight["data"], out))
    shown = max(len(pages["queued"]["data"]), len(pages["in_flight"]["data"]))
    total = max(pages["queued"]["total"], pages["in_flight"]["total"])
    if shown and total > offset + shown:
        out.print(f"showing {offset + 1}–{offset + shown}; next page: --offset {offset + shown}")


def _not_found(run_id: str) -> OpsError:
    return OpsError(f"run {run_id} not found (unknown, or ended more than retention_seconds ago)")


def run_details(record: RunRecord) -> dict[str, Any]:
    """The ``hermes.run`` object plus what an operator debugging a run needs: which worker
    holds (or held) it, and why it failed, which ``hermes.run`` leaves out unless failed. A
    pending approval request is in it as ``approval`` (``hermes.run`` shows it too)."""
    return {**record.to_status(), "worker": record.worker or None, "reason": record.reason}


def _approval_rows(run_id: str, approval: dict[str, Any]) -> dict[str, str]:
    choices = approval.get("choices") or list(APPROVAL_CHOICES)
    return {
        "approval": f"waiting for an answer (request {approval.get('request_id') or '-'})",
        "command": str(approval.get("command") or "-"),
        "description": str(approval.get("description") or "-"),
        "answer with": f"hermes-queue runs approve {run_id} {'|'.join(choices)}",
    }


def runs_show(settings: Settings, run_id: str, *, as_json: bool) -> None:
    record = read(settings, lambda r: runs_of(r, settings).get(run_id))
    if record is None:
        raise _not_found(run_id)
    details = run_details(record)
    if as_json:
        click.echo(json.dumps(details, indent=2, ensure_ascii=False))
        return
    shown = {k: str(details.get(k) or "-") for k in ("run_id", "status", "session_id", "model")}
    shown |= {k: str(details.get(k) or "-") for k in ("attempt", "worker", "last_event")}
    for k in ("created_at", "updated_at"):
        shown[k] = f"{clock(details[k])} ({age(max(0.0, time.time() - details[k]))} ago)"
    shown |= {k: str(details[k]) for k in ("reason", "error") if details.get(k)}
    if details.get("approval"):
        shown |= _approval_rows(run_id, details["approval"])
    if "output" in details:
        # Message bodies stay off shared terminals and screenshots; --json has them.
        shown["output"] = f"{len(details['output'])} characters (--json shows it)"
        shown["usage"] = json.dumps(details.get("usage") or {})
    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")  # a long command wraps, never cut
    for name, value in shown.items():
        grid.add_row(Text(name, style="bold"), Text(value))
    Console().print(grid)


def runs_stop(settings: Settings, run_id: str) -> None:
    """Queued runs end ``cancelled`` at once; running ones go ``stopping`` until their worker
    ends the turn; finished ones are left alone (stop is idempotent, as the API's)."""
    outcome = read(settings, lambda r: runs_of(r, settings).request_stop(run_id))
    if not outcome.found:
        raise _not_found(run_id)
    now = outcome.status
    if now == RunStatus.STOPPING:
        click.echo(f"{run_id}: stopping (its worker ends the turn and marks it cancelled)")
    elif now in (RunStatus.COMPLETED, RunStatus.FAILED):
        click.echo(f"{run_id}: already {now}, nothing to stop")
    else:
        click.echo(f"{run_id}: {now}")


def runs_approve(
    settings: Settings, run_id: str, choice: str, *, request_id: str, resolve_all: bool
) -> None:
    """Answer a run's approval request as ``POST /v1/runs/{id}/approval`` does: the oldest
    pending one, the one named (``request_id``) or all of them (``resolve_all``)."""
    normalized = normalize_choice(choice)
    if normalized is None:
        raise OpsError(
            f"invalid approval choice {choice!r}; expected one of: {', '.join(APPROVAL_CHOICES)}",
        )
    outcome = read(
        settings,
        lambda r: runs_of(r, settings).approvals.answer(
            run_id, normalized, resolve_all=resolve_all, request_id=request_id
        ),
    )
    if outcome.verdict == "missing":
        raise _not_found(run_id)
    if outcome.verdict == "not_active":
        raise OpsError(f"no approval is pending for run {run_id}")
    if outcome.verdict == "not_pending":
        raise OpsError(f"approval request {request_id} is not pending for run {run_id}")
    answered = ", ".join(outcome.request_ids)
    click.echo(f"{run_id}: answered {normalized} (request {answered}); its worker goes on")
