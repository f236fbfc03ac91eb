"""The API key: how it is normalised, and which keys are too weak to expose the API with.

The key is normalised once, the same way everywhere (surrounding whitespace dropped, as
upstream's ``has_usable_secret`` does before its checks): the guard judges the normalised key
and the auth middleware compares the normalised bearer token with it, so a key the guard let
through is the key clients can use. Upstream refuses to start without a key of 16 characters
that is not a known placeholder; a key that passes that can still be sixteen spaces or one
character repeated, so here a non-loopback bind also refuses whitespace, control characters,
keys containing a placeholder word and keys whose estimated entropy is below a floor.

The estimate is zxcvbn's (Dropbox's password strength estimator, ported to Python): the guesses
an attacker needs who tries common passwords, dictionary words and names, keyboard walks,
repeats, sequences and dates first, with the words that name this service ("hermes", "queue",
"api", "key", …) counted as known too. A hand-rolled character-entropy estimate saw
``mysecretpassword123`` as ~60 bits of random text; zxcvbn sees a common password and a number
(~23 bits). Separators are scored both ways (``hermes-queue-api-key`` is four known words).
"""

from __future__ import annotations

import math
import re

MIN_KEY_LENGTH = 16
MIN_ENTROPY_BITS = 40.0
"""About 10^12 guesses. Random keys of 16 characters pass (hex: 2,000 of 2,000 tried; base64url:
all but ~0.15%); anything longer passes easily."""
# zxcvbn's own limit on what it scores (longer keys are judged by their first 72 characters).
SCORED_LENGTH = 72
# Words anyone knows a key of this service may be built from.
CONTEXT_WORDS = (
    "hermes",
    "queue",
    "hermesqueue",
    "hq",
    "api",
    "apikey",
    "key",
    "secret",
    "token",
    "bearer",
    "gateway",
    "server",
)
_SEPARATORS = re.compile(r"[-_.:/+ ]")

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
# How an operator sets the key, in messages about a missing one (upstream's name is only a
# fallback here: docs/compatibility.md).
KEY_SETTING = "HERMES_QUEUE_API_KEY (or upstream's API_SERVER_KEY)"
OPEN_WARNING = (
    "No API key is set: every route of this API is open to anyone who can reach it. That is "
    "meant for development on this machine only; set HERMES_QUEUE_API_KEY before anyone else "
    "can connect."
)


def normalize_key(value: str) -> str:
    """The key as configured or as sent in ``Authorization: Bearer``, compared this way."""
    return value.strip()


def estimated_entropy_bits(key: str) -> float:
    """log2 of the guesses zxcvbn estimates an attacker needs (``CONTEXT_WORDS`` known), the
    lower of the key as written and without its separators."""
    if len(key) < 2:
        return 0.0
    from zxcvbn import zxcvbn  # imported here: only a non-loopback bind judges a key

    scored = key[:SCORED_LENGTH]
    variants = {scored, _SEPARATORS.sub("", scored)} - {""}
    guesses = min(zxcvbn(v, user_inputs=list(CONTEXT_WORDS))["guesses"] for v in variants)
    return math.log2(max(1.0, float(guesses)))


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
            f"is too predictable (about {bits:.0f} bits of estimated entropy, at least "
            f"{MIN_ENTROPY_BITS:.0f} needed: common passwords, words, repeats and sequences "
            "are guessed first)"
        )
    return None
