"""Session turns in the SQL store: the user message when a turn starts, the reply when it ends.

Writes are keyed by run (``<run_id>:user``, ``<run_id>:reply``), so a retried attempt never
duplicates a message, and a retry's history leaves out what its own earlier attempt wrote.
"""

from __future__ import annotations

import time
from typing import Any

from hermes_queue.agents.base import AgentResult
from hermes_queue.store.protocol import SessionStore


class SessionTurnLog:
    def __init__(self, store: SessionStore, run_id: str, session_id: str) -> None:
        self.store = store
        self.run_id = run_id
        self.session_id = session_id

    async def history(self) -> list[dict[str, Any]]:
        return await self.store.get_conversation(
            self.session_id, exclude_turn_prefix=f"{self.run_id}:"
        )

    async def record_user(self, message: Any) -> None:
        await self.store.append_messages(
            self.session_id,
            [{"role": "user", "content": message, "timestamp": time.time()}],
            turn_key=f"{self.run_id}:user",
        )

    async def record_reply(self, result: AgentResult) -> None:
        written = await self.store.append_messages(
            self.session_id, result.messages, turn_key=f"{self.run_id}:reply"
        )
        if written:
            await self.store.update_usage(
                self.session_id,
                input_tokens=result.usage.input_tokens,
                output_tokens=result.usage.output_tokens,
                api_calls=1,
            )
