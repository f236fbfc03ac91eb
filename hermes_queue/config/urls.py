"""The shape of the two connection URLs, checked when the settings are validated, so a process
given ``mysql://…`` or ``notaurl`` stops at once with one line naming the setting instead of a
traceback from deep inside a driver. Only the shape: whether the server answers, or a SQLite
file's directory exists, is found out when a process starts (``cli/preflight.py``).

No imports from the rest of the package: the store and the settings groups both use these.
"""

from __future__ import annotations

STORE_EXPECTED = "sqlite:///relative/path.db, sqlite:////absolute/path.db or postgresql://…"
REDIS_EXPECTED = (
    "redis://host:port/db, rediss://…, unix://…, redis+sentinel://…/<service> "
    "or redis+cluster://host:port,…"
)
REDIS_SCHEMES = frozenset({"redis", "rediss", "unix", "redis+sentinel", "redis+cluster"})
POSTGRES_SCHEMES = frozenset({"postgresql", "postgres"})
SQLITE_PREFIX = "sqlite:///"


def scheme_of(url: str) -> str | None:
    """The lower-cased scheme before ``://``; None when there is none."""
    scheme, separator, _rest = url.partition("://")
    return scheme.strip().lower() if separator else None


def store_url_problem(url: str) -> str | None:
    """What is wrong with a ``store_url`` (never quoting it: it may hold a password), or None.

    For SQLite the path is what follows ``sqlite:///``: relative to the working directory, or
    absolute with a fourth slash; ``:memory:`` is a private in-memory store (tests).
    """
    scheme = scheme_of(url)
    if scheme is None:
        return "is not a URL (no scheme)"
    if scheme == "sqlite":
        if not url.lower().startswith(SQLITE_PREFIX):
            return "has a host part (a SQLite URL starts with sqlite:/// )"
        if not url[len(SQLITE_PREFIX) :]:
            return "names no file"
        return None
    if scheme in POSTGRES_SCHEMES:
        return None
    return f"has the unsupported scheme {scheme!r}"


def sqlite_path(url: str) -> str | None:
    """The file a valid ``sqlite:///`` URL names (``:memory:`` included); None for others."""
    if scheme_of(url) != "sqlite" or store_url_problem(url) is not None:
        return None
    return url[len(SQLITE_PREFIX) :]


def redis_url_problem(url: str) -> str | None:
    """What is wrong with the scheme of a ``redis_url``, or None (hosts and ports are checked by
    the parser that connects: ``redisio.connect.url_problem``)."""
    scheme = scheme_of(url)
    if scheme is None:
        return "is not a URL (no scheme)"
    if scheme not in REDIS_SCHEMES:
        return f"has the unsupported scheme {scheme!r}"
    return None
