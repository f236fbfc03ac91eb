"""Reconcilers for a whole turn's answer (see ``reconcile.py``): how a failed turn and a
provider without credentials are reported, and the fields and item order of Responses
objects."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tests.conformance.exchange import Exchange, Frame
from tests.conformance.reconcile import (
    CONTROLLED_REPLY,
    MISSING_CREDENTIALS,
    SESSION_CHAT,
    SESSION_STREAM,
    ZERO_USAGE,
    Pair,
    _error,
)


def _failed_turn(pair: Pair) -> None:
    """A provider failure (Hermes' failed result) is reported as a failure; upstream 0.19
    presents its error text as the assistant's answer (zero usage) on session chat, the
    session stream and Responses. Ours must carry that same text as the error."""
    up, us = pair.up, pair.us
    if pair.matches(SESSION_CHAT) and up.status == 200 and us.status == 500:
        reply = (up.body or {}).get("message", {}).get("content")
        if (up.body or {}).get("usage") == ZERO_USAGE:
            error = _error(us)
            _same_failure(pair, reply, error.get("message"), error.get("code"), "agent_error")
            pair.settle()
    elif pair.matches(SESSION_STREAM) and up.frames is not None and us.frames is not None:
        completed = [f for f in up.frames if f.name == "run.completed"]
        errors = [f for f in us.frames if f.name == "error"]
        if completed and completed[0].data.get("usage") == ZERO_USAGE and errors:
            reply = next(f.data["content"] for f in up.frames if f.name == "assistant.completed")
            _same_failure(pair, reply, errors[0].data.get("message"))
            # Upstream's reply frames become the one error frame ours sends in their place.
            frames, shown = [], False
            for frame in up.frames:
                if frame.name in ("assistant.completed", "run.completed"):
                    if not shown:
                        data = {
                            k: v
                            for k, v in frame.data.items()
                            if k in ("session_id", "run_id", "seq", "ts")
                        }
                        frames.append(Frame(event="error", data={"message": reply, **data}))
                        shown = True
                    continue
                frames.append(frame)
            pair.up = replace(up, frames=frames)
    elif pair.matches(r"POST /v1/responses") and up.status == 200:
        failed = _responses_failure(us)
        if failed is not None and (_responses_usage(up) == ZERO_USAGE):
            _same_failure(pair, _responses_text(up), failed)
            pair.settle()


def _same_failure(pair: Pair, reply: Any, message: Any, code: Any = None, want: Any = None) -> None:
    if not isinstance(reply, str) or message != reply or code != want:
        pair.violation("failed-turn", "our failure does not carry upstream's text", reply, message)


def _responses_failure(exchange: Exchange) -> str | None:
    if exchange.frames is not None:
        failed = [f for f in exchange.frames if f.name == "response.failed"]
        return failed[0].data["response"]["error"]["message"] if failed else None
    if exchange.status == 500 and _error(exchange).get("code") == "response_failed":
        return str(_error(exchange).get("message"))
    return None


def _responses_final(exchange: Exchange) -> dict[str, Any]:
    if exchange.frames is not None:
        done = [f for f in exchange.frames if f.name == "response.completed"]
        return done[0].data["response"] if done else {}
    return exchange.body if isinstance(exchange.body, dict) else {}


def _responses_usage(exchange: Exchange) -> Any:
    return _responses_final(exchange).get("usage")


def _responses_text(exchange: Exchange) -> Any:
    for item in _responses_final(exchange).get("output") or ():
        if item.get("type") == "message":
            return item["content"][0]["text"]
    return None


def _provider_auth(pair: Pair) -> None:
    """A provider without credentials fails closed with VL's controlled reply; V19 silently
    uses the global credentials instead, so there is nothing of upstream's to compare."""
    if MISSING_CREDENTIALS not in pair.up.label:
        return
    text = _controlled_text(pair.us)
    if not isinstance(text, str) or not text.startswith(CONTROLLED_REPLY):
        pair.violation("vl-provider-auth", "not the controlled reply", None, text)
    pair.settle()


def _controlled_text(exchange: Exchange) -> Any:
    """Where each dialect puts the controlled reply (with zero usage where it has usage)."""
    body = exchange.body if isinstance(exchange.body, dict) else {}
    if exchange.frames is not None:
        texts = [
            f.data.get("error")
            if f.name == "run.failed"
            else f.data["choices"][0]["delta"].get("content")
            for f in exchange.frames
            if f.name in ("run.failed", "chunk.content")
        ]
        return "".join(t for t in texts if isinstance(t, str)) or None
    if body.get("object") == "chat.completion" and body["usage"]["total_tokens"] == 0:
        return body["choices"][0]["message"]["content"]
    if body.get("object") == "response" and body.get("usage") == ZERO_USAGE:
        return _responses_text(exchange)
    if body.get("object") == "hermes.run" and body.get("status") == "failed":
        return body.get("error")
    return None


RESPONSE_EXTRAS = (
    "error",
    "incomplete_details",
    "instructions",
    "previous_response_id",
    "store",
    "background",
)
ITEM_EXTRAS = ("id", "status")


def _responses_shape(pair: Pair) -> None:
    """Ours sends OpenAI's full Response object: ``error``, ``incomplete_details``,
    ``instructions``, ``previous_response_id``, ``store``, ``background`` (and ``usage: null``
    until known) on
    the response; ``id`` and ``status`` on every output item; ``annotations: []`` on text.
    Upstream 0.19 omits them. Every other field is compared."""
    for theirs, ours in _response_pairs(pair):
        for key in RESPONSE_EXTRAS:
            if key in ours and key not in theirs:
                ours.pop(key)
        if "usage" in ours and "usage" not in theirs and ours["usage"] is None:
            ours.pop("usage")
        for item_theirs, item_ours in zip(
            theirs.get("output") or [], ours.get("output") or [], strict=False
        ):
            _item_extras(item_theirs, item_ours)
    for frame, other in _frames_with_items(pair):
        if other is not None:
            _item_extras(other.data["item"], frame.data["item"])


def _responses_order(pair: Pair) -> None:
    """A final Response lists its items in the stream's ``output_index`` order (a message whose
    text came before a tool call first); upstream 0.19 lists the message last (its own stream
    indexes it first). The same items, in that one respect reordered."""
    for theirs, ours in _response_pairs(pair):
        up_items, our_items = theirs.get("output") or [], ours.get("output") or []
        if not up_items or up_items[-1].get("type") != "message":
            continue
        moved = [i for i in our_items if i.get("type") != "message"] + [
            i for i in our_items if i.get("type") == "message"
        ]
        if [i.get("type") for i in moved] == [i.get("type") for i in up_items]:
            ours["output"] = moved


def _response_pairs(pair: Pair) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    if not pair.matches(r".*/v1/responses.*"):
        return []
    up, us = pair.up, pair.us
    if up.frames is not None and us.frames is not None:
        theirs = {f.name: f.data["response"] for f in up.frames if _has_response(f)}
        return [
            (theirs[f.name], f.data["response"])
            for f in us.frames
            if _has_response(f) and f.name in theirs
        ]
    if isinstance(up.body, dict) and isinstance(us.body, dict):
        if up.body.get("object") == "response" and us.body.get("object") == "response":
            return [(up.body, us.body)]
    return []


def _has_response(frame: Frame) -> bool:
    return isinstance(frame.data, dict) and isinstance(frame.data.get("response"), dict)


def _frames_with_items(pair: Pair) -> list[tuple[Frame, Frame | None]]:
    names = ("response.output_item.added", "response.output_item.done")
    found = []
    for name in names:
        ours = [f for f in pair.us.frames or () if f.name == name]
        theirs = [f for f in pair.up.frames or () if f.name == name]
        found += [(f, theirs[i] if i < len(theirs) else None) for i, f in enumerate(ours)]
    return found


def _item_extras(theirs: dict[str, Any], ours: dict[str, Any]) -> None:
    for key in ITEM_EXTRAS:
        if key in ours and key not in theirs:
            ours.pop(key)
    for part_theirs, part_ours in zip(
        theirs.get("content") or [], ours.get("content") or [], strict=False
    ):
        if isinstance(part_ours, dict) and part_ours.get("annotations") == []:
            if "annotations" not in (part_theirs or {}):
                part_ours.pop("annotations")
