"""Model routing and the session model lock (upstream-api.md §6.3, §6.4): pure, no Redis."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from hermes_queue.routing import (
    LOCK_KEY,
    PROVIDER_AUTH_FAILED_TEMPLATE,
    LockMismatch,
    RequestedRuntime,
    RouteTarget,
    RoutingConfig,
    RoutingError,
    Selection,
    agent_options,
    build_lock,
    check_lock_runtime,
    coerce_bool,
    column_model,
    merge_lock,
    parse_requested,
    resolve_route,
    route_problems,
    runtime_metadata,
    select_request,
    select_runtime,
    stored_lock,
    validate_lock,
)

CONFIG = RoutingConfig(
    model_name="hermes-agent",
    model_routes={
        "fast": RouteTarget(
            model="anthropic/claude-haiku",
            provider="openrouter",
            model_options={"service_tier": "priority"},
        ),
        "grok": RouteTarget(model="x-ai/grok-4.5", provider="nous"),
        "plain": RouteTarget(model="gpt-5.5"),
        "gpt-4o": RouteTarget(model="gpt-4o", provider="openai"),  # identity alias
        "speedy": RouteTarget(model="fast", model_options={"service_tier": "flex"}),
    },
    providers=frozenset({"openai", "openrouter", "nous"}),
    default_provider="openai",
    default_model="gpt-5.5",
    fallback_model="openrouter/fallback-model",
)
NOW = 1_755_561_600.0


def req(**body: Any) -> RequestedRuntime:
    return parse_requested(body)


def error_of(call: Any, *args: Any, **kwargs: Any) -> RoutingError:
    with pytest.raises(RoutingError) as info:
        call(*args, **kwargs)
    return info.value


def lock_config(body: dict[str, Any], extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """A session model_config holding the confirmed lock that ``body`` asks for."""
    selection = select_request(parse_requested(body, force_lock=True), CONFIG)
    return merge_lock(extra, selection.lock_record(NOW))


# -- request parsing ---------------------------------------------------------------------------


def test_model_and_provider_fields_and_their_id_aliases() -> None:
    assert req(model=" gpt-x ", provider="nous") == RequestedRuntime("gpt-x", "nous", "gpt-x")
    parsed = req(model_id="gpt-y", provider_id="openai")
    assert (parsed.model, parsed.provider) == ("gpt-y", "openai")
    assert req(model="", model_id="gpt-z").model == "gpt-z"
    assert not req(model="   ", provider=None).names_runtime


def test_provider_prefix_is_split_and_explicit_provider_wins() -> None:
    parsed = req(model="nous::x-ai/grok-4.5")
    assert (parsed.provider, parsed.model, parsed.raw_model) == (
        "nous",
        "x-ai/grok-4.5",
        "nous::x-ai/grok-4.5",
    )
    assert req(model="openai::gpt-x", provider="nous").provider == "nous"
    # A one-character or slash-bearing prefix, or an empty rest, is not a provider prefix.
    for raw in ("n::gpt-x", "a/b::gpt-x", "nous::  "):
        parsed = req(model=raw)
        assert (parsed.provider, parsed.model) == ("", raw.strip())


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"model": "m" * 201}, "invalid_model"),
        ({"model": "bad\nmodel"}, "invalid_model"),
        ({"model": "bad\x00model"}, "invalid_model"),
        ({"model_id": "tab\tmodel"}, "invalid_model"),
        ({"model": 42}, "invalid_model"),
        ({"provider": "p" * 81}, "invalid_provider"),
        ({"provider": "no\rpe"}, "invalid_provider"),
        ({"provider": ["nous"]}, "invalid_provider"),
    ],
)
def test_bad_model_or_provider_names_are_400(body: dict[str, Any], code: str) -> None:
    err = error_of(parse_requested, body)
    assert (err.status, err.code) == (400, code)


def test_limits_are_inclusive() -> None:
    assert req(model="m" * 200, provider="p" * 80).model == "m" * 200


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, True),
        (False, False),
        (1, True),
        (0, False),
        ("1", True),
        ("TRUE", True),
        (" yes ", True),
        ("on", True),
        ("0", False),
        ("false", False),
        ("no", False),
        ("off", False),
        ("maybe", False),
        (None, False),
        ({}, False),
    ],
)
def test_require_model_lock_is_coerced_leniently(value: Any, expected: bool) -> None:
    assert req(require_model_lock=value).require_model_lock is expected


def test_coerce_bool_default_applies_to_unrecognised_values() -> None:
    assert coerce_bool("maybe", True) is True and coerce_bool("off", True) is False


def test_model_options_are_validated_and_passed_through_unchanged() -> None:
    options = {
        "reasoning": {"enabled": True, "effort": "xhigh"},
        "service_tier": "priority",
        "fast": True,
        "future_key": {"kept": 1},
    }
    assert req(model_options=options).model_options == options
    assert req().model_options is None
    assert req(model_options={}).model_options == {}
    for effort in ("none", "minimal", "low", "medium", "high", "xhigh", "max", "ultra", "HIGH"):
        assert req(model_options={"reasoning": {"effort": effort}}).model_options
    assert req(model_options={"reasoning_effort": "low", "fast": "yes"}).model_options


@pytest.mark.parametrize(
    ("options", "param"),
    [
        ("fast", "model_options"),
        ([{"fast": True}], "model_options"),
        ({"reasoning": "high"}, "model_options.reasoning"),
        ({"reasoning": {"enabled": "yes"}}, "model_options.reasoning.enabled"),
        ({"reasoning": {"effort": "extreme"}}, "model_options.reasoning.effort"),
        ({"reasoning": {"effort": 3}}, "model_options.reasoning.effort"),
        ({"reasoning_effort": "turbo"}, "model_options.reasoning_effort"),
        ({"service_tier": 1}, "model_options.service_tier"),
        ({"service_tier": "x" * 65}, "model_options.service_tier"),
        ({"fast": "sometimes"}, "model_options.fast"),
        ({"fast": [True]}, "model_options.fast"),
    ],
)
def test_model_options_of_the_wrong_type_are_400(options: Any, param: str) -> None:
    err = error_of(parse_requested, {"model_options": options})
    assert (err.status, err.code, err.param) == (400, "invalid_model_options", param)


def test_agent_options_translate_reasoning_and_service_tier() -> None:
    assert agent_options(None) == {} and agent_options({}) == {}
    assert agent_options({"reasoning": {"enabled": False, "effort": "high"}}) == {
        "reasoning_config": {"enabled": False}
    }
    assert agent_options({"reasoning": {"effort": "none"}}) == {
        "reasoning_config": {"enabled": False}
    }
    assert agent_options({"reasoning": {"enabled": True, "effort": "Max"}}) == {
        "reasoning_config": {"enabled": True, "effort": "max"}
    }
    assert agent_options({"reasoning": {"enabled": True}}) == {
        "reasoning_config": {"enabled": True}
    }
    assert agent_options({"reasoning_effort": "low"}) == {
        "reasoning_config": {"enabled": True, "effort": "low"}
    }
    assert agent_options({"fast": True}) == {"service_tier": "priority"}
    assert agent_options({"fast": "off"}) == {"service_tier": None}
    assert agent_options({"service_tier": " flex ", "fast": True}) == {"service_tier": "flex"}


# -- routes ------------------------------------------------------------------------------------


def test_alias_routes_match_the_raw_or_the_split_model() -> None:
    route = resolve_route(req(model="fast"), CONFIG)
    assert (route.provider, route.model, route.route_source, route.alias) == (
        "openrouter",
        "anthropic/claude-haiku",
        "model_routes",
        "fast",
    )
    assert route.model_options == {"service_tier": "priority"}
    assert resolve_route(req(model="openrouter::fast"), CONFIG).alias == "fast"
    # An alias without a provider runs on the default provider, or the one the body names.
    assert resolve_route(req(model="plain"), CONFIG).provider == "openai"
    assert resolve_route(req(model="plain", provider="nous"), CONFIG).provider == "nous"


def test_raw_provider_and_model_route() -> None:
    route = resolve_route(req(provider="nous", model="x-ai/grok-4.5"), CONFIG)
    assert (route.provider, route.model, route.route_source) == (
        "nous",
        "x-ai/grok-4.5",
        "raw_request",
    )
    bare = resolve_route(req(model="some/model"), CONFIG)
    assert (bare.provider, bare.model, bare.route_source) == ("openai", "some/model", "raw_request")


def test_global_route_when_nothing_routable_is_named() -> None:
    for body in ({}, {"model": "hermes-agent"}, {"provider": "nous"}):
        route = resolve_route(req(**body), CONFIG)
        assert (route.route_source, route.model) == ("global", "gpt-5.5")
    assert resolve_route(req(provider="nous"), CONFIG).provider == "nous"
    assert resolve_route(req(), CONFIG).provider == "openai"


def test_provider_with_the_advertised_alias_is_a_raw_request_for_the_default_model() -> None:
    route = resolve_route(req(provider="nous", model="hermes-agent"), CONFIG)
    assert (route.provider, route.model, route.route_source) == ("nous", "gpt-5.5", "raw_request")


def test_openai_compatible_surfaces_ignore_bare_models_unless_direct_requests() -> None:
    bare = req(model="gpt-4-turbo")
    assert resolve_route(bare, CONFIG, openai_compat=True).route_source == "global"
    direct = RoutingConfig(**{**CONFIG.__dict__, "direct_model_requests": True})
    assert resolve_route(bare, direct, openai_compat=True).route_source == "raw_request"
    assert resolve_route(req(model="fast"), CONFIG, openai_compat=True).alias == "fast"
    with_provider = req(model="gpt-4-turbo", provider="openai")
    assert resolve_route(with_provider, CONFIG, openai_compat=True).route_source == "raw_request"


def test_unknown_provider_is_400() -> None:
    for body in ({"provider": "nope", "model": "m"}, {"model": "nope::m"}, {"provider": "nope"}):
        err = error_of(resolve_route, req(**body), CONFIG)
        assert (err.status, err.code) == (400, "unknown_provider")


def test_route_provider_conflict_is_400() -> None:
    err = error_of(resolve_route, req(model="fast", provider="nous"), CONFIG)
    assert (err.status, err.code) == (400, "route_provider_conflict")
    assert "pinned to provider 'openrouter'" in err.message
    err = error_of(resolve_route, req(model="nous::fast"), CONFIG)
    assert err.code == "route_provider_conflict"
    assert resolve_route(req(model="fast", provider="openrouter"), CONFIG).alias == "fast"


def test_aliases_chain_and_the_outer_options_win() -> None:
    route = resolve_route(req(model="speedy"), CONFIG)
    assert (route.provider, route.model, route.alias) == (
        "openrouter",
        "anthropic/claude-haiku",
        "speedy",
    )
    assert route.model_options == {"service_tier": "flex"}
    identity = resolve_route(req(model="gpt-4o"), CONFIG)
    assert (identity.provider, identity.model) == ("openai", "gpt-4o")


def routes_config(**routes: RouteTarget) -> RoutingConfig:
    return RoutingConfig(model_routes=routes, providers=frozenset({"a", "b"}), default_provider="a")


@pytest.mark.parametrize(
    ("routes", "needle"),
    [
        ({"x": RouteTarget("y"), "y": RouteTarget("x")}, "loop: x -> y -> x"),
        ({"x": RouteTarget("y", "a"), "y": RouteTarget("m", "b")}, "conflicting providers"),
        ({"x": RouteTarget("m", "zzz")}, "unknown provider 'zzz'"),
        ({"x": RouteTarget("")}, "has no model"),
        ({f"r{i}": RouteTarget(f"r{i + 1}") for i in range(12)} | {"x": RouteTarget("r0")}, "more"),
    ],
)
def test_bad_alias_routes_are_400(routes: dict[str, RouteTarget], needle: str) -> None:
    config = routes_config(**routes)
    err = error_of(resolve_route, req(model="x"), config)
    assert (err.status, err.code) == (400, "invalid_model_route")
    assert needle in err.message
    assert any(needle in problem for problem in route_problems(config))


def test_route_problems_is_empty_for_a_sound_config() -> None:
    assert route_problems(CONFIG) == []
    assert route_problems(RoutingConfig(providers=frozenset({"a"}), default_provider="b"))


def test_column_model() -> None:
    assert column_model(resolve_route(req(model="fast"), CONFIG)) == "fast"
    assert column_model(resolve_route(req(model="some/model"), CONFIG)) == "some/model"
    assert column_model(resolve_route(req(model="hermes-agent"), CONFIG)) is None


# -- lock validation (rule 1) ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({}, 400, "missing_model"),
        ({"model": "", "provider": ""}, 400, "missing_model"),
        ({"provider": "nous", "model": ""}, 409, "model_lock_unavailable"),
        ({"model": "hermes-agent"}, 409, "model_lock_unavailable"),
    ],
)
def test_require_model_lock_without_a_routable_model(
    body: dict[str, Any], status: int, code: str
) -> None:
    requested = req(**body, require_model_lock=True)
    err = error_of(validate_lock, requested, resolve_route(requested, CONFIG))
    assert (err.status, err.code) == (status, code)
    err = error_of(select_runtime, requested, None, None, CONFIG)
    assert (err.status, err.code) == (status, code)


def test_validate_lock_is_silent_without_require_or_with_a_route() -> None:
    validate_lock(req(), resolve_route(req(), CONFIG))
    locked = req(model="fast", require_model_lock="true")
    validate_lock(locked, resolve_route(locked, CONFIG))


# -- the stored lock ---------------------------------------------------------------------------


def test_create_with_a_lock_builds_the_browser_model_lock() -> None:
    requested = parse_requested(
        {"provider": "nous", "model": "x-ai/grok-4.5", "require_model_lock": True}
    )
    selection = select_request(requested, CONFIG)
    lock = build_lock(selection.route, requested, confirmed=True, now=NOW)  # type: ignore[arg-type]
    assert lock == {
        "provider": "nous",
        "model": "x-ai/grok-4.5",
        "model_options": {},
        "route_source": "raw_request",
        "confirmed": True,
        "updated_at": NOW,
    }
    assert selection.lock_record(NOW) == lock
    unconfirmed = build_lock(resolve_route(req(model="m"), CONFIG), req(model="m"), False, NOW)
    assert unconfirmed["confirmed"] is False and unconfirmed["provider"] == "openai"


def test_alias_lock_stores_the_alias() -> None:
    requested = req(model="fast", model_options={"fast": True})
    lock = build_lock(resolve_route(requested, CONFIG), requested, True, NOW)
    assert (lock["provider"], lock["model"], lock["route_source"]) == ("", "fast", "model_routes")
    assert lock["model_options"] == {"fast": True}


def test_merge_lock_keeps_other_keys_and_accepts_json_text() -> None:
    lock = {"provider": "nous", "model": "m", "confirmed": True}
    merged = merge_lock({"_branched_from": "parent", LOCK_KEY: {"old": 1}}, lock)
    assert merged == {"_branched_from": "parent", LOCK_KEY: lock}
    assert merge_lock(json.dumps({"_branched_from": "p"}), lock)["_branched_from"] == "p"
    assert merge_lock(None, lock) == {LOCK_KEY: lock}
    assert merge_lock("not json", lock) == {LOCK_KEY: lock}


def test_stored_lock_returns_confirmed_locks_only() -> None:
    lock = {"provider": "nous", "model": "m", "confirmed": True}
    assert stored_lock({LOCK_KEY: lock}) == lock
    assert stored_lock(json.dumps({LOCK_KEY: lock})) == lock
    assert stored_lock({LOCK_KEY: {**lock, "confirmed": "yes"}}) is not None
    assert stored_lock({LOCK_KEY: {**lock, "confirmed": False}}) is None
    assert stored_lock({LOCK_KEY: {"provider": "", "model": "", "confirmed": True}}) is None
    assert stored_lock({LOCK_KEY: "garbage"}) is None
    assert stored_lock(None) is None and stored_lock("") is None


# -- per-turn selection (rules 3-5) ------------------------------------------------------------


def test_lock_then_chat_reuses_it() -> None:
    config = lock_config({"provider": "nous", "model": "x-ai/grok-4.5"})
    selection = select_runtime(req(), config, "x-ai/grok-4.5", CONFIG)
    assert (selection.provider, selection.model, selection.route_source) == (
        "nous",
        "x-ai/grok-4.5",
        "session_model_lock",
    )
    assert selection.requested == {"provider": "nous", "model": "x-ai/grok-4.5"}
    assert selection.confirmed_lock and selection.lock_state == "accepted"
    assert not selection.persist_lock  # reusing a lock never rewrites it


def test_no_fallback_model_under_a_lock() -> None:
    locked = select_runtime(req(), lock_config({"model": "fast"}), "fast", CONFIG)
    assert locked.fallback_model is None
    fresh = select_runtime(req(model="m", require_model_lock=True), None, None, CONFIG)
    assert fresh.fallback_model is None
    unlocked = select_runtime(req(model="m"), None, None, CONFIG)
    assert unlocked.fallback_model == "openrouter/fallback-model"
    assert not unlocked.confirmed_lock and unlocked.lock_state == ""


def test_the_locked_provider_beats_the_session_column_and_default() -> None:
    config = lock_config({"provider": "nous", "model": "x-ai/grok-4.5"})
    selection = select_runtime(req(model_options={"fast": True}), config, "gpt-5.5", CONFIG)
    assert (selection.provider, selection.model) == ("nous", "x-ai/grok-4.5")


def test_alias_lock_resolves_through_the_alias_and_body_options_override() -> None:
    config = lock_config({"model": "fast", "model_options": {"reasoning": {"effort": "low"}}})
    selection = select_runtime(req(), config, "fast", CONFIG)
    assert (selection.provider, selection.model, selection.route_source) == (
        "openrouter",
        "anthropic/claude-haiku",
        "session_model_lock",
    )
    assert selection.model_options == {
        "service_tier": "priority",
        "reasoning": {"effort": "low"},
    }
    overridden = select_runtime(req(model_options={"fast": False}), config, "fast", CONFIG)
    assert overridden.model_options == {"service_tier": "priority", "fast": False}


def test_a_lock_whose_alias_vanished_runs_the_stored_model_on_the_default_provider() -> None:
    config = {LOCK_KEY: {"model": "gone", "route_source": "model_routes", "confirmed": True}}
    selection = select_runtime(req(), config, None, CONFIG)
    assert (selection.provider, selection.model, selection.confirmed_lock) == (
        "openai",
        "gone",
        True,
    )


def test_an_unconfirmed_request_does_not_replace_a_confirmed_lock() -> None:
    config = lock_config({"provider": "nous", "model": "x-ai/grok-4.5"}, {"_branched_from": "p"})
    body = req(provider="openrouter", model="anthropic/claude-sonnet")
    selection = select_runtime(body, config, "x-ai/grok-4.5", CONFIG)
    assert not selection.persist_lock and not selection.confirmed_lock
    assert selection.route_source == "raw_request"
    assert selection.requested == {"provider": "openrouter", "model": "anthropic/claude-sonnet"}
    # The session column (written by the lock) outranks the one-off body values, and keeps
    # the lock's provider; the stored lock itself is untouched.
    assert (selection.provider, selection.model) == ("nous", "x-ai/grok-4.5")
    assert stored_lock(config)["provider"] == "nous"  # type: ignore[index]
    with pytest.raises(ValueError):
        selection.lock_record(NOW)


def test_one_off_override_applies_when_the_session_has_no_model() -> None:
    for column in (None, "", "hermes-agent"):
        selection = select_runtime(req(provider="nous", model="m"), None, column, CONFIG)
        assert (selection.provider, selection.model) == ("nous", "m")


def test_session_column_precedence() -> None:
    raw = select_runtime(req(model="fast"), None, "stored/model", CONFIG)
    assert (raw.provider, raw.model) == ("openai", "stored/model")
    alias = select_runtime(req(model="some/model"), None, "grok", CONFIG)
    assert (alias.provider, alias.model) == ("nous", "x-ai/grok-4.5")
    nothing = select_runtime(req(model_options={"fast": True}), None, "fast", CONFIG)
    assert (nothing.provider, nothing.model, nothing.route_source) == (
        "openrouter",
        "anthropic/claude-haiku",
        "global",
    )
    assert nothing.model_options == {"service_tier": "priority", "fast": True}
    default = select_runtime(req(), None, None, CONFIG)
    assert (default.provider, default.model, default.route_source) == (
        "openai",
        "gpt-5.5",
        "global",
    )


def test_require_model_lock_in_the_body_locks_and_persists_that_turn() -> None:
    config = lock_config({"provider": "nous", "model": "x-ai/grok-4.5"})
    body = req(model="fast", require_model_lock=True, model_options={"fast": True})
    selection = select_runtime(body, config, "x-ai/grok-4.5", CONFIG)
    assert (selection.provider, selection.model, selection.route_source) == (
        "openrouter",
        "anthropic/claude-haiku",
        "model_routes",
    )
    assert selection.confirmed_lock and selection.persist_lock
    record = selection.lock_record(NOW)
    assert (record["model"], record["confirmed"]) == ("fast", True)
    assert merge_lock(config, record)[LOCK_KEY]["model"] == "fast"


def test_require_model_lock_naming_nothing_reuses_a_stored_lock() -> None:
    config = lock_config({"provider": "nous", "model": "x-ai/grok-4.5"})
    selection = select_runtime(req(require_model_lock=True), config, None, CONFIG)
    assert selection.route_source == "session_model_lock" and not selection.persist_lock


def test_model_options_pass_through_raw() -> None:
    options = {"reasoning": {"enabled": True, "effort": "xhigh"}, "service_tier": "priority"}
    selection = select_runtime(
        req(provider="nous", model="m", model_options=options), None, None, CONFIG
    )
    assert selection.model_options == options


def test_selection_round_trips_through_the_job() -> None:
    config = lock_config({"provider": "nous", "model": "x-ai/grok-4.5"})
    selection = select_runtime(req(model_options={"fast": True}), config, None, CONFIG)
    data = json.loads(json.dumps(selection.as_dict()))
    assert data["lock_state"] == "accepted"
    assert Selection.from_dict(data) == selection


# -- after the turn (rules 6-7) ----------------------------------------------------------------


def test_runtime_metadata_accepted_then_confirmed_with_actual_values() -> None:
    selection = select_runtime(
        req(provider="nous", model="x-ai/grok-4.5", require_model_lock=True), None, None, CONFIG
    )
    assert runtime_metadata(selection, None) == {
        "provider": "nous",
        "model": "x-ai/grok-4.5",
        "route_source": "raw_request",
        "requested": {"provider": "nous", "model": "x-ai/grok-4.5"},
        "model_lock": "accepted",
    }
    after = runtime_metadata(selection, {"provider": "nous", "model": "x-ai/grok-4.5"})
    assert after["model_lock"] == "confirmed"


def test_runtime_metadata_reports_actual_vs_requested() -> None:
    selection = select_runtime(req(provider="nous", model="requested-model"), None, None, CONFIG)
    meta = runtime_metadata(selection, {"provider": "actual-provider", "model": "actual-model"})
    assert (meta["provider"], meta["model"], meta["model_lock"]) == (
        "actual-provider",
        "actual-model",
        "",
    )
    assert meta["requested"] == {"provider": "nous", "model": "requested-model"}
    plain = runtime_metadata(select_runtime(req(), None, None, CONFIG), {})
    assert plain == {
        "provider": "openai",
        "model": "gpt-5.5",
        "route_source": "global",
        "model_lock": "",
    }


def test_lock_runtime_mismatch_raises_with_the_exact_message() -> None:
    selection = select_runtime(req(), lock_config({"model": "nous::x-ai/grok-4.5"}), None, CONFIG)
    check_lock_runtime(selection, "nous", "x-ai/grok-4.5")
    with pytest.raises(LockMismatch) as info:
        check_lock_runtime(selection, "fallback-provider", "fallback-model")
    assert str(info.value) == (
        "confirmed model lock runtime mismatch: expected provider=nous model=x-ai/grok-4.5; "
        "actual provider=fallback-provider model=fallback-model"
    )
    assert isinstance(info.value, RuntimeError)
    unlocked = select_runtime(req(model="m"), None, None, CONFIG)
    check_lock_runtime(unlocked, "other", "other")


def test_a_lock_without_provider_checks_the_model_only() -> None:
    """A model-only lock with no default provider: the provider the worker resolved is fine,
    another model is still a mismatch."""
    config = dataclasses.replace(CONFIG, default_provider="")
    asked = select_request(parse_requested({"model": "locked-model"}, force_lock=True), config)
    stored = merge_lock(None, asked.lock_record(NOW))
    selection = select_runtime(req(), stored, None, config)
    assert selection.confirmed_lock and selection.provider == ""
    check_lock_runtime(selection, "echo", "locked-model")
    with pytest.raises(LockMismatch):
        check_lock_runtime(selection, "echo", "other-model")


def test_provider_auth_failed_template() -> None:
    assert PROVIDER_AUTH_FAILED_TEMPLATE.format(reason="token expired") == (
        "⚠️ Provider authentication failed: token expired"
    )
