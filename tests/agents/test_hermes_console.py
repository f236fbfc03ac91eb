"""What Hermes prints for a console becomes worker log records, never raw stdout lines."""

from __future__ import annotations

import logging

import pytest

from hermes_queue.agents.base import ProviderAuthError
from tests.agents.test_hermes import KEY, make_backend, run
from tests.conftest import require_hermes
from tests.support.fake_llm import FakeLLM


async def test_a_failed_call_is_logged_as_a_record_not_printed(
    hermes_home: str, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    require_hermes()
    caplog.set_level(logging.INFO, logger="hermes_queue.agents.hermes.console")
    # The provider rejects our key: Hermes reports the 401 on its console.
    async with FakeLLM(expected_key="some-other-key") as fake:
        backend = make_backend(fake, hermes_home)
        try:
            with pytest.raises(ProviderAuthError):
                await run(backend, "hi")
        finally:
            await backend.aclose()
    printed = capsys.readouterr().out
    assert "API call failed" not in printed and "401" not in printed
    console = [r.getMessage() for r in caplog.records if r.name.endswith("hermes.console")]
    assert any("API call failed" in line and "401" in line for line in console), console
    assert not any(KEY in line for line in console)
