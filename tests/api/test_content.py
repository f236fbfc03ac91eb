"""Unit tests for content normalisation (upstream-api.md §1.4); pure, no Redis or server.

They mirror the intentions of upstream's test_api_server_multimodal.py and
test_api_server_normalize.py, plus the edge cases read off upstream's code.
"""

from __future__ import annotations

from typing import Any

import pytest

from hermes_queue.api.errors import ApiError
from hermes_queue.api.http.content import (
    MAX_LIST_ITEMS,
    MAX_TEXT_CHARS,
    content_text,
    flatten_text,
    has_visible_payload,
    normalize_content,
)

P = "messages[0].content"
CAT = "https://example.com/cat.png"
PNG = "data:image/png;base64,iVBORw0KGgo="


def _error(value: Any, param: str = P) -> ApiError:
    with pytest.raises(ApiError) as info:
        normalize_content(value, param)
    return info.value


# --- scalars -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, ""), ("", ""), ("hello", "hello"), ([], ""), (42, "42"), (True, "True")],
)
def test_scalars_and_empty(value: Any, expected: str) -> None:
    assert normalize_content(value, P) == expected


def test_oversize_string_is_truncated_not_rejected() -> None:
    assert normalize_content("x" * 100_000, P) == "x" * MAX_TEXT_CHARS


def test_limit_counts_characters_not_bytes() -> None:
    assert normalize_content("é" * MAX_TEXT_CHARS, P) == "é" * MAX_TEXT_CHARS


# --- text parts ----------------------------------------------------------------


@pytest.mark.parametrize("kind", ["text", "input_text", "output_text", " TEXT "])
def test_each_text_part_type(kind: str) -> None:
    assert normalize_content([{"type": kind, "text": "hi"}], P) == "hi"


def test_text_only_list_collapses_with_newlines() -> None:
    content = ["plain", {"type": "text", "text": "hi"}, {"type": "input_text", "text": "there"}]
    assert normalize_content(content, P) == "plain\nhi\nthere"


def test_empty_and_null_text_parts_are_dropped() -> None:
    content = [
        {"type": "text", "text": ""},
        {"type": "text"},
        {"type": "text", "text": None},
        "",
        {"type": "text", "text": "real"},
    ]
    assert normalize_content(content, P) == "real"


def test_non_string_text_is_stringified() -> None:
    assert normalize_content([{"type": "text", "text": 7}], P) == "7"


def test_oversize_text_part_is_truncated() -> None:
    out = normalize_content([{"type": "text", "text": "y" * 70_000}], P)
    assert out == "y" * MAX_TEXT_CHARS


def test_multimodal_path_has_no_total_cap_like_upstream() -> None:
    # Each part is capped, but upstream never caps their sum here.
    out = normalize_content(["a" * MAX_TEXT_CHARS, "b" * MAX_TEXT_CHARS], P)
    assert isinstance(out, str)
    assert len(out) == 2 * MAX_TEXT_CHARS + 1


def test_too_many_parts_are_dropped_not_rejected() -> None:
    content = [{"type": "text", "text": f"i{n}"} for n in range(MAX_LIST_ITEMS + 500)]
    out = normalize_content(content, P)
    assert isinstance(out, str)
    assert out.count("i") == MAX_LIST_ITEMS
    assert out.endswith(f"i{MAX_LIST_ITEMS - 1}")


def test_parts_past_the_limit_are_not_validated() -> None:
    content: list[Any] = ["x"] * MAX_LIST_ITEMS + [{"type": "bogus"}]
    assert normalize_content(content, P) == "\n".join(["x"] * MAX_LIST_ITEMS)


def test_non_dict_scalars_and_nested_lists_are_skipped() -> None:
    assert normalize_content([1, None, 2.5, ["nested"], "kept"], P) == "kept"


# --- image parts ---------------------------------------------------------------


def test_chat_completions_image_url_keeps_detail() -> None:
    content = [
        {"type": "text", "text": "What's this?"},
        {"type": "image_url", "image_url": {"url": CAT, "detail": "high"}},
    ]
    assert normalize_content(content, P) == content


def test_image_url_as_bare_string() -> None:
    out = normalize_content([{"type": "image_url", "image_url": CAT}], P)
    assert out == [{"type": "image_url", "image_url": {"url": CAT}}]


def test_responses_input_image_canonicalised() -> None:
    content = [
        {"type": "input_text", "text": "Describe."},
        {"type": "input_image", "image_url": f"  {CAT}  ", "detail": " low "},
    ]
    assert normalize_content(content, P) == [
        {"type": "text", "text": "Describe."},
        {"type": "image_url", "image_url": {"url": CAT, "detail": "low"}},
    ]


def test_input_image_with_object_and_nested_detail_wins() -> None:
    part = {"type": "input_image", "detail": "low", "image_url": {"url": CAT, "detail": "auto"}}
    assert normalize_content([part], P) == [
        {"type": "image_url", "image_url": {"url": CAT, "detail": "auto"}}
    ]


def test_nested_null_detail_drops_outer_detail() -> None:
    part = {"type": "input_image", "detail": "low", "image_url": {"url": CAT, "detail": None}}
    assert normalize_content([part], P) == [{"type": "image_url", "image_url": {"url": CAT}}]


@pytest.mark.parametrize("url", [CAT, "HTTP://EXAMPLE.COM/a.png", PNG, "DATA:IMAGE/jpeg,abc"])
def test_allowed_urls(url: str) -> None:
    out = normalize_content([{"type": "image_url", "image_url": {"url": url}}], P)
    assert out == [{"type": "image_url", "image_url": {"url": url}}]


@pytest.mark.parametrize(
    "url",
    ["javascript:alert(1)", "file:///etc/passwd", "ftp://example.com/a.png", "/tmp/a.png"],
)
def test_bad_scheme_is_invalid_image_url(url: str) -> None:
    err = _error([{"type": "image_url", "image_url": {"url": url}}])
    assert (err.status, err.code, err.param) == (400, "invalid_image_url", P)
    assert "http(s)" in err.message


@pytest.mark.parametrize("ref", [None, "", "   ", {"detail": "high"}, {"url": 5}, 12])
def test_missing_url_is_invalid_image_url(ref: Any) -> None:
    err = _error([{"type": "input_image", "image_url": ref}])
    assert err.code == "invalid_image_url"


@pytest.mark.parametrize(
    "url", ["data:text/plain;base64,aGk=", "data:application/pdf;base64,JVBE", "data:image/png"]
)
def test_non_image_or_malformed_data_url_is_unsupported(url: str) -> None:
    err = _error([{"type": "image_url", "image_url": url}])
    assert (err.status, err.code, err.param) == (400, "unsupported_content_type", P)


@pytest.mark.parametrize("detail", ["", "  ", 3, ["high"]])
def test_bad_detail_is_invalid_content_part(detail: Any) -> None:
    err = _error([{"type": "image_url", "image_url": {"url": CAT, "detail": detail}}])
    assert (err.code, err.param) == ("invalid_content_part", P)


# --- rejected part types -------------------------------------------------------


@pytest.mark.parametrize("part", [{"type": "audio"}, {"foo": "bar"}, {"type": None}])
def test_unknown_part_type_is_rejected(part: dict[str, Any]) -> None:
    err = _error(["ok", part])
    assert err.code == "unsupported_content_type"
    assert repr(part.get("type")) in err.message


@pytest.mark.parametrize("kind", ["file", "input_file"])
def test_file_parts_are_rejected(kind: str) -> None:
    err = _error([{"type": kind, "file_id": "f1"}])
    assert err.code == "unsupported_content_type"
    assert "files" in err.message


@pytest.mark.parametrize(
    "param", ["message", "input[2].content", "conversation_history[1].content"]
)
def test_param_is_the_callers_path(param: str) -> None:
    err = _error([{"type": "image_url", "image_url": "file:///x"}], param)
    assert err.param == param
    assert err.body()["error"]["param"] == param


# --- flatten_text (system messages) -----------------------------------------------


def test_flatten_drops_images_and_untyped_parts() -> None:
    content = [
        {"type": "text", "text": "check this:"},
        {"type": "image_url", "image_url": {"url": CAT}},
        {"foo": "bar"},
        {"type": "audio"},
    ]
    assert flatten_text(content) == "check this:"


@pytest.mark.parametrize(("value", "expected"), [(None, ""), (42, "42"), ([], ""), ("s", "s")])
def test_flatten_scalars(value: Any, expected: str) -> None:
    assert flatten_text(value) == expected


def test_flatten_follows_nesting_up_to_the_limit() -> None:
    assert flatten_text([["a", ["b"]], "c"]) == "a\nb\nc"
    deep: Any = "deep"
    for _ in range(12):
        deep = [deep]
    assert flatten_text(deep) == ""


def test_flatten_caps_total_and_list_size() -> None:
    assert len(flatten_text(["a" * 40_000, "b" * 40_000, "c"])) == MAX_TEXT_CHARS
    many = [{"type": "text", "text": "x"} for _ in range(2_000)]
    assert flatten_text(many).count("x") == MAX_LIST_ITEMS


# --- has_visible_payload / content_text -----------------------------------------------


@pytest.mark.parametrize(
    ("value", "visible"),
    [
        ("hi", True),
        ("   ", False),
        (None, False),
        ([], False),
        ([{"type": "text", "text": "  "}], False),
        ([{"type": "input_text", "text": "x"}], True),
        ([{"type": "image_url", "image_url": {"url": "x"}}], True),
        (["bare strings do not count"], False),
    ],
)
def test_has_visible_payload(value: Any, visible: bool) -> None:
    assert has_visible_payload(value) is visible


def test_content_text() -> None:
    assert content_text("hello") == "hello"
    assert content_text(None) == ""
    parts = normalize_content(
        [{"type": "text", "text": "look"}, {"type": "input_image", "image_url": CAT}], P
    )
    assert content_text(parts) == "look [image]"
    assert content_text([{"type": "image_url", "image_url": {"url": CAT}}]) == "[image]"
