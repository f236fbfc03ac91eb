"""The clock by which a worker judges, without asking Redis, that its attempt surely still
holds a run (``LeaseKeeper.surely_held``): two clocks at once, so that no way a process can be
paused (a suspended host, a paused virtual machine, a restored snapshot) makes a lapsed lease
look held."""

from __future__ import annotations

import time
from dataclasses import dataclass

_BOOTTIME: int | None = getattr(time, "CLOCK_BOOTTIME", None)


@dataclass(frozen=True)
class Instant:
    """A moment by two clocks, for ``surely_held``: a lease counts as held only while both
    say it has not lapsed. Linux's boot-time clock, unlike the monotonic one, keeps counting
    while the machine is suspended (elsewhere the monotonic clock stands in); the wall clock,
    corrected from outside, also moves for a virtual machine that was paused or a process
    restored from a snapshot, which the first may not count."""

    boot: float
    wall: float

    def earlier(self, seconds: float) -> Instant:
        return Instant(self.boot - seconds, self.wall - seconds)

    def within(self, seconds: float) -> bool:
        """Whether less than ``seconds`` have passed since this moment, by both clocks."""
        now = lease_clock()
        return now.boot < self.boot + seconds and now.wall < self.wall + seconds


def lease_clock() -> Instant:
    """Now, as ``surely_held`` counts."""
    boot = time.clock_gettime(_BOOTTIME) if _BOOTTIME is not None else time.monotonic()
    return Instant(boot, time.time())
