"""The comparison machinery itself, without servers: what the normaliser hides, what the
comparer reports, that allowlist entries check what they accept, and that each entry points at
a real row of docs/compatibility.md."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.allowlist import ALLOWLIST
from tests.conformance.compare import Mismatch, assert_same, differences
from tests.conformance.exchange import Exchange, Frame, parse_sse
from tests.conformance.normalise import normalise

DOCS = Path(__file__).resolve().parents[2] / "docs" / "compatibility.md"
RUN_A, RUN_B = "run_" + "a" * 32, "run_" + "b" * 32


def stream(*frames: Frame, label: str = "POST /api/sessions/{sid}/chat/stream") -> Exchange:
    return Exchange(label, 200, {"Content-Type": "text/event-stream"}, frames=list(frames))


def frame(
    name: str, seq: int, run_id: str = RUN_A, sse_id: str | None = None, **data: Any
) -> Frame:
    payload = {**data, "session_id": "s1", "run_id": run_id, "seq": seq, "ts": 1.5}
    return Frame(event=name, data=payload, id=sse_id)


def test_sse_parsing_keeps_ids_comments_and_raw_data_and_drops_keepalives() -> None:
    text = 'id: 1-0\nevent: a\ndata: {"x": 1}\n\n: keepalive\n\ndata: [DONE]\n\n: stream closed\n\n'
    assert parse_sse(text) == [
        Frame(event="a", data={"x": 1}, id="1-0"),
        Frame(data="[DONE]"),
        Frame(comment="stream closed"),
    ]


def test_minted_ids_times_and_tokens_are_placeholders_that_keep_references() -> None:
    body = {
        "run_id": RUN_A,
        "other": RUN_B,
        "again": f"see {RUN_A}",
        "created_at": 12.5,
        "ended_at": None,
        "usage": {"input_tokens": 7, "output_tokens": 0},
    }
    (normalised,) = normalise([Exchange("GET /x", 200, {}, body=body)])
    assert normalised.body == {
        "run_id": "<run:1>",
        "other": "<run:2>",
        "again": "see <run:1>",
        "created_at": "<time>",
        "ended_at": None,
        "usage": {"input_tokens": "<tokens>", "output_tokens": 0},
    }


def test_a_missing_frame_is_reported_once_and_the_rest_still_compared() -> None:
    up = stream(frame("run.started", 1), frame("tool.progress", 2), frame("done", 3, x=1))
    us = stream(frame("run.started", 1, sse_id="1-0"), frame("done", 2, x=2))
    found = [d.where for d in differences([up], [us])]
    assert found == [
        "#1 POST /api/sessions/{sid}/chat/stream › frame 2 tool.progress",
        "#1 POST /api/sessions/{sid}/chat/stream › frame 3/2 done › data.x",
    ]


def test_frame_numbering_is_compared_as_a_scheme() -> None:
    up = stream(frame("a", 1), frame("b", 2), frame("done", 3))
    us = stream(frame("a", 1, sse_id="1-0"), frame("b", 2, sse_id="1-1"), frame("done", 2))
    (difference,) = differences([up], [us])
    assert difference.where.endswith("seq numbering")
    assert (difference.upstream, difference.ours) == ("1..n, one per frame", [1, 2, 2])


def test_the_sse_ids_entry_wants_an_id_of_its_own_on_every_frame_but_closers() -> None:
    up = stream(frame("a", 1), frame("b", 2), frame("done", 3))
    same = stream(frame("a", 1, sse_id="1-0"), frame("b", 2, sse_id="1-1"), frame("done", 3))
    assert differences([up], [same]) == []
    shared = stream(frame("a", 1, sse_id="1-0"), frame("b", 2, sse_id="1-0"), frame("done", 3))
    missing = stream(frame("a", 1, sse_id="1-0"), frame("b", 2), frame("done", 3))
    assert [d.where.split("› ")[-1] for d in differences([up], [shared])] == [
        "[sse-ids] frame 2 b repeats an id"
    ]
    assert [d.where.split("› ")[-1] for d in differences([up], [missing])] == [
        "[sse-ids] frame 2 b has no id line"
    ]


def test_an_allowed_addition_is_checked_not_just_dropped() -> None:
    label = "POST /api/sessions/{sid}/chat"
    up = Exchange(label, 200, {}, body={"message": {"content": "hi"}})
    good = {
        "message": {"content": "hi"},
        "runtime": dict.fromkeys(("provider", "model", "route_source", "model_lock"), ""),
    }
    assert differences([up], [Exchange(label, 200, {}, body=good)]) == []
    bad = {"message": {"content": "hi"}, "runtime": {"provider": "x"}}
    (difference,) = differences([up], [Exchange(label, 200, {}, body=bad)])
    assert "[vl-runtime]" in difference.where


def test_types_are_strict_and_the_message_names_both_sides() -> None:
    up = Exchange("GET /x", 200, {}, body={"flag": 1, "deleted": True})
    us = Exchange("GET /x", 200, {}, body={"flag": True, "deleted": True})
    with pytest.raises(Mismatch, match=r"(?s)body\.flag.*upstream: 1.*ours:     true"):
        assert_same([up], [us])


def test_every_allowlist_entry_points_at_a_row_of_the_compatibility_page() -> None:
    first_cells = [
        match.group(1).strip()
        for match in re.finditer(r"^\| (.+?) \|", DOCS.read_text(), flags=re.MULTILINE)
    ]
    keys = [entry.key for entry in ALLOWLIST]
    assert len(keys) == len(set(keys))
    for entry in ALLOWLIST:
        assert any(cell.startswith(entry.row) for cell in first_cells), entry.key
