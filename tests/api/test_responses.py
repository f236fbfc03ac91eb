"""``/v1/responses`` through the queue: objects, chaining, storage, streams and resume."""

from __future__ import annotations

from typing import Any

from aiohttp.test_utils import TestClient

from hermes_queue.client import iter_sse
from hermes_queue.config import Settings
from tests.support.inprocess import running_api
from tests.support.polling import eventually


async def create(api: TestClient, status: int = 200, **body: Any) -> dict[str, Any]:
    response = await api.post("/v1/responses", json=body)
    payload = await response.json()
    assert response.status == status, payload
    return dict(payload)


async def stored_response(api: TestClient, response_id: str) -> dict[str, Any]:
    return dict(await (await api.get(f"/v1/responses/{response_id}")).json())


def is_completed(response: dict[str, Any]) -> bool:
    return bool(response["status"] == "completed")


def text_of(response: dict[str, Any]) -> str:
    [message] = [item for item in response["output"] if item["type"] == "message"]
    return str(message["content"][0]["text"])


async def events(response: Any) -> list[dict[str, Any]]:
    frames = [f async for f in iter_sse(response) if f.data]
    out = []
    for frame in frames:
        payload = frame.json()
        assert payload["type"] == frame.event
        # Every frame's id is its sequence number, the Responses cursor.
        assert frame.id == str(payload["sequence_number"])
        out.append(payload)
    return out


async def test_string_input_gives_a_completed_response(api: TestClient, worker: Any) -> None:
    response = await api.post("/v1/responses", json={"input": "hello there"})
    assert response.status == 200
    body = await response.json()
    assert body["id"].startswith("resp_") and len(body["id"]) == 33
    assert body["object"] == "response" and body["status"] == "completed"
    assert body["model"] == "hermes-agent" and isinstance(body["created_at"], int)
    [message] = body["output"]
    assert message["type"] == "message" and message["role"] == "assistant"
    assert message["id"].startswith("msg_") and message["status"] == "completed"
    assert message["content"] == [
        {"type": "output_text", "text": "Echo: hello there", "annotations": []}
    ]
    assert body["usage"] == {"input_tokens": 2, "output_tokens": 3, "total_tokens": 5}
    assert response.headers["X-Hermes-Run-Id"].startswith("run_")
    assert response.headers["X-Hermes-Session-Id"]
    stored = await (await api.get(f"/v1/responses/{body['id']}")).json()
    assert stored == body


async def test_item_array_input_and_instructions(api: TestClient, worker: Any) -> None:
    body = await create(
        api,
        instructions="be brief",
        input=[
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "Echo: first"},
            {"role": "user", "content": [{"type": "input_text", "text": "second"}]},
        ],
    )
    # Earlier input items are history: the echo backend counts the turns it saw.
    assert text_of(body) == "Echo: second (turn 2)"
    assert body["instructions"] == "be brief"
    assert text_of(await create(api, input=["just strings"])) == "Echo: just strings"


async def test_chaining_carries_history_and_inherits_instructions(
    api: TestClient, worker: Any
) -> None:
    first = await api.post("/v1/responses", json={"input": "one", "instructions": "sys"})
    one = await first.json()
    second = await api.post(
        "/v1/responses", json={"input": "two", "previous_response_id": one["id"]}
    )
    two = await second.json()
    assert text_of(two) == "Echo: two (turn 2)"
    assert two["instructions"] == "sys" and two["previous_response_id"] == one["id"]
    assert second.headers["X-Hermes-Session-Id"] == first.headers["X-Hermes-Session-Id"]
    three = await create(api, input="three", previous_response_id=two["id"])
    assert text_of(three) == "Echo: three (turn 3)"
    # Explicit history wins over the chain; truncation keeps the tail.
    explicit = await create(api, input="x", previous_response_id=two["id"], conversation_history=[])
    assert text_of(explicit) == "Echo: x"


async def test_conversation_names(api: TestClient, worker: Any) -> None:
    assert text_of(await create(api, input="a", conversation="chat-1")) == "Echo: a"
    assert text_of(await create(api, input="b", conversation="chat-1")) == "Echo: b (turn 2)"
    assert text_of(await create(api, input="c", conversation="other")) == "Echo: c"


async def test_store_false_get_and_delete(api: TestClient, worker: Any) -> None:
    unstored = await create(api, input="secret", store=False)
    assert unstored["status"] == "completed"
    missing = await api.get(f"/v1/responses/{unstored['id']}")
    assert missing.status == 404
    assert (await missing.json())["error"]["message"] == f"Response not found: {unstored['id']}"
    kept = await create(api, input="kept")
    deleted = await api.delete(f"/v1/responses/{kept['id']}")
    assert await deleted.json() == {"id": kept["id"], "object": "response", "deleted": True}
    assert (await api.get(f"/v1/responses/{kept['id']}")).status == 404
    assert (await api.delete(f"/v1/responses/{kept['id']}")).status == 404


async def test_bad_requests(api: TestClient) -> None:
    assert (await create(api, 400))["error"]["code"] == "missing_input"
    assert (await create(api, 400, input=[]))["error"]["code"] == "missing_input"
    unknown = await create(api, 404, input="x", previous_response_id="resp_nope")
    assert unknown["error"] == {
        "message": "Previous response not found: resp_nope",
        "type": "invalid_request_error",
        "param": None,
        "code": "response_not_found",
    }
    both = await create(api, 400, input="x", previous_response_id="resp_a", conversation="c")
    assert both["error"]["code"] == "conflicting_history"
    bad = await api.get("/v1/responses/resp_x?stream=true&starting_after=abc")
    assert bad.status == 400
    assert (await bad.json())["error"]["code"] == "invalid_starting_after"


async def test_tool_items_and_failure(api: TestClient, worker: Any) -> None:
    body = await create(api, input="look [tool:search]")
    kinds = [item["type"] for item in body["output"]]
    assert kinds == ["message", "function_call", "function_call_output"]
    call, result = body["output"][1], body["output"][2]
    assert call["name"] == "search" and call["call_id"] == result["call_id"]
    assert call["status"] == "completed" and '"query"' in call["arguments"]
    assert result["output"] == "ok"  # the text, as upstream's non-stream object (a stream: parts)
    # The chained transcript holds the tool messages too.
    nxt = await create(api, input="next", previous_response_id=body["id"])
    assert text_of(nxt) == "Echo: next (turn 2)"

    failed = await api.post("/v1/responses", json={"input": "boom [fail]"})
    assert failed.status == 500
    error = (await failed.json())["error"]
    assert error["code"] == "response_failed" and error["type"] == "server_error"
    stored = await (await api.get(f"/v1/responses/{error['response_id']}")).json()
    assert stored["status"] == "failed"
    assert stored["error"] == {"message": "echo backend failure requested", "type": "server_error"}


EXPECTED_TOOL_STREAM = [
    "response.created",
    "response.output_item.added",
    "response.output_text.delta",
    "response.output_item.added",
    "response.output_item.done",
    "response.output_item.added",
    "response.output_item.done",
    "response.output_text.delta",
    "response.output_text.done",
    "response.output_item.done",
    "response.completed",
]


async def test_stream_event_order_and_sequence_numbers(api: TestClient, worker: Any) -> None:
    response = await api.post("/v1/responses", json={"input": "go [tool:x]", "stream": True})
    assert response.status == 200 and response.headers["Content-Type"] == "text/event-stream"
    got = await events(response)
    assert [e["sequence_number"] for e in got] == list(range(len(got)))
    # Deltas are one per token; collapse runs of them to compare the shape.
    shape = [e["type"] for i, e in enumerate(got) if i == 0 or e["type"] != got[i - 1]["type"]]
    assert shape == EXPECTED_TOOL_STREAM
    created, completed = got[0]["response"], got[-1]["response"]
    assert created["status"] == "in_progress" and created["output"] == []
    assert completed["status"] == "completed" and completed["usage"]["output_tokens"] > 0
    deltas = [e for e in got if e["type"] == "response.output_text.delta"]
    assert {(d["output_index"], d["content_index"]) for d in deltas} == {(0, 0)}
    assert deltas[0]["logprobs"] == [] and deltas[0]["item_id"].startswith("msg_")
    assert "".join(d["delta"] for d in deltas) == "Echo: go"
    done = next(e for e in got if e["type"] == "response.output_text.done")
    assert done["text"] == "Echo: go"
    fc, fco = [e["item"] for e in got if e["type"] == "response.output_item.added"][1:]
    assert fc["type"] == "function_call" and fc["status"] == "in_progress" and fc["name"] == "x"
    assert fco["output"] == [{"type": "input_text", "text": "ok"}]  # a stream's: a part list
    # Stored once the run ended, identical to the streamed envelope.
    stored = await eventually(lambda: stored_response(api, completed["id"]), is_completed, within=5)
    assert stored == completed


async def test_stream_failure_ends_with_response_failed(api: TestClient, worker: Any) -> None:
    response = await api.post("/v1/responses", json={"input": "a b [fail]", "stream": True})
    got = await events(response)
    assert got[-1]["type"] == "response.failed"
    assert got[-1]["response"]["error"]["type"] == "server_error"
    assert got[-1]["response"]["status"] == "failed"


async def test_resume_with_starting_after_on_a_second_api(
    api: TestClient, worker: Any, settings: Settings
) -> None:
    response = await api.post("/v1/responses", json={"input": "resume me [tool:t]", "stream": True})
    first = await events(response)
    response_id = first[0]["response"]["id"]
    async with running_api(settings) as other:
        resumed = await other.get(
            f"/v1/responses/{response_id}", params={"stream": "true", "starting_after": "3"}
        )
        assert resumed.status == 200
        rest = await events(resumed)
        assert rest == first[4:]
        # A frame's id is its sequence number, so Last-Event-ID resumes the same way.
        by_id = await other.get(
            f"/v1/responses/{response_id}?stream=true", headers={"Last-Event-ID": "3"}
        )
        assert await events(by_id) == first[4:]
        whole = await other.get(f"/v1/responses/{response_id}?stream=true")
        assert await events(whole) == first


async def test_background_is_queued_then_completed(api: TestClient, worker: Any) -> None:
    body = await create(api, input="later", background=True)
    assert body["status"] == "queued" and body["output"] == [] and body["background"] is True

    def settled(polled: dict[str, Any]) -> bool:
        assert polled["status"] in ("queued", "in_progress", "completed")
        return is_completed(polled)

    polled = await eventually(lambda: stored_response(api, body["id"]), settled, within=5)
    assert text_of(polled) == "Echo: later"
    assert (await create(api, 400, input="x", background=True, store=False))["error"]["code"]


async def test_background_is_settled_by_another_replica(settings: Settings) -> None:
    """The creating API is gone before the run runs: a GET elsewhere settles the response."""
    async with running_api(settings) as first:
        body = await create(first, input="orphan", background=True)
    from tests.support.inprocess import running_worker

    async with running_worker(settings), running_api(settings) as second:
        polled = await eventually(lambda: stored_response(second, body["id"]), is_completed)
        assert text_of(polled) == "Echo: orphan"


async def test_truncation_auto_keeps_the_last_100_history_items(
    api: TestClient, worker: Any
) -> None:
    history = [{"role": "user", "content": f"m{i}"} for i in range(150)]
    full = await create(api, input="x", conversation_history=history)
    assert text_of(full) == "Echo: x (turn 151)"
    cut = await create(api, input="x", conversation_history=history, truncation="auto")
    assert text_of(cut) == "Echo: x (turn 101)"
