"""Seeded random bodies for every POST endpoint (issue 12 §1, §2): each endpoint's own valid
body with one value replaced by something hostile (a lone surrogate, a NUL, deep nesting, an
unhashable value, a huge or non-finite number), random JSON, and bytes that are not UTF-8. Every
answer is below 500, in the JSON envelope (the jobs API's ``{"error": "…"}`` there), and a
stream that starts runs to its end. About 2 s: ``BODIES`` bodies per endpoint, seed ``SEED``."""

from __future__ import annotations

import asyncio
import json
import random
import re
from collections import Counter
from typing import Any

from aiohttp.test_utils import TestClient

from hermes_queue.api.ops.unsupported import is_not_implemented
from hermes_queue.api.routes import ROUTES
from hermes_queue.jobqueue.worker import WakeableWorker

SEED = 12
BODIES = 100
SESSION = "fuzz-session"
PATH_VALUES = {
    "session_id": SESSION,
    "run_id": "run_" + "0" * 32,
    "job_id": "0123456789ab",
    "delivery_id": "msg_" + "0" * 16 + "_run_" + "0" * 32,
}
VALID: dict[str, dict[str, Any]] = {
    "/v1/runs": {"input": "hi", "instructions": "x", "session_id": "s1"},
    "/v1/chat/completions": {"messages": [{"role": "user", "content": "hi"}], "stream": False},
    "/v1/responses": {"input": "hi", "store": False},
    "/api/sessions": {"id": "fz", "title": "t", "system_prompt": "p"},
    "/api/sessions/{session_id}/chat": {"message": "hi", "multitask_strategy": "enqueue"},
    "/api/sessions/{session_id}/chat/stream": {"message": "hi", "multitask_strategy": "enqueue"},
    "/api/sessions/{session_id}/fork": {"id": "fz-fork", "title": "f"},
    "/api/sessions/{session_id}/model": {"model": "m", "provider": "p"},
    "/v1/runs/{run_id}/approval": {"choice": "once", "request_id": "r"},
    "/api/jobs": {"name": "n", "schedule": "30m", "prompt": "p"},
}


def hostile(rng: random.Random) -> str:
    """One JSON value (as text) that decodes to something nothing downstream can take."""
    depth = rng.choice([63, 64, 65, 200, 950, 990, 3000])
    return rng.choice(
        [
            '"\\ud800"',
            '"a\\udfffb"',
            '"nul\\u0000byte"',
            "[" * depth + "]" * depth,
            '{"a":' * depth + "1" + "}" * depth,
            "[]",
            "{}",
            "[[], {}]",
            str(rng.choice([10**19, -(10**25), 10**4000])),
            "1e999",
            "-1e400",
            "NaN",
            "true",
            "null",
            json.dumps("x" * rng.randint(0, 70_000)),
        ]
    )


def random_json(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randint(0, 6 if depth < 4 else 3)
    if kind == 0:
        return rng.choice([None, True, False, 0, -1, 2**31, 1.5])
    if kind in (1, 2, 3):
        return "".join(chr(rng.randint(32, 0x2FFF)) for _ in range(rng.randint(0, 12)))
    if kind in (4, 5):
        return [random_json(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    keys = ["input", "message", "messages", "role", "content", "id", "model", "stream", "x"]
    return {rng.choice(keys): random_json(rng, depth + 1) for _ in range(rng.randint(0, 5))}


def body_for(path: str, rng: random.Random) -> bytes:
    kind = rng.random()
    if kind < 0.6:  # the endpoint's valid body, one value replaced by a hostile one
        valid = dict(VALID.get(path, {"x": 1}))
        key = rng.choice([*valid, "extra"])
        valid[key] = "\0HOSTILE\0"
        return json.dumps(valid).replace('"\\u0000HOSTILE\\u0000"', hostile(rng)).encode()
    if kind < 0.85:
        return json.dumps(random_json(rng)).encode()
    raw = bytes(rng.randint(0, 255) for _ in range(rng.randint(0, 40)))
    return rng.choice([raw, b'{"input": "' + raw + b'"}', b"\xff\xfe{}", b""])


def assert_envelope(path: str, status: int, payload: Any) -> None:
    assert status < 500, (path, status, payload)
    if status < 400:
        return
    if path.startswith("/api/jobs") and isinstance(payload.get("error"), str):
        return
    assert set(payload) == {"error"} and {"message", "type", "param", "code"} <= set(
        payload["error"]
    ), payload


async def send(api: TestClient, path: str, data: bytes) -> int:
    headers = {"Content-Type": "application/json"}
    async with api.post(path, data=data, headers=headers) as response:
        if response.content_type == "text/event-stream":
            assert response.status == 200
            text = (await response.read()).decode()
            assert "event: done" in text or "[DONE]" in text or "stream closed" in text, text[-300:]
            return response.status
        assert response.content_type == "application/json", (path, response.content_type)
        assert_envelope(path, response.status, await response.json())
        return response.status


async def test_random_bodies_never_get_a_5xx_or_leave_the_envelope(
    api: TestClient, worker: WakeableWorker
) -> None:
    assert (await api.post("/api/sessions", json={"id": SESSION})).status == 201
    rng = random.Random(SEED)
    posts = sorted(
        {r.path for r in ROUTES if r.method == "POST" and not is_not_implemented(r.handler)}
    )
    assert set(VALID) <= set(posts)
    statuses: Counter[int] = Counter()
    for path in posts:
        concrete = re.sub(r"{(\w+)}", lambda m: PATH_VALUES[m.group(1)], path)
        for _ in range(BODIES):
            statuses[await asyncio.wait_for(send(api, concrete, body_for(path, rng)), 30)] += 1
    assert sum(statuses.values()) == BODIES * len(posts)
    # Both refusals and accepted turns were exercised.
    assert statuses[400] > BODIES and sum(n for s, n in statuses.items() if s < 300) > 10, statuses
    assert (await api.get("/health")).status == 200
