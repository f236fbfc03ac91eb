"""``MEDIA:/abs/path.png`` in a final reply becomes an inline ``data:`` image where upstream
inlines it: session chat (both), non-stream chat completions and Responses (upstream-api.md §1.4).
The fake LLM repeats the user's words, so the reply names an image the test wrote."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from tests.conformance.conftest import Sides
from tests.conformance.exchange import Side
from tests.conformance.scripts import PNG, conform, create_session


@pytest.fixture
def image(tmp_path: Path) -> Path:
    path = tmp_path / "chart.png"
    path.write_bytes(base64.b64decode(PNG.split(",", 1)[1]))
    return path


async def test_media_tags_in_a_reply_become_inline_images(sides: Sides, image: Path) -> None:
    sid = f"conf-{sides.nonce}"
    text = f"show it #{sides.nonce} MEDIA:{image}"

    async def script(side: Side) -> None:
        await create_session(side, sid)
        for path in ("chat", "chat/stream"):
            await side.call(
                "POST",
                f"/api/sessions/{sid}/{path}",
                json_body={"message": text},
                label=f"POST /api/sessions/{{sid}}/{path}",
            )
        await side.call(
            "POST",
            "/v1/chat/completions",
            json_body={"messages": [{"role": "user", "content": f"chat {text}"}]},
        )
        await side.call("POST", "/v1/responses", json_body={"input": f"respond {text}"})

    await conform(sides, script)
