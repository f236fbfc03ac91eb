"""What aiohttp answers before any middleware (malformed requests) is our JSON envelope, and
idle, slow-header and slow-body connections are closed, while SSE streams are not (issue 12 §1,
§3). Raw sockets, because a client library cannot send these requests; the server is built by
``api_runner`` as every API process builds it."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from hermes_queue.api.app import create_app
from hermes_queue.api.middlewares import SECURITY_HEADERS
from hermes_queue.api.server import api_runner
from hermes_queue.config import Settings

IDLE = 0.5
BODY = 0.5


@pytest.fixture
async def port(settings: Settings) -> AsyncIterator[int]:
    settings = settings.replace(idle_timeout_seconds=IDLE, body_timeout_seconds=BODY)
    runner = api_runner(create_app(settings), settings.api)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield site.port
    finally:
        await runner.cleanup()


async def exchange(port: int, data: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send ``data``, read until the server closes; the status, headers and body."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 10)  # EOF: the server closed
    finally:
        writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines)
    return int(status_line.split()[1]), headers, body


@pytest.mark.parametrize(
    ("request_bytes", "code"),
    [
        (b"GET /caf\xc3\xa9\xff HTTP/1.1\r\nHost: t\r\n\r\n", "invalid_http_request"),
        (b"GET /" + b"a" * 8200 + b" HTTP/1.1\r\nHost: t\r\n\r\n", "request_too_large"),
        (
            b"GET /health HTTP/1.1\r\nHost: t\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n",
            "request_too_large",
        ),
        (b"GET * HTTP/1.1\r\nHost: t\r\n\r\n", "invalid_http_request"),
        (
            b"POST /v1/runs HTTP/1.1\r\nHost: t\r\nContent-Length: abc\r\n\r\n",
            "invalid_content_length",
        ),
        (
            b"POST /v1/runs HTTP/1.1\r\nHost: t\r\nContent-Length: -5\r\n\r\n",
            "invalid_content_length",
        ),
        (b"NOT HTTP AT ALL\r\n\r\n", "invalid_http_request"),
    ],
)
async def test_requests_the_http_parser_refuses_get_the_json_envelope(
    port: int, request_bytes: bytes, code: str
) -> None:
    status, headers, body = await exchange(port, request_bytes)
    assert status == 400
    assert headers["Content-Type"].startswith("application/json")
    for name, value in SECURITY_HEADERS.items():
        assert headers[name] == value
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["code"], error["type"]) == (code, "invalid_request_error")


async def test_the_server_still_answers_after_malformed_requests(port: int) -> None:
    await exchange(port, b"GET * HTTP/1.1\r\nHost: t\r\n\r\n")
    status, _, body = await exchange(port, b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n")
    assert status == 200 and json.loads(body)["status"] == "ok"


async def closed_within(reader: asyncio.StreamReader, seconds: float) -> float:
    """Seconds until the server closed the connection (fails if it did not within ``seconds``)."""
    started = time.monotonic()
    while await asyncio.wait_for(reader.read(65536), seconds):
        pass
    return time.monotonic() - started


async def test_a_connection_that_sends_nothing_is_closed(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        assert await closed_within(reader, IDLE * 10) >= IDLE * 0.5
    finally:
        writer.close()


async def test_headers_trickled_in_are_cut_off(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"GET /health HTTP/1.1\r\nHost: t\r\n")
        started = time.monotonic()

        async def trickle() -> None:
            while not writer.is_closing() and time.monotonic() - started < IDLE * 10:
                writer.write(b"X")
                await writer.drain()
                await asyncio.sleep(IDLE / 5)

        trickler = asyncio.ensure_future(trickle())
        try:
            await closed_within(reader, IDLE * 10)
        finally:
            trickler.cancel()
            await asyncio.gather(trickler, return_exceptions=True)
        assert time.monotonic() - started < IDLE * 10
    finally:
        writer.close()


async def test_a_body_trickled_in_is_408_and_the_connection_closed(
    port: int, settings: Settings
) -> None:
    head = (
        "POST /v1/runs HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {settings.api.api_key}\r\nContent-Length: 100\r\n\r\n"
    ).encode()
    status, _, body = await exchange(port, head + b'{"input": ')
    assert status == 408
    assert json.loads(body)["error"]["code"] == "request_timeout"


async def test_an_sse_stream_outlives_the_idle_timeout(port: int, settings: Settings) -> None:
    """No worker: the run stays queued and its stream sends keepalives, well past IDLE."""
    auth = f"Authorization: Bearer {settings.api.api_key}\r\n"
    body = b'{"input": "hi"}'
    _, _, created = await exchange(
        port,
        (
            f"POST /v1/runs HTTP/1.1\r\nHost: t\r\n{auth}Content-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode()
        + body,
    )
    run_id = json.loads(created)["run_id"]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"GET /v1/runs/{run_id}/events HTTP/1.1\r\nHost: t\r\n{auth}\r\n".encode())
        started, received = time.monotonic(), b""
        while time.monotonic() - started < IDLE * 4:
            chunk = await asyncio.wait_for(reader.read(65536), settings.api.keepalive_seconds * 3)
            assert chunk, "the stream was closed"
            received += chunk
        assert b"text/event-stream" in received and b": keepalive" in received
    finally:
        writer.close()
