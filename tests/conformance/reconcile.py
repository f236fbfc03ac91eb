"""How each allowlist entry (``allowlist.py``) reconciles one exchange: it checks that our
answer shows exactly the documented difference (a violation otherwise), then removes that
difference from both answers, so the rest of the exchange is still compared."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

from tests.conformance.compare import Difference
from tests.conformance.exchange import Exchange, Frame

CLOSERS = frozenset({"done", "[DONE]"})
CONTROLLED_REPLY = "⚠️ Provider authentication failed:"
MISSING_CREDENTIALS = "[missing credentials]"  # label tag of the scenario's exchanges
V19_401 = {"message": "Invalid API key", "type": "invalid_request_error", "code": "invalid_api_key"}
VL_401 = {
    "message": "Invalid gateway API key (API_SERVER_KEY)",
    "type": "gateway_auth_error",
    "param": None,
    "code": "gateway_auth_failed",
}
ZERO_USAGE = {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}
SESSION_CHAT = r"POST /api/sessions/\{sid\}/chat"
SESSION_STREAM = r"POST /api/sessions/\{sid\}/chat/stream"


@dataclass
class Pair:
    """One exchange as both servers answered it (normalised), being reconciled."""

    where: str
    up: Exchange
    us: Exchange
    noted: list[Difference] = field(default_factory=list)
    settled: bool = False  # an entry accounted for the whole exchange: nothing more to do

    def settle(self) -> None:
        """Our answer is the documented one and upstream's has nothing to compare with it."""
        self.us, self.settled = self.up, True

    def violation(self, entry: str, what: str, upstream: Any = None, ours: Any = None) -> None:
        self.noted.append(Difference(f"{self.where} › [{entry}] {what}", upstream, ours))

    def matches(self, pattern: str) -> bool:
        return re.fullmatch(pattern, self.up.label) is not None


def _frames(pair: Pair, *names: str) -> list[tuple[Frame, Frame | None]]:
    """Our frames of these names, each with upstream's frame at the same rank among them."""
    ours = [f for f in pair.us.frames or () if f.name in names]
    theirs = [f for f in pair.up.frames or () if f.name in names]
    return [(f, theirs[i] if i < len(theirs) else None) for i, f in enumerate(ours)]


def _error(exchange: Exchange) -> dict[str, Any]:
    body = exchange.body
    return body["error"] if isinstance(body, dict) and isinstance(body.get("error"), dict) else {}


# -- reconcilers: streams ------------------------------------------------------------------------


def _sse_ids(pair: Pair) -> None:
    """Ours: every frame but a closer and comments carries an ``id:`` of its own, never
    repeated; upstream: none. Then both lose them."""
    if pair.up.frames is None or pair.us.frames is None:
        return
    seen: set[str] = set()
    for index, frame in enumerate(pair.us.frames):
        if frame.comment is not None or frame.name in CLOSERS:
            continue
        if frame.id is None:
            pair.violation("sse-ids", f"frame {index + 1} {frame.name} has no id line")
        elif frame.id in seen:
            pair.violation(
                "sse-ids", f"frame {index + 1} {frame.name} repeats an id", None, frame.id
            )
        seen.add(frame.id or "")
    for index, frame in enumerate(pair.up.frames):
        if frame.id is not None:
            pair.violation("sse-ids", f"upstream frame {index + 1} has an id line", frame.id)
    pair.us = replace(pair.us, frames=[replace(f, id=None) for f in pair.us.frames])


def _chat_reasoning(pair: Pair) -> None:
    """Ours streams the model's reasoning as ``delta.reasoning_content`` chunks; upstream
    0.19 streams none. Each such chunk carries that and the assistant ``role`` (for strict
    clients, which refuse a chunk that says nothing they know), nothing else."""
    if pair.us.frames is None or not pair.matches(r"POST /v1/chat/completions.*"):
        return
    kept = []
    for frame in pair.us.frames:
        delta = _delta(frame.data) if frame.name.startswith("chunk.") else {}
        if "reasoning_content" in delta:
            if (
                set(delta) != {"role", "reasoning_content"}
                or delta["role"] != "assistant"
                or not isinstance(delta["reasoning_content"], str)
            ):
                pair.violation("chat-reasoning", "a reasoning chunk carries more", None, delta)
            continue
        kept.append(frame)
    pair.us = replace(pair.us, frames=kept)


def _delta(data: Any) -> dict[str, Any]:
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return {}
    delta = choices[0].get("delta")
    return delta if isinstance(delta, dict) else {}


def _runtime(pair: Pair) -> None:
    """VL's ``runtime`` on session chat answers and on the session stream's run.started,
    assistant.completed and run.completed; V19 has none."""
    holders: list[tuple[Any, Any]] = []
    if pair.matches(SESSION_CHAT) and isinstance(pair.us.body, dict):
        holders.append((pair.up.body, pair.us.body))
    if pair.matches(SESSION_STREAM):
        names = ("run.started", "assistant.completed", "run.completed")
        holders += [(up.data if up else {}, us.data) for us, up in _frames(pair, *names)]
    for theirs, ours in holders:
        if not isinstance(ours, dict) or "runtime" not in ours or "runtime" in (theirs or {}):
            continue
        runtime = ours.pop("runtime")
        wanted = {"provider", "model", "route_source", "model_lock"}
        if not isinstance(runtime, dict) or not wanted <= set(runtime):
            pair.violation(
                "vl-runtime", "runtime lacks provider/model/route_source/model_lock", None, runtime
            )


# -- reconcilers: bodies -------------------------------------------------------------------------


def _auth_401(pair: Pair) -> None:
    """VL's 401 body (``gateway_auth_failed``) where V19 answers ``invalid_api_key``."""
    if pair.up.status != 401 or pair.us.status != 401:
        return
    if _error(pair.up) != V19_401 or _error(pair.us) != VL_401:
        pair.violation("vl-401", "401 bodies are not V19's and VL's", pair.up.body, pair.us.body)
    pair.us = replace(pair.us, body=pair.up.body)


UPSTREAM_KEY_SETTING = "API_SERVER_KEY"
OUR_KEY_SETTING = "HERMES_QUEUE_API_KEY (or upstream's API_SERVER_KEY)"


def _key_setting(pair: Pair) -> None:
    """A 403 that asks for a gateway key names ours (``HERMES_QUEUE_API_KEY``) first, then
    upstream's; the rest of its message is upstream's word for word."""
    if pair.up.status != 403 or pair.us.status != 403:
        return
    theirs, ours = _error(pair.up), _error(pair.us)
    message = theirs.get("message")
    if not isinstance(message, str) or f"Configure {UPSTREAM_KEY_SETTING}" not in message:
        return
    expected = message.replace(f"Configure {UPSTREAM_KEY_SETTING}", f"Configure {OUR_KEY_SETTING}")
    if ours.get("message") != expected:
        pair.violation("key-setting", "the 403 does not name our key setting", expected, ours)
        return
    ours["message"] = message


def _pagination(pair: Pair) -> None:
    """VN's ``pagination`` block on a transcript (ours answers V19/VL clients the VN way)."""
    body = pair.us.body
    if not pair.matches(r"GET /api/sessions/.*/messages") or not isinstance(body, dict):
        return
    if "pagination" not in body or "pagination" in (pair.up.body or {}):
        return
    page = body.pop("pagination")
    if not (
        isinstance(page, dict)
        and page.get("order") in ("latest", "oldest")
        and page.get("returned") == len(body.get("data") or [])
        and isinstance(page.get("limit"), int)
        and isinstance(page.get("offset"), int)
    ):
        pair.violation("vn-pagination", "pagination block malformed", None, page)


def _health_version(pair: Pair) -> None:
    """``version`` is this server's own (hermes-queue's), not hermes-agent's."""
    if not pair.matches(r"GET (/v1)?/health") or not isinstance(pair.us.body, dict):
        return
    ours = pair.us.body.get("version")
    if not isinstance(ours, str) or not re.fullmatch(r"\d+\.\d+\.\d+\S*", ours):
        pair.violation("own-version", "version is not a version string", None, ours)
    pair.us.body["version"] = (pair.up.body or {}).get("version")


def _session_rows(pair: Pair) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Session objects in both answers, paired (a session resource, or a list of them)."""
    if not pair.matches(r".*/api/sessions.*") or pair.matches(r".*/messages"):
        return []
    up, us = pair.up.body, pair.us.body
    if not isinstance(up, dict) or not isinstance(us, dict):
        return []
    if isinstance(up.get("session"), dict) and isinstance(us.get("session"), dict):
        return [(up["session"], us["session"])]
    if isinstance(up.get("data"), list) and isinstance(us.get("data"), list):
        return [
            (a, b)
            for a, b in zip(up["data"], us["data"], strict=False)
            if isinstance(a, dict) and isinstance(b, dict)
        ]
    return []


def _session_model(pair: Pair) -> None:
    """A session created without a model: V19 stores the advertised alias (``hermes-agent``),
    VN (and ours) store none."""
    for theirs, ours in _session_rows(pair):
        if theirs.get("model") == "hermes-agent" and ours.get("model") is None:
            ours["model"] = "hermes-agent"


def _create_lock(pair: Pair) -> None:
    """A session created with a model holds VL's unconfirmed lock in its model config."""
    for theirs, ours in _session_rows(pair):
        if ours.get("has_model_config") and not theirs.get("has_model_config"):
            if ours.get("model") is not None and ours.get("parent_session_id") is None:
                ours["has_model_config"] = False


def _fork_marker(pair: Pair) -> None:
    """A fork carries VN's ``_branched_from`` marker in its model config."""
    for theirs, ours in _session_rows(pair):
        if ours.get("has_model_config") and not theirs.get("has_model_config"):
            if ours.get("parent_session_id") is not None:
                ours["has_model_config"] = False


def _agent_snapshots(pair: Pair) -> None:
    """After a turn, upstream's agent caches the system prompt it built and its model config on
    the session row (and a fork copies them); ours caches neither."""
    for theirs, ours in _session_rows(pair):
        if not theirs.get("message_count"):
            continue
        for flag in ("has_system_prompt", "has_model_config"):
            if theirs.get(flag) is True and ours.get(flag) is False:
                ours[flag] = True


def _fork_redirect(pair: Pair) -> None:
    """V19 answers a forked source's transcript with the fork's (its missing marker sends the
    source to the fork); VN and ours answer the source's own."""
    up, us = pair.up.body, pair.us.body
    if not pair.matches(r"GET /api/sessions/.*/messages") or pair.up.status != 200:
        return
    if not isinstance(up, dict) or not isinstance(us, dict):
        return
    moved, asked = up.get("session_id"), us.get("session_id")
    if moved == asked or not isinstance(moved, str):
        return
    if all(message.get("session_id") == moved for message in up.get("data") or ()):
        up["session_id"] = asked
        for message in up.get("data") or ():
            message["session_id"] = asked


def _capabilities(pair: Pair, entry: str, features: set[str], endpoints: set[str]) -> None:
    up, us = pair.up.body, pair.us.body
    if not pair.matches(r"GET /v1/capabilities") or pair.us.status != 200:
        return
    if not isinstance(us, dict):
        return
    for section, names in (("features", features), ("endpoints", endpoints)):
        theirs, ours = (up or {}).get(section) or {}, us.get(section) or {}
        for name in names:
            if name in theirs:
                continue
            if not ours.get(name):
                pair.violation(entry, f"{section}.{name} is not advertised", None, ours.get(name))
            ours.pop(name, None)


def _lock_capabilities(pair: Pair) -> None:
    """VL's session model lock: its feature flags and endpoint."""
    _capabilities(pair, "vl-lock", {"session_model_lock", "model_options"}, {"session_model_lock"})


def _steer_capabilities(pair: Pair) -> None:
    """VN's run steering: its feature flag and endpoint (0.19 has neither)."""
    _capabilities(pair, "vn-steer", {"run_steer"}, {"run_steer"})


def _queue_capabilities(pair: Pair) -> None:
    """Ours: resumable streams (feature and the resume endpoint), and a runtime description
    that says where turns run."""
    _capabilities(pair, "resumable", {"resumable_streams"}, {"session_chat_resume"})
    capabilities = pair.matches(r"GET /v1/capabilities") and pair.us.status == 200
    runtime = (pair.us.body or {}).get("runtime") if capabilities else None
    if isinstance(runtime, dict):
        text = runtime.get("description")
        if not isinstance(text, str) or "queue" not in text:
            pair.violation("resumable", "runtime.description does not name the queue", None, text)
        runtime["description"] = ((pair.up.body or {}).get("runtime") or {}).get("description")


JOB_ENDPOINTS = frozenset(
    {"jobs", "job_create", "job", "job_update", "job_delete", "job_pause", "job_resume", "job_run"}
)


def _jobs_capabilities(pair: Pair) -> None:
    """Ours: the jobs admin is served (workers fire the jobs), so it is advertised with its
    endpoints; upstream 0.19 advertises ``jobs_admin: false`` and no job endpoints."""
    _capabilities(pair, "jobs-admin", set(), set(JOB_ENDPOINTS))
    if not pair.matches(r"GET /v1/capabilities") or pair.us.status != 200:
        return
    ours = (pair.us.body or {}).get("features") or {}
    theirs = (pair.up.body or {}).get("features") or {}
    flag = ours.get("jobs_admin")
    if flag is not True:
        pair.violation("jobs-admin", "features.jobs_admin is not true", True, flag)
    if "jobs_admin" in theirs:
        ours["jobs_admin"] = theirs["jobs_admin"]
    else:
        ours.pop("jobs_admin", None)


def _error_details(pair: Pair) -> None:
    """Our error envelopes always carry ``param`` and ``code``, filled in where upstream leaves
    them null: the field at fault, a machine-readable code. Message, type and status are still
    compared."""
    theirs, ours = _error(pair.up), _error(pair.us)
    if pair.us.status < 400 or not ours:
        return
    for key in ("param", "code"):
        if key not in theirs:
            ours.pop(key, None)
        elif theirs[key] is None and isinstance(ours.get(key), str):
            ours[key] = None


def _run_fields(pair: Pair) -> None:
    """``attempt`` on every run status, ``reason`` on a failed one and on run.failed."""
    body = pair.us.body
    if isinstance(body, dict) and body.get("object") == "hermes.run":
        attempt = body.pop("attempt", None)
        if not isinstance(attempt, int) or attempt < 1:
            pair.violation("run-attempt", "hermes.run without an attempt number", None, attempt)
        if body.get("status") == "failed" and "reason" not in (pair.up.body or {}):
            if not isinstance(body.pop("reason", None), str):
                pair.violation("run-attempt", "a failed run without its reason")
    for frame, _ in _frames(pair, "run.failed"):
        if isinstance(frame.data, dict) and not isinstance(frame.data.pop("reason", None), str):
            pair.violation("run-attempt", "run.failed without its reason")


def _stop_finished(pair: Pair) -> None:
    """Stopping a run that already ended: VN answers its status object, V19 a 404."""
    if not pair.matches(r"POST /v1/runs/\{id\}/stop"):
        return
    if pair.up.status == 404 and _error(pair.up).get("code") == "run_not_found":
        body = pair.us.body if isinstance(pair.us.body, dict) else {}
        if (
            pair.us.status != 200
            or body.get("object") != "hermes.run"
            or body.get("status") not in ("completed", "failed", "cancelled")
        ):
            pair.violation("vn-stop", "not the finished run's status", None, pair.us.body)
        pair.settle()
