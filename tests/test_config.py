from __future__ import annotations

from pathlib import Path

import pytest

from hermes_queue.config import ConfigError, Settings, load_settings, settings_env


def test_env_overrides_file_and_defaults(tmp_path: Path) -> None:
    config = tmp_path / "hq.toml"
    config.write_text('namespace = "fromfile"\nport = 9000\nworker_concurrency = 4\n')
    settings = load_settings({"HERMES_QUEUE_CONFIG": str(config), "HERMES_QUEUE_PORT": "9100"})
    assert settings.redis.namespace == "fromfile"
    assert settings.api.port == 9100
    assert settings.worker.concurrency == 4
    assert settings.runs.lease_seconds == Settings().runs.lease_seconds


def test_unknown_env_setting_is_rejected_by_name() -> None:
    with pytest.raises(ConfigError, match="HERMES_QUEUE_PROT"):
        load_settings({"HERMES_QUEUE_PROT": "1"})


def test_unknown_file_key_is_rejected(tmp_path: Path) -> None:
    config = tmp_path / "hq.toml"
    config.write_text("lease_secs = 3\n")
    with pytest.raises(ConfigError, match="lease_secs"):
        load_settings({}, config_file=config)


def test_bad_value_names_the_setting() -> None:
    with pytest.raises(ConfigError, match=r"port \(HERMES_QUEUE_PORT\) = 'eighty'"):
        load_settings({"HERMES_QUEUE_PORT": "eighty"})


def test_test_only_variables_are_not_settings() -> None:
    assert load_settings({"HERMES_QUEUE_TEST_REDIS_URL": "redis://x"}) == Settings()


def test_secret_is_masked_in_repr() -> None:
    settings = load_settings({"HERMES_QUEUE_API_KEY": "super-secret-value-123"})
    assert settings.api.api_key == "super-secret-value-123"
    assert "super-secret-value-123" not in repr(settings)


def test_upstream_key_variable_is_honoured() -> None:
    assert load_settings({"API_SERVER_KEY": "k" * 20}).api.api_key == "k" * 20


def test_lease_must_outlast_heartbeats() -> None:
    with pytest.raises(ConfigError, match="lease_seconds"):
        load_settings({"HERMES_QUEUE_LEASE_SECONDS": "1", "HERMES_QUEUE_HEARTBEAT_SECONDS": "1"})


def test_settings_env_round_trips() -> None:
    original = Settings.of(namespace="x1", port=1234, api_key="a" * 16, echo_token_delay=0.25)
    assert load_settings(settings_env(original)) == original


def test_flat_names_reach_their_groups_and_unknown_ones_are_refused() -> None:
    settings = load_settings({"HERMES_QUEUE_REDIS_URL": "redis://x/1", "HERMES_QUEUE_PORT": "9"})
    assert settings.redis.url == "redis://x/1" and settings.api.port == 9
    changed = settings.replace(redis_min_replicas=2, worker_concurrency=3)
    assert (changed.runs.min_replicas, changed.worker.concurrency) == (2, 3)
    assert changed.redis == settings.redis
    with pytest.raises(TypeError, match="lease_secs"):
        settings.replace(lease_secs=1)


def test_providers_and_routes_from_a_file_and_back_through_env(tmp_path: Path) -> None:
    config = tmp_path / "hq.toml"
    config.write_text(
        'default_provider = "local"\n'
        'default_model = "m-default"\n'
        "[providers.local]\n"
        'base_url = "http://127.0.0.1:9999/v1"\n'
        'api_key_env = "LOCAL_LLM_KEY"\n'
        "[model_routes.fast]\n"
        'provider = "local"\n'
        'model = "m-fast"\n'
    )
    settings = load_settings({}, config_file=config)
    assert settings.routing.providers["local"].base_url == "http://127.0.0.1:9999/v1"
    assert settings.routing.providers["local"].api_key_env == "LOCAL_LLM_KEY"
    assert settings.routing.model_routes["fast"].model == "m-fast"
    assert load_settings(settings_env(settings)) == settings


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"HERMES_QUEUE_PROVIDERS": "{not json"}, "JSON"),
        ({"HERMES_QUEUE_PROVIDERS": '{"p": {"base_url": "ftp://x"}}'}, "base_url"),
        ({"HERMES_QUEUE_PROVIDERS": '{"p": {"base_url": "http://x", "key": "s"}}'}, "unknown"),
        ({"HERMES_QUEUE_MODEL_ROUTES": '{"a": {"provider": "nope", "model": "m"}}'}, "unknown"),
        ({"HERMES_QUEUE_DEFAULT_PROVIDER": "ghost"}, "ghost"),
        ({"HERMES_QUEUE_FALLBACK_MODEL": "phantom::m"}, "fallback_model names unknown provider"),
        ({"HERMES_QUEUE_HERMES_MAX_ITERATIONS": "0"}, "hermes_max_iterations"),
        ({"HERMES_QUEUE_HERMES_AGENT_CACHE_SIZE": "-1"}, "hermes_agent_cache_size"),
    ],
)
def test_bad_provider_settings_are_rejected(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings(env)


def test_api_key_is_resolved_from_env_or_file_only_on_demand(tmp_path: Path) -> None:
    from hermes_queue.providers import CredentialsUnavailable, ProviderSettings, resolve_api_key

    by_env = ProviderSettings(name="a", base_url="http://x", api_key_env="A_KEY")
    assert resolve_api_key(by_env, {"A_KEY": "sk-1"}) == "sk-1"
    key_file = tmp_path / "key"
    key_file.write_text("sk-2\n")
    by_file = ProviderSettings(name="b", base_url="http://x", api_key_file=str(key_file))
    assert resolve_api_key(by_file, {}) == "sk-2"
    with pytest.raises(CredentialsUnavailable, match="A_KEY"):
        resolve_api_key(by_env, {})


def test_tenant_weights_are_read_from_env_and_bad_ones_named() -> None:
    settings = load_settings({"HERMES_QUEUE_TENANT_WEIGHTS": "acme=2, globex=0.5"})
    assert settings.runs.weight_of("acme") == 2.0
    assert settings.runs.weight_of("globex") == 0.5
    assert settings.runs.weight_of("initech") == 1.0  # not named: weighs 1
    for bad, says in [
        ("acme", "no '='"),
        ("acme=0", "above 0"),
        ("acme=much", "above 0"),
        ("Acme=1", "tenant name"),
    ]:
        with pytest.raises(ConfigError, match=says):
            load_settings({"HERMES_QUEUE_TENANT_WEIGHTS": bad})
