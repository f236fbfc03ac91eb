"""Logging setup: structured context on every record, and no secret in any output.

Context travels in contextvars rather than ``extra=`` so a line logged deep inside a backend or
the store still says which request, run, session, attempt and worker it belongs to, without
threading ids through every call. Redaction runs on every record at the handler, after
formatting of message and traceback, because secrets reach logs through exception texts and
third-party messages that no call site controls.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import re
import sys
import threading
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TextIO
from urllib.parse import urlsplit, urlunsplit

LOG_FORMATS = ("text", "json")

request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="")
run_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("run_id", default="")
session_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("session_id", default="")
attempt_var: contextvars.ContextVar[int | None] = contextvars.ContextVar("attempt", default=None)
worker_var: contextvars.ContextVar[str] = contextvars.ContextVar("worker", default="")
# The OpenTelemetry trace id of the request or turn, when the process traces (tracing/).
trace_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("trace_id", default="")

# Record attribute -> variable, in the order the text format shows them.
_CONTEXT: dict[str, contextvars.ContextVar[str] | contextvars.ContextVar[int | None]] = {
    "request_id": request_id_var,
    "run_id": run_id_var,
    "session_id": session_id_var,
    "attempt": attempt_var,
    "worker": worker_var,
    "trace_id": trace_id_var,
}
_LABELS = {"request_id": "req", "run_id": "run", "session_id": "session", "trace_id": "trace"}
# Shown by the text format only when set (most deployments do not trace).
_TEXT_WHEN_SET = frozenset({"trace_id"})

# Shorter values would mask ordinary words all over the logs; no real key is that short.
MIN_SECRET_LENGTH = 8
_PATTERNS = (
    # Authorization header values quoted in messages (e.g. a failed upstream request).
    # Token68 of 8+ characters, so prose like "bearer token missing" stays readable.
    (re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/-]{8,}=*"), r"\1 ***"),
    # OpenAI/Anthropic-style keys ("sk-...", "sk-proj-...", "sk-ant-...") from any source.
    (re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"), "sk-***"),
    # The password of a connection URL: redis://:pw@host, postgresql://user:pw@host.
    (re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@]*:)[^\s@/]+@"), r"\1***@"),
)
# ``user:password@host`` without a scheme (a URL missing its ``postgresql://``).
_BARE_PASSWORD = re.compile(r"^([^\s:/@]*:)[^\s@/]+@")


class Redactor:
    """Masks known secret values and secret-shaped text. Values are registered at run time
    because provider keys are only resolved by workers, long after logging is configured."""

    def __init__(self) -> None:
        self._values: set[str] = set()
        self._literal: re.Pattern[str] | None = None
        self._lock = threading.Lock()

    def add(self, value: str) -> None:
        value = value.strip()
        if len(value) < MIN_SECRET_LENGTH or value in self._values:
            return
        with self._lock:
            self._values.add(value)
            # Longest first, so a key that contains another one is masked whole.
            ordered = sorted(self._values, key=len, reverse=True)
            self._literal = re.compile("|".join(map(re.escape, ordered)))

    def redact(self, text: str) -> str:
        literal = self._literal
        if literal is not None:
            text = literal.sub("***", text)
        for pattern, replacement in _PATTERNS:
            text = pattern.sub(replacement, text)
        return text


_REDACTOR = Redactor()


def register_secret(value: str | None) -> None:
    """Mask ``value`` in every later log line (call wherever a key is resolved or received)."""
    if value:
        _REDACTOR.add(value)


def register_url_password(url: str | None) -> None:
    """Mask the password of a connection URL even where it appears without its URL."""
    with contextlib.suppress(ValueError):  # a malformed URL is config's to report, not ours
        register_secret(urlsplit(url or "").password)


def mask_url(url: str) -> str:
    """``url`` with any password replaced by ``***``, for error lines, probes and status
    headers (they end up in CI logs and tickets, and a Redis or PostgreSQL URL often carries
    its credentials). Also masks ``user:password@host`` written without a scheme, which
    ``urlsplit`` does not see as a password."""
    try:
        parts = urlsplit(url)
        if parts.password is not None:
            userinfo, _, host = parts.netloc.rpartition("@")
            user = userinfo.split(":", 1)[0]
            return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))
    except ValueError:
        return "<unparseable URL>"
    return _BARE_PASSWORD.sub(r"\1***@", url)


def redact(text: str) -> str:
    """The text as it may appear in logs (also for messages shown elsewhere, e.g. the CLI)."""
    return _REDACTOR.redact(text)


class ContextFilter(logging.Filter):
    """Copies the context variables onto the record, so formatters need not know about them."""

    def filter(self, record: logging.LogRecord) -> bool:
        for name, var in _CONTEXT.items():
            setattr(record, name, var.get())
        return True


class RedactionFilter(logging.Filter):
    """Renders message and traceback once, redacted, and stores them back on the record: every
    formatter (and any other handler seeing the record later) then only sees the masked text."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # bad %-args: keep the template rather than lose the line
            message = str(record.msg)
        record.msg, record.args = redact(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


class TextFormatter(logging.Formatter):
    """One human line: time, level, logger, the context ("-" when unset), the message."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s [%(context)s] %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        record.context = " ".join(
            f"{_LABELS.get(name, name)}={_value(record, name) or '-'}"
            for name in _CONTEXT
            if name not in _TEXT_WHEN_SET or _value(record, name)
        )
        return super().format(record)


class JsonFormatter(logging.Formatter):
    """One JSON object per line for log shippers; context fields appear only when set."""

    def format(self, record: logging.LogRecord) -> str:
        ts = datetime.fromtimestamp(record.created, tz=UTC)
        entry: dict[str, object] = {
            "ts": ts.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in _CONTEXT:
            value = _value(record, name)
            if value not in ("", None):
                entry[name] = value
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(self.formatException(record.exc_info))
        if record.exc_text:
            entry["exc_info"] = record.exc_text
        if record.stack_info:
            entry["stack_info"] = record.stack_info
        return json.dumps(entry, ensure_ascii=False, default=str)


def _value(record: logging.LogRecord, name: str) -> object:
    # A record that bypassed ContextFilter (another handler) still reads the live context.
    return getattr(record, name, _CONTEXT[name].get())


def configure_logging(
    level: str = "INFO",
    log_format: str = "text",
    *,
    secrets: Iterable[str] = (),
    urls: Iterable[str] = (),
    stream: TextIO | None = None,
) -> None:
    """Route all logging to one handler on ``stream`` (stderr). ``secrets`` are masked values
    (the API key); ``urls`` contribute their passwords (Redis, the session store)."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log_format must be one of {', '.join(LOG_FORMATS)}")
    for value in secrets:
        register_secret(value)
    for url in urls:
        register_url_password(url)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.addFilter(ContextFilter())
    handler.addFilter(RedactionFilter())
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # arq logs every job start/end at INFO; keep that at WARNING unless debugging.
    if level.upper() != "DEBUG":
        logging.getLogger("arq").setLevel(logging.WARNING)
        logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
