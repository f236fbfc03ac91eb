"""The key guard: which keys may expose the API beyond loopback, and that the key clients send
is compared after the same normalisation the guard judged (issue 12 §3)."""

from __future__ import annotations

import logging
import secrets

import pytest

from hermes_queue.cli.serve import check_bind_safety
from hermes_queue.config import ApiSettings, ConfigError, Settings, load_settings
from hermes_queue.keyguard import OPEN_WARNING, estimated_entropy_bits, key_weakness

STRONG = "4f9c2a1b7d04e6a8c3b5d7f9e1a2c4b6"


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("", "is not set"),
        (" " * 16, "is not set"),
        ("\t" * 20, "is not set"),
        ("abcd efgh ijkl mnop", "whitespace"),
        ("abcdefghijklmnop\x00x", "control characters"),
        ("short-key", "shorter than 16"),
        ("a" * 32, "one character repeated"),
        ("your_api_key_here", "placeholder"),
        ("YOUR_API_KEY_HERE", "placeholder"),
        ("changeme-changeme-2024", "placeholder"),
        ("please-replace-me-now", "placeholder"),
        ("aaaaaaaaaaaaaaab", "too predictable"),
        ("abababababababab", "too predictable"),
        ("0123456789abcdef", "too predictable"),
        ("abcdefghijklmnopqrstuvwxyz", "too predictable"),
        ("1234567890123456", "too predictable"),
        # Long enough and mixed, but built from common passwords, words and patterns: what an
        # attacker tries first (issue 33 §6).
        ("mysecretpassword123", "too predictable"),
        ("passwordpassword12", "too predictable"),
        ("adminadmin12345678", "too predictable"),
        ("qwertyuiopasdfghjkl", "too predictable"),
        ("hermes-queue-api-key-2024", "too predictable"),
        ("test-key-0123456789abcdef", "too predictable"),
    ],
)
def test_weak_keys_are_refused_with_the_reason(key: str, reason: str) -> None:
    weakness = key_weakness(key)
    assert weakness is not None and reason in weakness
    with pytest.raises(ConfigError, match=r"refusing to listen on 0\.0\.0\.0") as refused:
        check_bind_safety(ApiSettings(host="0.0.0.0", api_key=key))
    assert "openssl rand -hex 32" in str(refused.value)
    assert key.strip() == "" or key.strip() not in str(refused.value)  # never echoed


@pytest.mark.parametrize(
    "key",
    [
        STRONG,
        secrets.token_hex(32),
        secrets.token_hex(8),  # 16 random hex characters: the shortest key allowed
        "hq-" + secrets.token_urlsafe(24),
        "test-key-7f3a9c1e5b2d8046ae91",
        "x" * 60 + secrets.token_hex(32),  # judged by its first 72 characters
    ],
)
def test_strong_keys_pass(key: str) -> None:
    assert key_weakness(key) is None
    check_bind_safety(ApiSettings(host="0.0.0.0", api_key=key))
    check_bind_safety(ApiSettings(host="::", api_key=key))


def test_the_entropy_estimate_tells_random_from_patterned() -> None:
    assert estimated_entropy_bits(secrets.token_hex(32)) > 150
    assert estimated_entropy_bits("0123456789abcdef0123456789abcdef") < 20
    assert estimated_entropy_bits("mysecretpassword123") < 30  # once ~60 "random" bits
    assert estimated_entropy_bits("x") == 0.0


def test_the_refusal_names_hermes_queue_api_key_and_how_to_make_one() -> None:
    with pytest.raises(ConfigError) as refused:
        check_bind_safety(ApiSettings(host="0.0.0.0", api_key="mysecretpassword123"))
    message = str(refused.value)
    assert message.startswith("refusing to listen on 0.0.0.0: the API key (HERMES_QUEUE_API_KEY)")
    assert "API_SERVER_KEY" not in message and "openssl rand -hex 32" in message
    with pytest.raises(ConfigError, match=r"\(HERMES_QUEUE_API_KEY\) is not set"):
        check_bind_safety(ApiSettings(host="0.0.0.0", api_key=""))


def test_surrounding_whitespace_is_normalised_once_for_guard_and_auth() -> None:
    settings = load_settings(environ={"HERMES_QUEUE_API_KEY": f"  {STRONG}\n"})
    assert settings.api.api_key == STRONG
    assert Settings.of(api_key=f" {STRONG} ").replace(port=1).api.api_key == STRONG
    assert Settings.of(api_key="   ").api.api_key == ""  # blank is no key


def test_no_key_on_loopback_stays_open_with_one_loud_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="hermes_queue.cli.serve"):
        check_bind_safety(ApiSettings(host="127.0.0.1", api_key=""))
        check_bind_safety(ApiSettings(host="127.0.0.1", api_key=STRONG))
    warnings = [r for r in caplog.records if OPEN_WARNING in r.getMessage()]
    assert len(warnings) == 1
    with pytest.raises(ConfigError):
        check_bind_safety(ApiSettings(host="192.0.2.10", api_key=""))
