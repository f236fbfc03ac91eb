"""Span and attribute names, in one place (imported by the SDK-side modules only).

Operators filter on these; none carries message text, a tool's arguments or results, an
approval's command, or a credential. GenAI attributes follow the OpenTelemetry GenAI semantic
conventions where one fits (``gen_ai.*``); ours are under ``hermes_queue.``.
"""

from __future__ import annotations

# Spans.
ENQUEUE = "enqueue"
QUEUE_WAIT = "queue.wait"
CLAIM = "run.claim"
TURN = "agent.turn"
FINISH = "run.finish"
APPROVAL = "approval.wait"
FIRST_FRAME = "reader.first_frame"
MODEL_CALL = "chat"  # + " " + the model, as the GenAI conventions name an inference span
TOOL_CALL = "execute_tool"  # + " " + the tool's name
WEBHOOK_ATTEMPT = "webhook.attempt"

# Our attributes.
RUN_ID = "hermes_queue.run.id"
SESSION_ID = "hermes_queue.session.id"
ATTEMPT = "hermes_queue.attempt"
WORKER_ID = "hermes_queue.worker.id"
OUTCOME = "hermes_queue.outcome"
RUN_STATUS = "hermes_queue.run.status"
FAIL_REASON = "hermes_queue.fail_reason"
REQUEST_ID = "hermes_queue.request.id"
APPROVAL_CHOICE = "hermes_queue.approval.choice"
EVENT_SEQ = "hermes_queue.event.seq"
STEPS = "hermes_queue.steps"
VALID_THROUGH = "hermes_queue.valid_through"
PREVIOUS_ATTEMPT = "hermes_queue.previous_attempt"
WORKERS_LOST = "hermes_queue.workers_lost"
REASON = "hermes_queue.reason"
TOOL_LOST = "hermes_queue.tool.lost"
WEBHOOK_DELIVERY_ID = "hermes_queue.webhook.id"
WEBHOOK_EVENT = "hermes_queue.webhook.event"
WEBHOOK_TARGET = "hermes_queue.webhook.target"
WEBHOOK_RESULT = "hermes_queue.webhook.result"

# GenAI semantic conventions.
OPERATION = "gen_ai.operation.name"
SYSTEM = "gen_ai.system"
PROVIDER = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
FINISH_REASONS = "gen_ai.response.finish_reasons"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
TIME_TO_FIRST_CHUNK = "gen_ai.response.time_to_first_chunk"
CONVERSATION_ID = "gen_ai.conversation.id"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
ERROR_TYPE = "error.type"

# HTTP semantic conventions.
HTTP_METHOD = "http.request.method"
HTTP_ROUTE = "http.route"
HTTP_STATUS = "http.response.status_code"
URL_PATH = "url.path"
