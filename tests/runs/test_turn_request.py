"""The turn request through the run record, across versions: what one release's API writes,
another release's worker or API reads (rolling upgrades share one Redis)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hermes_queue.config import Settings
from hermes_queue.runs.model import NewRun
from hermes_queue.runs.placement import new_run_id
from hermes_queue.runs.repository import RunRepository
from hermes_queue.runs.turn_request import (
    TURN_REQUEST_VERSION,
    ResponseSettings,
    TurnRequest,
)

RESPONSE_TURN = TurnRequest(
    message=[{"type": "text", "text": "héllo"}],
    history=[{"role": "user", "content": "before"}, {"role": "assistant", "content": "ok"}],
    instructions="be brief",
    response=ResponseSettings(
        created_at=1712345678, model="m", previous_response_id="resp_1", store=False
    ),
)


async def test_a_turn_comes_back_from_the_run_record_as_written(
    redis: Any, settings: Settings
) -> None:
    repo = RunRepository(redis, settings.redis.keys, settings.runs)
    for turn in (RESPONSE_TURN, TurnRequest("hi", instructions=None, path_id="s_addressed")):
        run_id = new_run_id()
        assert await repo.create(NewRun(run_id, "s", turn))
        record = await repo.get(run_id)
        assert record is not None and record.request == turn


def test_the_writer_says_its_version_and_keeps_the_field_names_older_readers_use() -> None:
    written = RESPONSE_TURN.to_json()
    assert written["v"] == TURN_REQUEST_VERSION
    assert {"message", "history", "instructions", "response"} <= written.keys()
    assert written["response"]["store"] is False and "path_id" not in written


@pytest.mark.parametrize(
    ("stored", "expected"),
    [
        # Unversioned records, as the four endpoints wrote them before ``v`` existed.
        ({"message": "hi", "history": [], "instructions": None}, TurnRequest("hi")),
        (
            {"message": "m", "instructions": "sys", "path_id": "s1"},
            TurnRequest("m", instructions="sys", path_id="s1"),
        ),
        (
            {
                "message": "q",
                "history": [{"role": "user", "content": "a"}],
                "instructions": None,
                "response": {"created_at": 5, "model": "x", "store": True, "background": True},
            },
            TurnRequest(
                "q",
                [{"role": "user", "content": "a"}],
                response=ResponseSettings(created_at=5, model="x", background=True),
            ),
        ),
        # A newer writer's record: unknown fields are ignored, known ones read as ever.
        ({"v": TURN_REQUEST_VERSION + 1, "message": "hi", "attachments": [1]}, TurnRequest("hi")),
        # Malformed or missing fields take their defaults instead of failing the run.
        ({"message": 7, "history": "nope", "instructions": 3}, TurnRequest("")),
        ({}, TurnRequest("")),
        ([], TurnRequest("")),
    ],
)
def test_any_version_decodes(stored: Any, expected: TurnRequest) -> None:
    assert TurnRequest.from_json(json.loads(json.dumps(stored))) == expected
