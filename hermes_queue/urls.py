"""What an outbound URL given to us must look like (a run's ``webhook``, a subscription's
``url``): one check, shared by the request bodies and the settings."""

from __future__ import annotations

from yarl import URL

MAX_URL_LENGTH = 2048


def http_url(value: str) -> bool:
    """An absolute http(s) URL with a host, without spaces or control characters, at most
    ``MAX_URL_LENGTH`` characters. (Where it points is checked when it is connected to:
    ``webhooks/guard.py``.)"""
    if not value or len(value) > MAX_URL_LENGTH:
        return False
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in value):
        return False
    try:
        url = URL(value)
    except (ValueError, TypeError):
        return False
    return url.scheme in ("http", "https") and bool(url.host) and url.is_absolute()
