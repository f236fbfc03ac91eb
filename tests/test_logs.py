"""Structured logging: context fields in both formats, and no secret in any output."""

from __future__ import annotations

import contextvars
import io
import json
import logging
from collections.abc import Callable, Iterator

import pytest

from hermes_queue import logs
from hermes_queue.config import ConfigError, Settings, load_settings

API_KEY = "hq-api-key-0123456789abcdef"
PROVIDER_KEY = "prov-key-ZYXWVUTSRQ987654"
BEARER_TOKEN = "tok3n-abcdefghijklmnop"
REDIS_PASSWORD = "s3cret-redis-pw"
STORE_PASSWORD = "pg-pass-word-42"
SK_KEY = "sk-proj-AbCdEfGhIjKlMnOpQrStUv"
ALL_SECRETS = (API_KEY, PROVIDER_KEY, BEARER_TOKEN, REDIS_PASSWORD, STORE_PASSWORD, SK_KEY)


@pytest.fixture
def capture(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], io.StringIO]]:
    """configure_logging into a StringIO with a fresh secret registry; root restored after."""
    monkeypatch.setattr(logs, "_REDACTOR", logs.Redactor())
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    levels = {name: logging.getLogger(name).level for name in ("arq", "aiohttp.access")}

    def configure(log_format: str) -> io.StringIO:
        out = io.StringIO()
        logs.configure_logging(
            "INFO",
            log_format,
            secrets=(API_KEY,),
            urls=(
                f"redis://:{REDIS_PASSWORD}@redis.internal:6379/0",
                f"postgresql://hq:{STORE_PASSWORD}@db/hq",
            ),
            stream=out,
        )
        return out

    yield configure
    root.handlers[:], root.level = saved
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


def _in_context(fn: Callable[[], None]) -> None:
    """Run with the worker's context set, in a copy, so nothing leaks into other tests."""

    def body() -> None:
        logs.request_id_var.set("req-1")
        logs.run_id_var.set("run_abc")
        logs.session_id_var.set("sess_1")
        logs.attempt_var.set(2)
        logs.worker_var.set("worker-7")
        fn()

    contextvars.copy_context().run(body)


def test_json_lines_parse_and_carry_context(capture: Callable[[str], io.StringIO]) -> None:
    out = capture("json")
    _in_context(lambda: logging.getLogger("hq.test").info("turn %s started", "run_abc"))
    logging.getLogger("hq.test").warning("outside any run")

    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert first["message"] == "turn run_abc started"
    assert first["level"] == "INFO" and first["logger"] == "hq.test"
    assert first["ts"].endswith("Z") and "T" in first["ts"]
    assert {k: first[k] for k in ("request_id", "run_id", "session_id", "attempt", "worker")} == {
        "request_id": "req-1",
        "run_id": "run_abc",
        "session_id": "sess_1",
        "attempt": 2,
        "worker": "worker-7",
    }
    # Unset context fields are absent rather than empty.
    assert set(second) == {"ts", "level", "logger", "message"}


def test_json_carries_exception_as_string(capture: Callable[[str], io.StringIO]) -> None:
    out = capture("json")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logging.getLogger("hq.test").exception("it failed")
    entry = json.loads(out.getvalue())
    assert isinstance(entry["exc_info"], str)
    assert "RuntimeError: boom" in entry["exc_info"]


def test_text_format_includes_context(capture: Callable[[str], io.StringIO]) -> None:
    out = capture("text")
    _in_context(lambda: logging.getLogger("hq.test").info("hello"))
    logging.getLogger("hq.test").info("bare")
    with_context, bare = out.getvalue().splitlines()
    assert (
        "INFO hq.test [req=req-1 run=run_abc session=sess_1 attempt=2 worker=worker-7] hello"
        in (with_context)
    )
    assert "[req=- run=- session=- attempt=- worker=-] bare" in bare


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_secrets_never_appear(capture: Callable[[str], io.StringIO], log_format: str) -> None:
    out = capture(log_format)
    logs.register_secret(PROVIDER_KEY)  # as providers.resolve_api_key will
    log = logging.getLogger("hq.test")
    log.info("api key %s, provider key %s", API_KEY, PROVIDER_KEY)
    log.info("upstream sent Authorization: Bearer %s", BEARER_TOKEN)
    log.info("headers {'authorization': 'bearer %s'}", BEARER_TOKEN)
    log.info("connecting to redis://:%s@redis.internal:6379/0", REDIS_PASSWORD)
    log.info("store at postgresql://hq:%s@db/hq", STORE_PASSWORD)
    log.info("auth failed for password %s", REDIS_PASSWORD)
    log.info("an unregistered key %s", SK_KEY)
    log.warning(f"f-string with {API_KEY} and no args")
    try:
        try:
            raise ValueError(f"provider rejected {PROVIDER_KEY} (Bearer {BEARER_TOKEN})")
        except ValueError as exc:
            raise RuntimeError(f"redis://:{REDIS_PASSWORD}@host failed") from exc
    except RuntimeError:
        log.exception("call with %s failed", API_KEY)
    log.info("stack", stack_info=True, extra={"note": API_KEY})

    text = out.getvalue()
    for secret in ALL_SECRETS:
        assert secret not in text, secret
    assert "Bearer ***" in text and "bearer ***" in text
    assert "redis://:***@redis.internal" in text and "postgresql://hq:***@db" in text
    assert "sk-***" in text
    assert "ValueError: provider rejected ***" in text  # the traceback is kept, masked


def test_redaction_keeps_ordinary_text() -> None:
    redactor = logs.Redactor()
    redactor.add("short")  # below MIN_SECRET_LENGTH: masking it would mangle prose
    text = "bearer token missing; short reply; see https://example.com/a:b@c"
    assert redactor.redact(text) == text  # "a:b@" is a path, not a URL's userinfo


def test_register_secret_masks_longest_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logs, "_REDACTOR", logs.Redactor())
    logs.register_secret("abcdefgh")
    logs.register_secret("abcdefgh-ijkl")
    logs.register_secret("")
    logs.register_secret(None)
    assert logs.redact("x abcdefgh-ijkl y abcdefgh") == "x *** y ***"


def test_configure_logging_rejects_unknown_format() -> None:
    with pytest.raises(ValueError, match="log_format"):
        logs.configure_logging("INFO", "xml", stream=io.StringIO())


def test_log_format_setting() -> None:
    assert Settings().process.log_format == "text"
    assert load_settings({"HERMES_QUEUE_LOG_FORMAT": "json"}).process.log_format == "json"
    with pytest.raises(ConfigError, match=r"log_format must be one of 'text', 'json', not 'xml'"):
        load_settings({"HERMES_QUEUE_LOG_FORMAT": "xml"})
    with pytest.raises(ConfigError, match="log_format"):
        Settings.of(log_format="JSON").validate()
