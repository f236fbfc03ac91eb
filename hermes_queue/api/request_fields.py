"""The building blocks of the typed request bodies (``request_models.py``): the base model with
its one way to validate, and field checks that keep upstream's codes and messages."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, Any, Self

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    ValidationError,
)

from hermes_queue.api.errors import ApiError
from hermes_queue.api.schema_types import ModelOptions
from hermes_queue.api.validation import optional_string, optional_text, session_id_value
from hermes_queue.booleans import coerce_bool

LENIENT = (
    "Lenient boolean, as upstream: true/false, 1/0 and the words 1/true/yes/on, 0/false/no/off "
    "(any case); any other value means the default."
)


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
