"""The API key: how it is normalised, and which keys are too weak to expose the API with.

The key is normalised once, the same way everywhere (surrounding whitespace dropped, as
upstream's ``has_usable_secret`` does before its checks): the guard judges the normalised key
and the auth middleware compares the normalised bearer token with it, so a key the guard let
through is the key clients can use. Upstream refuses to start without a key of 16 characters
that is not a known placeholder; a key that passes that can still be sixteen spaces or one
character repeated, so here a non-loopback bind also refuses whitespace, control characters,
keys containing a placeholder word and keys whose estimated entropy is below a floor.
"""

from __future__ import annotations

import collections
import itertools
import math

MIN_KEY_LENGTH = 16
MIN_ENTROPY_BITS = 40.0
"""About 0.1% of random 16-character hex keys fall below it; anything longer passes easily."""

# hermes-agent 0.19 refuses these (hermes_cli.auth._PLACEHOLDER_SECRET_VALUES), whole and in
# any case.
UPSTREAM_PLACEHOLDERS = frozenset(
    {
        "*",
        "**",
        "***",
        "changeme",
        "your_api_key",
        "your_api_key_here",
        "your-api-key",
        "placeholder",
        "example",
        "dummy",
        "null",
        "none",
    }
)
# Placeholder words that make a key of any length a placeholder ("changeme-changeme-123").
PLACEHOLDER_WORDS = (
    "changeme",
    "change-me",
    "change_me",
    "replaceme",
    "replace-me",
    "replace_me",
    "placeholder",
    "yourapikey",
    "your-api-key",
    "your_api_key",
)
GENERATE_HINT = "generate one with `openssl rand -hex 32`"
OPEN_WARNING = (
    "No API key is set: every route of this API is open to anyone who can reach it. That is "
    "meant for development on this machine only; set HERMES_QUEUE_API_KEY before anyone else "
    "can connect."
)


def normalize_key(value: str) -> str:
    """The key as configured or as sent in ``Authorization: Bearer``, compared this way."""
    return value.strip()


def _shannon_bits(symbols: list[int]) -> float:
    counts = collections.Counter(symbols)
    total = len(symbols)
    return -sum(n / total * math.log2(n / total) for n in counts.values())


def estimated_entropy_bits(key: str) -> float:
    """A deliberately simple estimate: length × the lower of the per-character entropy of the
    key's characters and of the steps between neighbours, so repeats ("aaaa…"), alternations
    ("abab…") and runs ("0123…", "abcd…") score near zero while random keys score close to
    their length × log2(distinct characters). Dictionary words are not recognised."""
    if len(key) < 2:
        return 0.0
    chars = [ord(c) for c in key]
    steps = [b - a for a, b in itertools.pairwise(chars)]
    return len(key) * min(_shannon_bits(chars), _shannon_bits(steps))


def key_weakness(value: str) -> str | None:
    """Why the (normalised) key is too weak to expose the API with, or None when it is not."""
    key = normalize_key(value)
    if not key:
        return "is not set"
    if any(c.isspace() or not c.isprintable() for c in key):
        return "contains whitespace or control characters"
    if len(key) < MIN_KEY_LENGTH:
        return f"is shorter than {MIN_KEY_LENGTH} characters"
    if len(set(key)) == 1:
        return "is one character repeated"
    lowered = key.lower()
    if lowered in UPSTREAM_PLACEHOLDERS or any(word in lowered for word in PLACEHOLDER_WORDS):
        return "is a well-known placeholder"
    bits = estimated_entropy_bits(key)
    if bits < MIN_ENTROPY_BITS:
        return (
            f"is too predictable (about {bits:.0f} bits of estimated entropy, "
            f"at least {MIN_ENTROPY_BITS:.0f} needed)"
        )
    return None
