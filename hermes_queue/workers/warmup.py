"""A worker's warm-up, and whether it is done, for ``hermes-queue check --role worker``.

A worker warms its backend up (for Hermes: imports, TLS contexts, tool registry, one agent
construction) before it takes its first job, so the first turn it runs costs about what a warm
turn costs instead of paying all of that. A warm-up that fails is logged and reported by the
probe; the worker then takes jobs all the same (cold, as a worker without warm-up would), and a
warm-up that hangs is given up after ``WARM_UP_LIMIT_S``.

The probe runs in another process (a container's exec probe), so each worker process states
its warm-up in a small file of its own: ``<temp dir>/hermes-queue-<namespace>/worker-<pid>.json``
holding ``warming``, ``ready`` or ``failed`` (with the error, which names no secret: it is the
exception's class and the backend's own message, already scrubbed of the provider key). The
file goes away when the worker stops; one left by a process that died is ignored (its pid is
gone).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

log = logging.getLogger(__name__)

WARMING, READY, FAILED = "warming", "ready", "failed"
WARM_UP_LIMIT_S = 120.0


@runtime_checkable
class WarmsUp(Protocol):
    """A backend with set-up worth doing before the first turn."""

    async def warm_up(self) -> None: ...


async def warm_up(backend: object, state: WarmUpState, limit_s: float = WARM_UP_LIMIT_S) -> bool:
    """Warm ``backend`` up (if it has anything to warm), recording the outcome in ``state``;
    False when it failed or timed out."""
    state.set(WARMING)
    if isinstance(backend, WarmsUp):
        try:
            async with asyncio.timeout(limit_s):
                await backend.warm_up()
        except Exception as exc:
            reason = f"timed out after {limit_s:.0f}s" if isinstance(exc, TimeoutError) else ""
            error = reason or f"{type(exc).__name__}: {exc}"
            log.error("worker warm-up failed (%s); taking jobs cold", error)
            state.set(FAILED, error[:500])
            return False
    state.set(READY)
    return True


def state_dir(namespace: str) -> Path:
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", namespace)
    return Path(tempfile.gettempdir()) / f"hermes-queue-{safe}"


class WarmUpState:
    """This process's entry: written at each step of the warm-up, removed at shutdown."""

    def __init__(self, namespace: str, pid: int | None = None) -> None:
        self.pid = pid or os.getpid()
        self.path = state_dir(namespace) / f"worker-{self.pid}.json"

    def set(self, state: str, error: str = "") -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"pid": self.pid, "state": state, "error": error}))
        tmp.replace(self.path)  # atomic: a probe never reads half a file

    def clear(self) -> None:
        with contextlib.suppress(OSError):
            self.path.unlink()


@dataclass(frozen=True)
class WarmUpReport:
    ok: bool
    detail: str


def probe(namespace: str) -> WarmUpReport:
    """Ready when a live worker process of this namespace on this host finished its warm-up;
    a failed warm-up is reported with its error, one still running as such."""
    states: dict[str, list[dict[str, str]]] = {WARMING: [], READY: [], FAILED: []}
    folder = state_dir(namespace)
    for path in sorted(folder.glob("worker-*.json")) if folder.is_dir() else []:
        try:
            entry = json.loads(path.read_text())
            pid = int(entry["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if _alive(pid) and entry.get("state") in states:
            states[entry["state"]].append(entry)
    if states[FAILED]:
        first = states[FAILED][0]
        return WarmUpReport(False, f"warm-up failed in pid {first['pid']}: {first['error']}")
    if states[READY]:
        pids = ", ".join(str(e["pid"]) for e in states[READY])
        return WarmUpReport(True, f"warmed up (pid {pids})")
    if states[WARMING]:
        return WarmUpReport(False, "still warming up")
    return WarmUpReport(False, "no worker process of this namespace runs on this host")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True
