"""``redis_url`` pointing at something that is not Redis (an HTTP server on that port): every
request that needs Redis answers 503 ``redis_unavailable`` (never 500), and the process logs
the state once, not a traceback per request or a warning per reaper pass."""

from __future__ import annotations

import logging

import pytest

from hermes_queue.config import Settings
from tests.support.inprocess import running_api
from tests.support.not_redis import http_server
from tests.support.polling import eventually


async def test_an_http_server_on_the_redis_port_is_503_redis_unavailable(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="hermes_queue")
    with http_server() as port:
        async with running_api(settings.replace(redis_url=f"redis://127.0.0.1:{port}/0")) as api:
            for _ in range(3):
                created = await api.post("/v1/runs", json={"input": "hi"})
                queue = await api.get("/v1/queue")
                for response in (created, queue):
                    assert response.status == 503
                    body = await response.json()
                    assert body["error"]["code"] == "redis_unavailable"
                    assert response.headers["Retry-After"] == "1"
            assert (await api.get("/health")).status == 200

            def reaper_retries() -> int:
                return sum(
                    "reaper: redis_url still failing" in r.getMessage() for r in caplog.records
                )

            await eventually(reaper_retries, lambda n: n >= 3, what="three reaper passes")

    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    requests = [m for m in warnings if m.startswith("API requests:")]
    assert len(requests) == 1, warnings
    assert "answers, but not as Redis (another service listens on that port)" in requests[0]
    assert "answering 503 redis_unavailable" in requests[0]
    assert len([m for m in warnings if m.startswith("reaper:")]) == 1, warnings
