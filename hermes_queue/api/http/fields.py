"""The building blocks of the typed request bodies and query strings: the base model with its
one way to validate, and the field checks every endpoint shares (ids, strings, message lists,
``X-Hermes-Session-Key``), each raising ``ApiError`` with upstream's code, message and
``param``.

Each endpoint's body is a :class:`RequestModel` beside its handler (``hermes/*_bodies.py``,
``openai/bodies.py``). Handlers validate with ``Model.parse(body)`` and read typed attributes;
``/openapi.json`` is generated from the same classes. Each field names its JSON type (the shapes
in ``schema_types.py``) and the check that validates it; pydantic stops at the first field that
fails, in field order, so a model lists its fields in the order upstream checks them. Aliases
(``id``/``session_id``, ``message``/``input``, ``system_message``/``instructions``) pick the first
name present, as ``body.get(a, body.get(b))`` did. Unknown keys are ignored, as upstream ignores
them.

Why pydantic: its validators let a field's check raise our own error (other exceptions pass
through ``model_validate`` untouched), ``AliasChoices`` keeps upstream's aliases, and its JSON
Schema output is draft 2020-12, the dialect of OpenAPI 3.1, so the published document needs no
translation. msgspec is faster but has neither per-field validators of this kind nor 2020-12
output.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Self

from aiohttp import web
from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    ValidationError,
)

from hermes_queue.api.errors import ApiError
from hermes_queue.api.http.schema_types import HistoryMessage, ModelOptions
from hermes_queue.booleans import coerce_bool
from hermes_queue.keyguard import KEY_SETTING
from hermes_queue.urls import http_url

MAX_ID_LENGTH = 256
_UNSAFE_ID = re.compile(r"[\x00-\x1f\x7f/\\\ud800-\udfff]|^\.\.?$")
_SURROGATES = re.compile("[\ud800-\udfff]")
MESSAGE_ROLES = frozenset({"system", "user", "assistant", "tool"})

LENIENT = (
    "Lenient boolean, as upstream: true/false, 1/0 and the words 1/true/yes/on, 0/false/no/off "
    "(any case); any other value means the default."
)


# -- checks every endpoint shares -----------------------------------------------------------


def header_text(value: str) -> bool:
    """Whether a header value is text: aiohttp decodes header bytes that are not UTF-8 with
    ``surrogateescape``, and such a value cannot be stored, hashed or echoed."""
    return value.isascii() or not _SURROGATES.search(value)


def session_id_value(value: Any, *, param: str = "session_id") -> str:
    if not isinstance(value, str) or not value.strip():
        raise ApiError(400, "invalid_session_id", "Invalid session ID", param=param)
    if len(value) > MAX_ID_LENGTH:
        raise ApiError(400, "invalid_session_id", "Session ID too long", param=param)
    if _UNSAFE_ID.search(value):
        raise ApiError(400, "invalid_session_id", "Invalid session ID", param=param)
    return value


def optional_string(
    body: dict[str, Any], name: str, code: str, max_length: int = 1_000_000
) -> str | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > max_length:
        raise ApiError(400, code, f"'{name}' must be a string", param=name)
    return value


def optional_text(body: dict[str, Any], name: str, code: str) -> str | None:
    """Upstream's session-API wording ("title must be a string")."""
    value = body.get(name)
    if value is not None and not isinstance(value, str):
        raise ApiError(400, code, f"{name} must be a string", param=name)
    return value


def _content(value: Any, param: str) -> str | list[Any]:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(part, dict) for part in value):
        return value
    raise ApiError(
        400,
        "invalid_content_part",
        "Message content must be a string or a list of parts",
        param=param,
    )


def message_list(value: Any, param: str, *, need_content: bool = False) -> list[dict[str, Any]]:
    """A list of ``{role, content}`` messages, validated before anything is allocated.

    ``need_content``: every entry must carry ``content`` (upstream's rule for
    ``conversation_history``; in ``input`` a message without it is empty)."""
    if not isinstance(value, list):
        raise ApiError(
            400,
            "invalid_messages",
            f"'{param}' must be an array of message objects",
            param=param,
        )
    out: list[dict[str, Any]] = []
    for index, item in enumerate(value):
        where = f"{param}[{index}]"
        if (
            not isinstance(item, dict)
            or "role" not in item
            or (need_content and "content" not in item)
        ):
            fields = "'role' and 'content' fields" if need_content else "a 'role' field"
            raise ApiError(400, "invalid_messages", f"{where} must have {fields}", param=where)
        role = item["role"]
        if not isinstance(role, str) or role not in MESSAGE_ROLES:
            raise ApiError(
                400,
                "invalid_messages",
                f"{where} must be an object with a role of {sorted(MESSAGE_ROLES)}",
                param=where,
            )
        message = {"role": role, "content": _content(item.get("content", ""), f"{where}.content")}
        for extra in ("tool_calls", "tool_call_id", "name"):
            if extra in item:
                message[extra] = item[extra]
        out.append(message)
    return out


def is_empty(content: str | list[Any]) -> bool:
    return not content.strip() if isinstance(content, str) else len(content) == 0


def session_key_header(request: web.Request, api_key: str) -> str | None:
    """``X-Hermes-Session-Key`` as upstream checks it (upstream-api.md §1.2): only on an API
    with a key (``api_key``, the process's)."""
    value = request.headers.get("X-Hermes-Session-Key")
    if value is None:
        return None
    if not api_key:
        raise ApiError(
            403,
            None,
            "X-Hermes-Session-Key requires API key authentication. "
            f"Configure {KEY_SETTING} to enable this feature.",
        )
    if any(char in value for char in "\r\n\x00") or not header_text(value):
        raise ApiError(400, "invalid_session_key", "Invalid session key")
    if len(value) > MAX_ID_LENGTH:
        raise ApiError(400, "invalid_session_key", "Session key too long")
    return value


# -- the typed models ---------------------------------------------------------------------------


def document_aliases(schema: dict[str, Any], model: type[BaseModel]) -> None:
    """Finish a model's schema: every alias of a field listed (pydantic lists only the first),
    and fields a body must have marked required (they default to None only so that their check
    runs, with upstream's own refusal, when they are missing)."""
    properties = schema.get("properties", {})
    for name, field in model.model_fields.items():
        key = (
            field.validation_alias.choices[0]
            if isinstance(field.validation_alias, AliasChoices)
            else name
        )
        if field.validate_default and field.default is None:
            properties[str(key)].pop("default", None)
            schema.setdefault("required", []).append(str(key))
        if not isinstance(field.validation_alias, AliasChoices):
            continue
        first, *others = [str(choice) for choice in field.validation_alias.choices]
        for other in others:
            described = dict(properties[first])
            described["description"] = f"Alias of `{first}` (used when `{first}` is absent)."
            properties[other] = described


class RequestModel(BaseModel):
    model_config = ConfigDict(extra="ignore", json_schema_extra=document_aliases)

    @classmethod
    def parse(cls, body: Mapping[str, Any]) -> Self:
        """The validated body; the first failing field's ``ApiError`` otherwise."""
        try:
            return cls.model_validate(body)
        except ValidationError as exc:  # a check that let pydantic fail: not expected
            loc = exc.errors()[0]["loc"]
            param = ".".join(str(part) for part in loc) or None
            raise ApiError(
                400, "invalid_request", f"Invalid value for {param}", param=param
            ) from None


def checked(check: Callable[[Any], Any], accepts: Any) -> PlainValidator:
    """Validate a field with ``check`` (raises ``ApiError``), documented as ``accepts``."""
    return PlainValidator(check, json_schema_input_type=accepts)


def as_is(value: Any) -> Any:
    return value


def _bool_check(default: bool) -> PlainValidator:
    return checked(lambda value: coerce_bool(value, default), Any)


LenientFalse = Annotated[bool, _bool_check(False), Field(description=LENIENT)]
LenientTrue = Annotated[bool, _bool_check(True), Field(description=LENIENT)]
# Checked by routing when the runtime is selected (its codes: invalid_model, invalid_provider,
# invalid_model_options).
RuntimeId = Annotated[Any, checked(as_is, Annotated[str, Field(max_length=200)] | None)]
RuntimeOptions = Annotated[Any, checked(as_is, ModelOptions | None)]


def text_check(
    name: str, code: str, *, max_length: int | None = None, quoted: bool = True
) -> PlainValidator:
    """An optional string refused with ``code``: upstream's "'name' must be a string" on the
    ``/v1`` endpoints, "name must be a string" (``quoted=False``) on sessions."""

    def check(value: Any) -> str | None:
        body = {name: value}
        if quoted:
            return optional_string(body, name, code, max_length or 1_000_000)
        return optional_text(body, name, code)

    accepts: Any = Annotated[str, Field(max_length=max_length)] if max_length else str
    return checked(check, accepts | None)


def session_id_check(param: str) -> PlainValidator:
    def check(value: Any) -> str | None:
        return None if value is None else session_id_value(value, param=param)

    accepts = Annotated[str, Field(min_length=1, max_length=256, pattern=r"^[^\x00-\x1f\x7f/\\]+$")]
    return checked(check, accepts | None)


def history(value: Any) -> list[dict[str, Any]]:
    """``conversation_history``: messages that each carry ``content`` (upstream's rule)."""
    if value is None:
        return []
    return message_list(value, "conversation_history", need_content=True)


History = Annotated[
    list[dict[str, Any]],
    checked(history, list[HistoryMessage] | None),
    Field(default_factory=list, description="Earlier turns, before the input's own history."),
]


def webhook_url(value: Any) -> str:
    """A run's ``webhook``: an absolute http(s) URL (its address is checked when a worker
    connects to it, hermes_queue/webhooks/guard.py; here only its form)."""
    if value is None:
        return ""
    if not isinstance(value, str) or not http_url(value.strip()):
        raise ApiError(
            400,
            "invalid_webhook",
            "'webhook' must be an absolute http(s) URL of at most 2048 characters",
            param="webhook",
        )
    return value.strip()


# The ``webhook`` of every run-creating body (LangGraph's run field): where the run's end is
# delivered, signed (docs/deploy.md, "Webhooks").
WebhookUrl = Annotated[
    str,
    checked(
        webhook_url,
        Annotated[str, Field(max_length=2048, json_schema_extra={"format": "uri"})] | None,
    ),
    Field(
        description="Where the run's end (completed, failed, cancelled) is delivered: a signed "
        "POST of its hermes.run object (Standard Webhooks), retried until it is taken.",
    ),
]
