"""``subagent.start`` / ``subagent.complete``: rendered on the runs stream as upstream forwards
them (upstream-api.md §3.3), and skipped by every other dialect, whose upstream sends nothing."""

from __future__ import annotations

from typing import Any

from aiohttp.test_utils import TestClient

from hermes_queue.api.hermes.render import SessionStream, render_runs
from hermes_queue.api.openai.chat_render import ChatStream
from hermes_queue.api.openai.responses_render import ResponseFold, ResponseMeta
from hermes_queue.config import Settings
from hermes_queue.events import SUBAGENT_FIELDS, EventType, RunEvent
from hermes_queue.runs.model import NewRun
from hermes_queue.runs.placement import new_run_id
from hermes_queue.runs.repository import RunRepository
from hermes_queue.runs.turn_request import TurnRequest
from hermes_queue.workers.sink import RunEventSink
from tests.api.test_runs_inprocess import read_all

START = {"goal": "survey the logs", "preview": "survey the logs", "task_index": 0, "depth": 0}
COMPLETE = {
    "status": "completed",
    "summary": "Found 3 errors",
    "duration_seconds": 1.25,
    "api_calls": 2,
    "files_read": ["/var/log/app.log"],
    "output_tail": [{"tool": "read_file", "preview": "ERROR x", "is_error": False}],
}


def event(kind: EventType, data: dict[str, Any], seq: int = 3) -> RunEvent:
    return RunEvent(type=kind, run_id="run_abc", session_id="s", seq=seq, ts=12.5, data=data)


def test_runs_dialect_renders_an_unnamed_frame_with_the_fields() -> None:
    [(name, payload, _)] = render_runs(event(EventType.SUBAGENT_START, START))
    assert name is None
    assert payload == {"event": "subagent.start", "run_id": "run_abc", "timestamp": 12.5, **START}
    [(name, payload, _)] = render_runs(event(EventType.SUBAGENT_COMPLETE, COMPLETE))
    assert name is None and payload["event"] == "subagent.complete"
    assert {k: v for k, v in payload.items() if k in COMPLETE} == COMPLETE


def test_runs_dialect_renders_only_whitelisted_fields() -> None:
    """A stored event is rendered through the same whitelist its producer applied, so a field
    that slipped into the data (``toolsets`` is one Hermes sends) never reaches a client."""
    data = {**START, "toolsets": ["terminal"], "args": {"x": 1}}
    [(_, payload, _)] = render_runs(event(EventType.SUBAGENT_START, data))
    assert set(payload) - {"event", "run_id", "timestamp"} <= set(SUBAGENT_FIELDS)
    assert "toolsets" not in payload and "args" not in payload


def test_other_dialects_skip_subagent_events() -> None:
    for kind, data in ((EventType.SUBAGENT_START, START), (EventType.SUBAGENT_COMPLETE, COMPLETE)):
        assert list(SessionStream()(event(kind, data))) == []
        assert list(ChatStream("chatcmpl-x", 1, "m")(event(kind, data))) == []


def test_responses_fold_skips_subagent_events_between_others() -> None:
    fold = ResponseFold(ResponseMeta(id="resp_x", run_id="run_abc", created_at=1, model="m"))
    fold.feed(event(EventType.MESSAGE_DELTA, {"delta": "hi"}, seq=1))
    before = (fold.sequence, fold.snapshot())
    assert fold.feed(event(EventType.SUBAGENT_START, START, seq=2)) == []
    assert fold.feed(event(EventType.SUBAGENT_COMPLETE, COMPLETE, seq=3)) == []
    assert (fold.sequence, fold.snapshot()) == before
    frames = fold.feed(event(EventType.RUN_COMPLETED, {"output": "hi"}, seq=4))
    assert frames[-1][0] == "response.completed"


async def test_a_workers_subagent_events_reach_the_runs_stream(
    api: TestClient, redis: Any, settings: Settings
) -> None:
    """The worker's sink appends them on its usual path; any replica's SSE renders them."""
    repo = RunRepository(redis, settings.redis.keys, settings.runs)
    run_id = new_run_id()
    await repo.create(NewRun(run_id, "s", TurnRequest()))
    attempt = await repo.claim(run_id, "w")
    assert attempt is not None
    sink = RunEventSink(attempt)
    await sink.subagent("start", START)
    await sink.subagent("complete", COMPLETE)
    await sink.flush()
    await attempt.complete(output="ok", usage={}, messages=[], runtime=None)
    frames = [payload for _, payload in await read_all(api, run_id) if payload]
    assert [f["event"] for f in frames] == ["subagent.start", "subagent.complete", "run.completed"]
    assert frames[0]["goal"] == "survey the logs" and frames[0]["run_id"] == run_id
    assert frames[1]["status"] == "completed" and frames[1]["output_tail"][0]["tool"] == "read_file"
