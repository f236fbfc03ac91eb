from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from hermes_queue.cli import main
from tests.conftest import require_hermes


def test_migrate_applies_then_reports_up_to_date(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HERMES_QUEUE_STORE_URL", f"sqlite:///{tmp_path}/cli.db")
    runner = CliRunner()
    first = runner.invoke(main, ["migrate"])
    assert first.exit_code == 0, first.output
    assert first.output.startswith("applied migrations 1")
    second = runner.invoke(main, ["migrate"])
    assert second.exit_code == 0 and "up to date" in second.output


def test_bad_setting_is_one_clear_line_and_exit_2(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HERMES_QUEUE_PORTT", "1")
    result = CliRunner().invoke(main, ["migrate"])
    assert result.exit_code == 2
    assert result.output == "error: unknown setting HERMES_QUEUE_PORTT\n"


def test_an_unforeseen_failure_is_one_line_unless_debugging(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from hermes_queue.cli import ops

    def broken(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("boom at redis://:hunter2secret@db:6379/0")

    monkeypatch.setattr(ops, "status", broken)
    monkeypatch.setattr(ops, "warn_if_nothing_here", lambda _deployment: None)
    plain = CliRunner().invoke(main, ["status"])
    assert plain.exit_code == 1
    assert plain.stderr == (
        "error: RuntimeError: boom at redis://:***@db:6379/0 "
        "(hermes-queue --debug … shows the traceback)\n"
    )
    debug = CliRunner().invoke(main, ["--debug", "status"])
    assert debug.exit_code == 1
    assert debug.stderr.startswith("Traceback (most recent call last):")
    assert debug.stderr.endswith("error: RuntimeError: boom at redis://:***@db:6379/0\n")
    assert "hunter2secret" not in debug.output
    monkeypatch.setenv("HERMES_QUEUE_LOG_LEVEL", "debug")  # the log level asks for it too
    assert "Traceback" in CliRunner().invoke(main, ["status"]).output


def test_migrate_reports_an_unreachable_database(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HERMES_QUEUE_STORE_URL", "postgresql://nobody@127.0.0.1:1/none")
    result = CliRunner().invoke(main, ["migrate"])
    assert result.exit_code == 1 and "migration failed" in result.output


def test_config_check_names_providers_without_printing_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "HERMES_QUEUE_PROVIDERS",
        '{"good": {"base_url": "http://127.0.0.1:1/v1", "api_key_env": "GOOD_KEY"},'
        ' "bad": {"base_url": "http://127.0.0.1:2/v1", "api_key_env": "MISSING_KEY"}}',
    )
    monkeypatch.setenv("GOOD_KEY", "sk-very-secret-value")
    monkeypatch.delenv("MISSING_KEY", raising=False)
    result = CliRunner().invoke(main, ["config", "check"])
    assert result.exit_code == 1
    assert "provider good: credentials found (GOOD_KEY)" in result.output
    assert "provider bad: NO CREDENTIALS" in result.output
    assert "sk-very-secret-value" not in result.output


def test_config_check_says_whether_the_hermes_backend_can_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from importlib.metadata import version

    require_hermes()
    monkeypatch.setenv("HERMES_QUEUE_AGENT_BACKEND", "hermes")
    result = CliRunner().invoke(main, ["config", "check"])
    assert result.exit_code == 0, result.output
    assert f"hermes-agent {version('hermes-agent')} installed" in result.output
