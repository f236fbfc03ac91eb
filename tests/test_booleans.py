"""One true/false table: a word a client may send in a body is a word an operator may set."""

from __future__ import annotations

import pytest

from hermes_queue.booleans import FALSE_WORDS, TRUE_WORDS, coerce_bool, parse_bool
from hermes_queue.config import ConfigError, load_settings


@pytest.mark.parametrize("word", sorted(TRUE_WORDS | FALSE_WORDS))
def test_settings_and_requests_read_every_word_alike(word: str) -> None:
    spelled = f" {word.upper()} "
    expected = word in TRUE_WORDS
    assert parse_bool(spelled) is expected
    assert coerce_bool(spelled, not expected) is expected
    settings = load_settings({"HERMES_QUEUE_METRICS_PUBLIC": spelled})
    assert settings.metrics.public is expected


def test_an_unknown_word_is_the_callers_default_or_a_config_error() -> None:
    assert parse_bool("maybe") is None
    assert coerce_bool("maybe", True) is True and coerce_bool(None, False) is False
    assert coerce_bool(0, True) is False and coerce_bool(2, False) is True
    with pytest.raises(ConfigError, match="metrics_public"):
        load_settings({"HERMES_QUEUE_METRICS_PUBLIC": "maybe"})
