"""Schedules as upstream's cron module accepts them, and the ticks they produce.

The accepted forms were settled by running upstream's own parser (hermes-agent 0.19,
``cron.jobs.parse_schedule``) on candidate inputs; ``tests/schedules/test_parsing.py`` keeps
the two in agreement. In the order they are tried:

- ``every <n><unit>``: a recurring interval (units m/min/mins/minute/minutes, h/hr/hrs/hour/
  hours, d/day/days, any case, optional space): ``every 2h`` is shown as ``every 120m``;
- five or more space-separated fields whose first five use only digits and ``* , - /``: a cron
  expression, validated by croniter (a sixth field is seconds, a seventh the year);
- anything containing ``T`` or starting with ``YYYY-MM-DD``: a one-shot ISO time (``Z`` allowed;
  a time without an offset is read in ``jobs_timezone``);
- ``<n><unit>`` alone: one shot, that long from now.

Two inputs upstream's parser lets through are refused here because they cannot be scheduled:
``every 0m`` (an interval of nothing) and a cron expression that never fires (``0 0 31 2 *``;
upstream fails creating such a job with a 500).

Ticks are instants (epoch seconds). An interval ticks every period from its first tick (the
time it was set plus one period); a cron expression ticks where croniter says, in
``jobs_timezone``; a one-shot ticks once.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, tzinfo
from typing import Any, Literal

from croniter import croniter

Kind = Literal["once", "interval", "cron"]

# Upstream lets a one-shot be created (or resumed) up to this long after its time.
ONESHOT_GRACE_SECONDS = 120
# A catch-up after a long outage counts the cron ticks it skipped up to this many.
MAX_COUNTED_MISSES = 10_000

_UNIT_MINUTES = {"m": 1, "h": 60, "d": 1440}
_DURATION = re.compile(r"(\d+)\s*(m|mins?|minutes?|h|hrs?|hours?|d|days?)")
_CRON_FIELD = re.compile(r"[\d*,/-]+")
_DATE_PREFIX = re.compile(r"\d{4}-\d{2}-\d{2}")


class ScheduleError(ValueError):
    """The schedule text is not one of the accepted forms; the message says which are."""


@dataclass(frozen=True)
class Schedule:
    kind: Kind
    display: str
    minutes: int | None = None
    expr: str | None = None
    run_at: float | None = None

    def to_stored(self) -> dict[str, Any]:
        """The form kept in the store (``run_at`` as epoch seconds)."""
        stored: dict[str, Any] = {"kind": self.kind, "display": self.display}
        for name in ("minutes", "expr", "run_at"):
            if getattr(self, name) is not None:
                stored[name] = getattr(self, name)
        return stored

    @classmethod
    def from_stored(cls, data: dict[str, Any]) -> Schedule:
        run_at = data.get("run_at")
        return cls(
            kind=data["kind"],
            display=str(data.get("display") or ""),
            minutes=data.get("minutes"),
            expr=data.get("expr"),
            run_at=float(run_at) if run_at is not None else None,
        )

    def to_json(self, tz: tzinfo) -> dict[str, Any]:
        """Upstream's ``schedule`` object (``run_at`` as an ISO time)."""
        shown = self.to_stored()
        if self.run_at is not None:
            shown["run_at"] = datetime.fromtimestamp(self.run_at, tz).isoformat()
        return shown


def parse_duration(text: str) -> int:
    """``30m`` → 30, ``2 hours`` → 120, ``1d`` → 1440 (minutes)."""
    cleaned = text.strip().lower()
    match = _DURATION.fullmatch(cleaned)
    if match is None:
        raise ScheduleError(f"Invalid duration: '{cleaned}'. Use format like '30m', '2h', or '1d'")
    return int(match.group(1)) * _UNIT_MINUTES[match.group(2)[0]]


def _usage(original: str) -> ScheduleError:
    return ScheduleError(
        f"Invalid schedule '{original}'. Use: a duration like '30m', '2h' or '1d' (one-shot); "
        "an interval like 'every 30m' or 'every 2h' (recurring); a cron expression like "
        "'0 9 * * *'; or a timestamp like '2026-02-03T14:00:00' (one-shot at that time)"
    )


def _looks_like_cron(fields: list[str]) -> bool:
    return len(fields) >= 5 and all(_CRON_FIELD.fullmatch(f) for f in fields[:5])


def parse_schedule(text: str, *, now: float, tz: tzinfo) -> Schedule:
    """Parse one schedule; raises :class:`ScheduleError` with a message fit for the client."""
    original = text.strip()
    if original.lower().startswith("every "):
        minutes = parse_duration(original[6:])
        if minutes < 1:
            raise ScheduleError(f"Invalid schedule '{original}': an interval must be 1m or more")
        return Schedule("interval", f"every {minutes}m", minutes=minutes)
    if _looks_like_cron(original.split()):
        try:
            croniter(original)
        except Exception as exc:
            raise ScheduleError(f"Invalid cron expression '{original}': {exc}") from None
        schedule = Schedule("cron", original, expr=original)
        if cron_after(original, now, tz) is None:
            raise ScheduleError(f"Invalid cron expression '{original}': it never fires")
        return schedule
    if "T" in original or _DATE_PREFIX.match(original):
        try:
            moment = datetime.fromisoformat(original.replace("Z", "+00:00"))
        except ValueError as exc:
            raise ScheduleError(f"Invalid timestamp '{original}': {exc}") from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=tz)
        display = f"once at {moment.strftime('%Y-%m-%d %H:%M')}"
        return Schedule("once", display, run_at=moment.timestamp())
    try:
        minutes = parse_duration(original)
    except ScheduleError:
        raise _usage(original) from None
    return Schedule("once", f"once in {original}", run_at=now + minutes * 60)


def _cron_ticks(expr: str, after: float, tz: tzinfo) -> Iterator[float]:
    """The ticks of ``expr`` after ``after``, in order. croniter walks local wall-clock time
    (it mis-steps across a DST change when given zone-aware datetimes), and each wall time
    becomes an instant in ``tz``: a time the clocks skip fires just after the change, one they
    repeat fires once."""
    wall = datetime.fromtimestamp(after, tz).replace(tzinfo=None)
    walker = croniter(expr, wall)
    last = after
    while True:
        moment = walker.get_next(datetime).replace(tzinfo=tz).timestamp()
        if moment > last:
            last = moment
            yield moment


def cron_after(expr: str, instant: float, tz: tzinfo) -> float | None:
    """The first tick of ``expr`` strictly after ``instant``; None if it never comes."""
    try:
        return next(_cron_ticks(expr, instant, tz))
    except Exception:  # croniter's "failed to find next date" (e.g. February 31st)
        return None


def first_tick(schedule: Schedule, now: float, tz: tzinfo) -> float | None:
    """When a schedule set (or resumed) at ``now`` fires first; None for a one-shot whose time
    passed more than the grace period ago."""
    if schedule.kind == "once":
        assert schedule.run_at is not None
        return schedule.run_at if schedule.run_at >= now - ONESHOT_GRACE_SECONDS else None
    if schedule.kind == "interval":
        assert schedule.minutes is not None
        return now + schedule.minutes * 60
    assert schedule.expr is not None
    return cron_after(schedule.expr, now, tz)


def next_after(schedule: Schedule, tick: float, now: float, tz: tzinfo) -> tuple[float | None, int]:
    """After firing ``tick`` at ``now``: the next tick still ahead of ``now`` (None: no more)
    and how many ticks in between are skipped (a catch-up fires once, not once per tick)."""
    if schedule.kind == "once":
        return None, 0
    if schedule.kind == "interval":
        assert schedule.minutes is not None
        period = schedule.minutes * 60
        steps = max(1, math.floor((now - tick) / period) + 1)
        return tick + steps * period, steps - 1
    assert schedule.expr is not None
    try:
        for missed, upcoming in enumerate(_cron_ticks(schedule.expr, tick, tz)):
            if upcoming > now:
                return upcoming, missed
            if missed + 1 >= MAX_COUNTED_MISSES:
                break
    except Exception:  # no later tick exists
        return None, 0
    return cron_after(schedule.expr, now, tz), MAX_COUNTED_MISSES
