"""Session turns in the SQL store: the user message when a turn starts, the reply when it ends.

What is stored follows Hermes' agent, which upstream lets save its turns: a multimodal user
message as text, and the session's accounting (tokens, cost estimate, the model that ran).

Writes are keyed by run (``<run_id>:user``, ``<run_id>:reply``), so a retried attempt never
duplicates a message, and a retry's history leaves out what its own earlier attempt wrote.
"""

from __future__ import annotations

import time
from typing import Any

from hermes_queue.agents.base import AgentResult
from hermes_queue.store.base import DEFAULT_SESSION_SOURCE, TurnUsage
from hermes_queue.store.protocol import SessionStore
from hermes_queue.tenancy.keys import DEFAULT_TENANT

IMAGE_PARTS = frozenset({"image", "image_url", "input_image"})


class SessionTurnLog:
    """The turn's writes to its session, as the run's tenant: a session that turns out to be
    another tenant's is not found (``SessionNotFound``), never written into."""

    def __init__(
        self, store: SessionStore, run_id: str, session_id: str, tenant: str = DEFAULT_TENANT
    ) -> None:
        self.store = store
        self.run_id = run_id
        self.session_id = session_id
        self.tenant = tenant

    async def start(
        self, message: Any, *, with_history: bool, create_session: bool = False
    ) -> list[dict[str, Any]] | None:
        """The turn's user message recorded and, ``with_history``, the session's history as
        the turn sees it (without what an earlier attempt of this run wrote), in one store
        operation. ``create_session``: the session is created with the message when missing
        (a ``/v1/runs`` turn's session, created on first use as upstream's agent does)."""
        return await self.store.start_turn(
            self.session_id,
            {"role": "user", "content": stored_content(message), "timestamp": time.time()},
            turn_key=f"{self.run_id}:user",
            create_source=DEFAULT_SESSION_SOURCE if create_session else None,
            history_excluding=f"{self.run_id}:" if with_history else None,
            tenant=self.tenant,
        )

    async def record_reply(self, result: AgentResult) -> None:
        """The reply's messages and, with them, the turn's usage (a retry writes neither)."""
        model = result.runtime.get("model")
        await self.store.append_messages(
            self.session_id,
            result.messages,
            turn_key=f"{self.run_id}:reply",
            tenant=self.tenant,
            usage=TurnUsage(
                input_tokens=result.usage.input_tokens,
                output_tokens=result.usage.output_tokens,
                api_calls=1,
                # As Hermes' agent accounts a turn: its cost estimate (0 when unpriced), and
                # the model that ran when the session names none.
                estimated_cost_usd=result.cost_usd or 0.0,
                model=model if isinstance(model, str) else None,
            ),
        )

    async def record_interrupted(self, done: list[dict[str, Any]], streamed: str) -> None:
        """A stopped turn's reply as far as its readers saw it (``interrupted_reply``), so the
        transcript keeps alternating and the next turn's model sees what was said."""
        await self.store.append_messages(
            self.session_id,
            interrupted_reply(done, streamed, time.time()),
            turn_key=f"{self.run_id}:reply",
            usage=TurnUsage(),
            tenant=self.tenant,
        )


# The ``finish_reason`` of a reply that a stop cut short.
INTERRUPTED = "interrupted"


def interrupted_reply(
    done: list[dict[str, Any]], streamed: str, now: float
) -> list[dict[str, Any]]:
    """What a stopped turn leaves in its transcript: the messages its backend finished
    (``done``), then the reply's text that was streamed but not yet in them, as an assistant
    message marked ``finish_reason: "interrupted"`` (upstream keeps a stopped turn's partial
    reply; its agent's history is its transcript). Without such text, the last finished
    assistant message is marked instead, or an empty marked one closes the turn, so a user
    message is always answered before the next."""
    said = "".join(str(m.get("content") or "") for m in done if m.get("role") == "assistant")
    if streamed.startswith(said):
        tail = streamed[len(said) :]
    else:  # the backend's messages do not read as the stream did: keep what was shown
        tail = "" if said else streamed
    if said and not tail.strip():  # what is left is the whitespace the backend trimmed
        tail = ""
    messages = [dict(message) for message in done]
    last = messages[-1] if messages else None
    if not tail and last and last.get("role") == "assistant" and not last.get("tool_calls"):
        last["finish_reason"] = INTERRUPTED
        return messages
    messages.append(
        {"role": "assistant", "content": tail, "finish_reason": INTERRUPTED, "timestamp": now}
    )
    return messages


def stored_content(content: Any) -> Any:
    """A user message as the transcript keeps it: content parts become their text, one line
    per part, ``[screenshot]`` in place of an image (as Hermes' agent saves it: images would
    bloat the store, and the turn that needed them already saw them)."""
    if not isinstance(content, list):
        return content
    lines = []
    for part in content:
        if not isinstance(part, dict):
            continue
        if part.get("type") == "text":
            lines.append(str(part.get("text", "")))
        elif part.get("type") in IMAGE_PARTS:
            lines.append("[screenshot]")
    return "\n".join(lines) if lines else None
