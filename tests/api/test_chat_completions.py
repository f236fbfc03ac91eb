"""``/v1/chat/completions`` through the queue: non-stream, stream, sessions, failures."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from aiohttp.test_utils import TestClient

from hermes_queue.api.openai.chat_completions import derived_session_id
from hermes_queue.client import SSEFrame, iter_sse
from hermes_queue.config import Settings
from tests.support.inprocess import running_api


async def stream_frames(response: Any) -> list[SSEFrame]:
    return [f async for f in iter_sse(response) if f.data]


async def test_non_stream_completion(api: TestClient, worker: Any) -> None:
    body = {"model": "hermes-agent", "messages": [{"role": "user", "content": "hi there"}]}
    response = await api.post("/v1/chat/completions", json=body)
    assert response.status == 200
    payload = await response.json()
    assert payload["object"] == "chat.completion"
    assert payload["id"].startswith("chatcmpl-") and len(payload["id"]) == 38
    assert payload["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Echo: hi there"},
            "finish_reason": "stop",
        }
    ]
    assert payload["usage"] == {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}
    assert response.headers["X-Hermes-Session-Id"].startswith("api-")
    run = await (await api.get(f"/v1/runs/{response.headers['X-Hermes-Run-Id']}")).json()
    assert run["status"] == "completed"
    assert payload["created"] == int(run["created_at"])  # the run's own creation time


async def test_derived_session_id_is_stable_and_history_comes_from_the_request(
    api: TestClient, worker: Any
) -> None:
    system = {"role": "system", "content": "be kind"}
    first = await api.post(
        "/v1/chat/completions", json={"messages": [system, {"role": "user", "content": "one"}]}
    )
    second = await api.post(
        "/v1/chat/completions",
        json={
            "messages": [
                system,
                {"role": "user", "content": "one"},
                {"role": "assistant", "content": "Echo: one"},
                {"role": "user", "content": "two"},
            ]
        },
    )
    assert first.headers["X-Hermes-Session-Id"] == second.headers["X-Hermes-Session-Id"]
    reply = (await second.json())["choices"][0]["message"]["content"]
    assert reply == "Echo: two (turn 2)"


async def test_stream_chunks_tool_progress_reasoning_and_done(api: TestClient, worker: Any) -> None:
    body = {"stream": True, "messages": [{"role": "user", "content": "go [think] [tool:search]"}]}
    response = await api.post("/v1/chat/completions", json=body)
    assert response.status == 200 and response.headers["Content-Type"] == "text/event-stream"
    frames = await stream_frames(response)
    assert frames[-1].data == "[DONE]"
    chunks = [f.json() for f in frames if not f.event and f.data != "[DONE]"]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    assert {c["id"] for c in chunks} == {chunks[0]["id"]}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text == "Echo: go"
    assert any("reasoning_content" in c["choices"][0]["delta"] for c in chunks)
    final = chunks[-1]
    assert (
        final["choices"][0]["finish_reason"] == "stop" and final["usage"]["completion_tokens"] == 2
    )
    progress = [f.json() for f in frames if f.event == "hermes.tool.progress"]
    assert [p["status"] for p in progress] == ["running", "completed"]
    assert (
        progress[0]["tool"] == "search" and progress[0]["toolCallId"] == progress[1]["toolCallId"]
    )
    assert progress[0]["label"] and progress[0]["emoji"]
    # Every frame has an id of its own (the final chunk too); [DONE] closes without one.
    ids = [f.id for f in frames[:-1]]
    assert all(ids) and len(set(ids)) == len(ids) and not frames[-1].id


async def test_failure_with_partial_text_and_without(api: TestClient, worker: Any) -> None:
    partial = await api.post(
        "/v1/chat/completions", json={"messages": [{"role": "user", "content": "a b c d [fail]"}]}
    )
    assert partial.status == 200
    payload = await partial.json()
    assert payload["choices"][0]["finish_reason"] == "error"
    assert payload["choices"][0]["message"]["content"].startswith("Echo:")
    assert payload["hermes"]["failed"] is True and payload["hermes"]["error_code"] == "agent_error"
    assert payload["hermes"]["partial"] is True  # the agent said something before failing
    assert partial.headers["X-Hermes-Completed"] == "false"
    assert partial.headers["X-Hermes-Partial"] == "true"
    assert "failure" in partial.headers["X-Hermes-Error"]

    streamed = await api.post(
        "/v1/chat/completions",
        json={"stream": True, "messages": [{"role": "user", "content": "x [fail]"}]},
    )
    frames = await stream_frames(streamed)
    last_chunk = json.loads(frames[-2].data)
    assert frames[-1].data == "[DONE]"
    assert last_chunk["choices"][0]["finish_reason"] == "error"
    assert last_chunk["error"]["type"] == "agent_error"
    # As upstream's: usage (zeros for a failed turn), and whether any text went out.
    assert last_chunk["usage"] == {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    assert last_chunk["hermes"]["partial"] is True and last_chunk["hermes"]["failed"] is True
    assert frames[-2].id and not frames[-1].id


async def test_bad_requests(api: TestClient) -> None:
    cases = [
        ({}, "missing_messages"),
        ({"messages": []}, "missing_messages"),
        ({"messages": [{"role": "assistant", "content": "x"}]}, "missing_user_message"),
        ({"messages": ["nope"]}, "invalid_messages"),
        (
            {"messages": [{"role": "user", "content": [{"type": "audio"}]}]},
            "unsupported_content_type",
        ),
    ]
    for body, code in cases:
        response = await api.post("/v1/chat/completions", json=body)
        assert response.status == 400, body
        assert (await response.json())["error"]["code"] == code
    bad_header = await api.post(
        "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "x"}]},
        headers={"X-Hermes-Session-Id": "../etc"},
    )
    assert bad_header.status == 400


async def test_webui_style_client_keeps_one_server_side_session(
    session_api: TestClient, session_worker: Any
) -> None:
    headers = {"X-Hermes-Session-Id": "webui-conv-1", "X-Hermes-Session-Key": "webui:1"}
    system = {"role": "system", "content": "you are helpful"}
    replies = []
    for turn in ("first", "second", "third"):
        response = await session_api.post(
            "/v1/chat/completions",
            json={"messages": [system, {"role": "user", "content": turn}]},
            headers=headers,
        )
        assert response.status == 200
        assert response.headers["X-Hermes-Session-Id"] == "webui-conv-1"
        assert response.headers["X-Hermes-Session-Key"] == "webui:1"
        replies.append((await response.json())["choices"][0]["message"]["content"])
        session = (await (await session_api.get("/api/sessions/webui-conv-1")).json())["session"]
        assert session["message_count"] == 2 * len(replies)
    assert replies == ["Echo: first", "Echo: second (turn 2)", "Echo: third (turn 3)"]


async def finished_run(api: TestClient, run_id: str) -> dict[str, Any]:
    """The run's status once its events stream has ended (the stream ends with the run)."""
    events = await api.get(f"/v1/runs/{run_id}/events")
    assert [f async for f in iter_sse(events)][-1].comment == "stream closed"
    return dict(await (await api.get(f"/v1/runs/{run_id}")).json())


async def test_a_run_then_a_completion_on_its_session_see_the_whole_history(
    session_api: TestClient, session_worker: Any
) -> None:
    """hermes-webui's switch between its paths: a ``/v1/runs`` turn on a session, then a
    ``/v1/chat/completions`` turn with ``X-Hermes-Session-Id`` on the same session, which
    continues the conversation the run started (upstream's agent saves the run's turn)."""
    started = await session_api.post(
        "/v1/runs", json={"input": "my name is Ada", "session_id": "webui-conv-2"}
    )
    assert started.status == 202
    run = await finished_run(session_api, (await started.json())["run_id"])
    assert run["status"] == "completed" and run["output"] == "Echo: my name is Ada"
    stored = await (await session_api.get("/api/sessions/webui-conv-2/messages")).json()
    assert [(m["role"], m["content"]) for m in stored["data"]] == [
        ("user", "my name is Ada"),
        ("assistant", "Echo: my name is Ada"),
    ]
    response = await session_api.post(
        "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "what is my name"}]},
        headers={"X-Hermes-Session-Id": "webui-conv-2"},
    )
    reply = (await response.json())["choices"][0]["message"]["content"]
    assert reply == "Echo: what is my name (turn 2)"  # the run's turn was its history
    stored = await (await session_api.get("/api/sessions/webui-conv-2/messages")).json()
    assert len(stored["data"]) == 4


async def test_a_run_keeps_the_history_its_body_sends(
    session_api: TestClient, session_worker: Any
) -> None:
    """A run's history is the one its body sends, as upstream 0.19's: the stored transcript of
    its session is written, not read. Without ``session_id`` the run id names the session."""
    history = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    started = await session_api.post(
        "/v1/runs", json={"input": "c", "conversation_history": history}
    )
    run_id = (await started.json())["run_id"]
    run = await finished_run(session_api, run_id)
    assert run["output"] == "Echo: c (turn 2)" and run["session_id"] == run_id
    stored = await (await session_api.get(f"/api/sessions/{run_id}/messages")).json()
    assert [m["content"] for m in stored["data"]] == ["c", "Echo: c (turn 2)"]


async def test_a_run_checks_and_echoes_the_session_key(settings: Settings) -> None:
    """``X-Hermes-Session-Key`` on ``/v1/runs`` as on session chat: echoed on the 202, 400 when
    too long, 403 on a server without an API key."""
    async with running_api(settings) as api:
        started = await api.post(
            "/v1/runs", json={"input": "x"}, headers={"X-Hermes-Session-Key": "webui:7"}
        )
        assert started.status == 202 and started.headers["X-Hermes-Session-Key"] == "webui:7"
        refused = await api.post(
            "/v1/runs", json={"input": "x"}, headers={"X-Hermes-Session-Key": "k" * 257}
        )
        assert refused.status == 400
        assert (await refused.json())["error"]["code"] == "invalid_session_key"
    async with running_api(settings.replace(api_key="")) as keyless:
        refused = await keyless.post(
            "/v1/runs", json={"input": "x"}, headers={"X-Hermes-Session-Key": "webui:7"}
        )
        assert refused.status == 403
        assert "requires API key" in (await refused.json())["error"]["message"]


async def test_session_header_without_api_key_is_403(settings: Settings) -> None:
    async with running_api(settings.replace(api_key="")) as api:
        response = await api.post(
            "/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "x"}]},
            headers={"X-Hermes-Session-Id": "s1"},
        )
        assert response.status == 403


async def drop_after_three_frames(api: TestClient, **extra: Any) -> list[str]:
    """Stream a slow completion, leave after three frames, then read how its run ended."""
    content = "w " * 20 + "[slow:0.05]"
    body = {"stream": True, "messages": [{"role": "user", "content": content}], **extra}
    response = await api.post("/v1/chat/completions", json=body)
    run_id = response.headers["X-Hermes-Run-Id"]
    seen = 0
    async for frame in iter_sse(response):
        seen += bool(frame.data)
        if seen == 3:
            break
    response.close()
    rest = await api.get(f"/v1/runs/{run_id}/events")
    return [f.json()["event"] for f in await stream_frames(rest)]


async def test_dropped_stream_is_finished_on_the_runs_endpoint(
    api: TestClient, worker: Any
) -> None:
    assert (await drop_after_three_frames(api))[-1] == "run.completed"


async def test_dropped_stream_stops_the_turn_when_asked(api: TestClient, worker: Any) -> None:
    assert (await drop_after_three_frames(api, cancel_on_disconnect=True))[-1] == "run.cancelled"


def test_the_derived_session_id_hashes_the_first_message_as_upstream_prints_it() -> None:
    """Upstream hashes ``f"{system}\\n{first_user}"`` with the normalised content as Python
    prints it: an image in the first message makes another session than its text alone."""
    parts = [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
    ]
    seed = "Be brief.\n" + str(parts)
    assert derived_session_id("Be brief.", parts) == (
        "api-" + hashlib.sha256(seed.encode()).hexdigest()[:16]
    )
    assert derived_session_id("Be brief.", parts) != derived_session_id("Be brief.", "look")
