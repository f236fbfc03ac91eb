"""The event loop a process runs on: uvloop by default where installed, asyncio on request."""

from __future__ import annotations

import asyncio
import gc
import importlib.util

import pytest

from hermes_queue import loops
from hermes_queue.config import ConfigError, Settings


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_auto_runs_on_uvloop_where_installed() -> None:
    assert importlib.util.find_spec("uvloop") is not None  # a dependency on this platform
    assert loops.resolve("auto") == "uvloop"
    assert loops.run(_loop_module(), "auto").startswith("uvloop")


def test_asyncio_on_request() -> None:
    assert loops.run(_loop_module(), "asyncio").startswith("asyncio")


def test_uvloop_asked_for_but_missing_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "uvloop" else real(name, *a)
    )
    assert loops.resolve("auto") == "asyncio"
    with pytest.raises(ConfigError, match="uvloop is not installed"):
        loops.resolve("uvloop")


def test_an_agent_thread_calling_asyncio_run_gets_a_standard_loop() -> None:
    """Only the process's main loop is uvloop: no global policy leaks into agent threads."""

    async def main() -> str:
        return await asyncio.to_thread(asyncio.run, _loop_module())

    assert loops.run(main(), "uvloop").startswith("asyncio")


def test_an_unknown_event_loop_setting_is_refused() -> None:
    with pytest.raises(ConfigError, match="event_loop must be one of"):
        Settings.of(event_loop="trio").validate()


def test_the_gc_is_tuned_while_the_process_runs_and_restored_after() -> None:
    before = gc.get_threshold()

    async def thresholds() -> tuple[int, ...]:
        return gc.get_threshold()

    assert loops.run(thresholds(), "asyncio") == loops.GC_THRESHOLDS != before
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
