"""The pure parts of webhooks: signatures (checked by ``standardwebhooks`` and by hand), the
schedule's decisions, the settings, and what a run event turns into."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from hermes_queue.config import ConfigError, Settings, load_settings, settings_env
from hermes_queue.config.webhook_config import EVENT_TYPES, Subscription, secret_key
from hermes_queue.runs.model import NewRun
from hermes_queue.runs.turn_request import TurnRequest
from hermes_queue.webhooks.attempt import Result, decide, retry_after
from hermes_queue.webhooks.messages import (
    RunEvent,
    deliveries,
    delivery_id,
    run_delivery_id,
    run_id_of,
)
from hermes_queue.webhooks.signing import Signer
from tests.support.webhook_receiver import new_secret

DELAYS = (5.0, 300.0, 1800.0)


def test_every_signature_verifies_with_the_reference_library_and_by_hand() -> None:
    old, new = new_secret(), new_secret()
    body = json.dumps({"type": "run.completed", "output": "héllo"}, ensure_ascii=False)
    now = int(time.time())
    headers = Signer([old, new]).headers("msg_abc", now, body)
    for secret in (old, new):
        assert Webhook(secret).verify(body.encode(), headers) == json.loads(body)
    with pytest.raises(WebhookVerificationError):
        Webhook(new_secret()).verify(body.encode(), headers)
    with pytest.raises(WebhookVerificationError):  # a changed body does not verify
        Webhook(old).verify(body.replace("héllo", "hello").encode(), headers)
    expected = hmac.new(secret_key(old), f"msg_abc.{now}.{body}".encode(), hashlib.sha256).digest()
    assert headers["webhook-signature"].split()[0] == "v1," + base64.b64encode(expected).decode()
    assert headers["webhook-id"] == "msg_abc" and headers["webhook-timestamp"] == str(now)


def test_without_a_secret_deliveries_carry_no_signature() -> None:
    headers = Signer([]).headers("msg_abc", 1, "{}")
    assert "webhook-signature" not in headers and headers["webhook-id"] == "msg_abc"


@pytest.mark.parametrize(
    ("result", "tries", "expected"),
    [
        (Result("2xx", 204), 0, ("delivered", 0.0)),
        (Result("4xx", 410), 0, ("gone", 0.0)),
        (Result("refused", error="x"), 0, ("dead", 0.0)),
        (Result("5xx", 500), 0, ("retry", 5.0)),
        (Result("5xx", 500), 2, ("retry", 1800.0)),
        (Result("5xx", 500), 3, ("dead", 0.0)),
        (Result("timeout"), 1, ("retry", 300.0)),
        (Result("3xx", 301), 0, ("retry", 5.0)),  # a redirect is not followed: a failure
        (Result("4xx", 429, retry_after=60), 0, ("retry", 60.0)),
        (Result("5xx", 503, retry_after=1), 1, ("retry", 300.0)),  # never sooner than planned
        (Result("5xx", 503, retry_after=10**9), 0, ("retry", 36000.0)),  # capped
        (Result("5xx", 500, retry_after=60), 0, ("retry", 5.0)),  # only 429 and 503
    ],
)
def test_what_an_attempt_leads_to(result: Result, tries: int, expected: tuple[str, float]) -> None:
    verdict = decide(result, tries, DELAYS)
    assert (verdict.outcome, verdict.delay) == expected


def test_retry_after_takes_seconds_or_a_date() -> None:
    now = time.time()
    assert retry_after("120", now) == 120
    assert retry_after(format_datetime(datetime.now(UTC) + timedelta(seconds=30)), now) == (
        pytest.approx(30, abs=1.5)
    )
    assert retry_after("soon", now) is None and retry_after(None, now) is None


def test_webhook_settings_round_trip_and_refuse_bad_values() -> None:
    settings = Settings.of(
        webhook_secret=(new_secret(), new_secret()),
        webhook_subscriptions={
            "slack": Subscription("slack", "https://hooks.example.com/T/x", ("run.failed",))
        },
        webhook_retry_schedule=("500ms", "2", "1m", "1h"),
    ).validate()
    assert load_settings(settings_env(settings)) == settings
    assert settings.webhooks.retry_delays == (0.5, 2.0, 60.0, 3600.0)
    assert "whsec" not in repr(settings.webhooks)
    default = Settings().webhooks
    assert default.retry_delays == (5, 300, 1800, 7200, 18000, 36000, 36000)
    assert default.timeout_seconds == 15
    for env, message in (
        ({"HERMES_QUEUE_WEBHOOK_SECRET": "hunter2"}, "whsec_"),
        ({"HERMES_QUEUE_WEBHOOK_SECRET": "whsec_c2hvcnQ="}, "16 bytes"),
        ({"HERMES_QUEUE_WEBHOOK_RETRY_SCHEDULE": "5s,soon"}, "duration"),
        ({"HERMES_QUEUE_WEBHOOK_SUBSCRIPTIONS": '{"a": {"url": "ftp://x"}}'}, "http"),
        (
            {"HERMES_QUEUE_WEBHOOK_SUBSCRIPTIONS": '{"a": {"url": "https://x", "events": ["x"]}}'},
            "events",
        ),
        ({"HERMES_QUEUE_WEBHOOK_SUBSCRIPTIONS": "[1]"}, "table"),
    ):
        with pytest.raises(ConfigError, match=message):
            load_settings(env)


def _record(status: str, **more: str) -> dict[bytes, bytes]:
    fields = NewRun("run_1", "sess", TurnRequest("hi")).fields()
    fields.update(status=status, **more)
    return {k.encode(): v.encode() for k, v in fields.items()}


SUBSCRIPTIONS = {
    "audit": Subscription("audit", "https://audit.example.com/in", EVENT_TYPES),
    "slack": Subscription("slack", "https://hooks.example.com/x", ("run.failed",)),
}


def test_a_runs_end_goes_to_its_webhook_and_the_subscriptions_of_its_type() -> None:
    event = RunEvent.parse("e:run_1")
    assert event is not None and event.is_end
    raw = _record("failed", webhook="https://client.example.com/h", error="boom")
    made = deliveries(event, raw, SUBSCRIPTIONS)
    assert [(d.target, d.url) for d in made] == [
        ("run", "https://client.example.com/h"),
        ("sub:audit", ""),  # a subscription's URL is never stored with its delivery
        ("sub:slack", ""),
    ]
    body = json.loads(made[0].body)
    assert body["type"] == "run.failed" and body["error"] == "boom"
    assert body["object"] == "hermes.run" and body["run_id"] == "run_1"
    assert made[0].id == run_delivery_id("run_1") and run_id_of(made[0].id) == "run_1"
    assert len({d.id for d in made}) == 3
    # The same event and target always make the same id: a repeated expansion adds nothing.
    assert [d.id for d in deliveries(event, raw, SUBSCRIPTIONS)] == [d.id for d in made]
    completed = deliveries(event, _record("completed", output="ok"), SUBSCRIPTIONS)
    assert [d.target for d in completed] == ["sub:audit"]
    assert deliveries(event, _record("running"), SUBSCRIPTIONS) == []


def test_an_approval_request_goes_to_subscriptions_only() -> None:
    event = RunEvent.parse("a:run_1:req_9")
    assert event is not None and event.request_id == "req_9"
    raw = _record(
        "waiting_for_approval",
        webhook="https://client.example.com/h",
        **{"approval:req_9": json.dumps({"command": "rm -rf /tmp/x"})},
    )
    (made,) = deliveries(event, raw, SUBSCRIPTIONS)
    body = json.loads(made.body)
    assert made.target == "sub:audit" and body["type"] == "approval.requested"
    assert body["approval"] == {"request_id": "req_9", "command": "rm -rf /tmp/x"}
    assert made.id == delivery_id("a:run_1:req_9", "sub:audit", "run_1")
    assert RunEvent.parse("a:run_1") is None and RunEvent.parse("msg_x") is None
