"""The run model's wire values: clients, the dialects and the dashboard read them verbatim."""

from __future__ import annotations

from hermes_queue.runs.model import FailReason


def test_fail_reasons_keep_their_wire_values() -> None:
    assert {reason.value for reason in FailReason} == {
        "agent_error",
        "provider_auth",
        "lock_mismatch",
        "session_db_unavailable",
        "redis",
        "timeout",
        "internal",
        "worker_lost",
        "run_budget_exceeded",
    }
    assert f"{FailReason.PROVIDER_AUTH}" == "provider_auth"  # formatted as its value
