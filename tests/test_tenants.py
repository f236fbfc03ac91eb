"""Tenant keys: parsing (setting, file, digests, rotation), bad input refused at start-up with a
line naming the entry and never the key, the digest table, and the bind-time strength check."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from hermes_queue.cli.serve import check_bind_safety
from hermes_queue.config import ApiSettings, ConfigError, Settings, load_settings, settings_env
from hermes_queue.tenancy.keys import (
    DEFAULT_TENANT,
    KeyTable,
    TenantKeyError,
    configured_keys,
    parse_keys,
)

OPERATOR = "op-3b1f0c9e7a5d42e8b6f1"
ALPHA_1 = "alpha-9d2e4f6a8b0c1d3e5f7a"
ALPHA_2 = "alpha-rotated-71c3e5a9b2d4f6e8"
BETA = "beta-5e7a9c1b3d5f7a9c1e3b"


def table(pairs: str = "", file: str = "") -> KeyTable:
    return KeyTable(configured_keys(OPERATOR, pairs, file))


def test_pairs_bind_keys_to_tenants_and_rotation_keeps_several() -> None:
    keys = table(f"alpha={ALPHA_1}, alpha={ALPHA_2},beta={BETA}")
    assert keys.tenant_of(ALPHA_1) == keys.tenant_of(ALPHA_2) == "alpha"
    assert keys.tenant_of(BETA) == "beta"
    assert keys.tenant_of(OPERATOR) == DEFAULT_TENANT
    assert keys.tenant_of(f" {BETA} ") == "beta"  # normalised as the operator's key is
    assert keys.tenant_of("beta-5e7a9c1b3d5f7a9c1e3") is None
    assert keys.tenant_of("") is None
    assert keys.tenants == {"default", "alpha", "beta"}
    assert not keys.open


def test_the_table_keeps_digests_only() -> None:
    keys = table(f"alpha={ALPHA_1}")
    assert ALPHA_1 not in repr(vars(keys)) and OPERATOR not in repr(vars(keys))
    assert ALPHA_1 not in repr(configured_keys(OPERATOR, f"alpha={ALPHA_1}", ""))


def test_a_key_may_be_configured_as_its_digest() -> None:
    digest = hashlib.sha256(BETA.encode()).hexdigest()
    keys = table(f"beta=sha256:{digest.upper()}")
    assert keys.tenant_of(BETA) == "beta"
    assert keys.tenant_of(f"sha256:{digest}") is None  # the digest itself is no key


def test_the_file_has_one_pair_a_line_with_comments(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text(f"# rotated 2026-05\nalpha={ALPHA_1}\n\n  beta = {BETA}  \n")
    keys = table(f"alpha={ALPHA_2}", str(path))
    assert keys.tenant_of(ALPHA_1) == keys.tenant_of(ALPHA_2) == "alpha"
    assert keys.tenant_of(BETA) == "beta"


def test_load_settings_reads_both_variables(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text(f"beta={BETA}\n")
    settings = load_settings(
        {
            "HERMES_QUEUE_API_KEY": OPERATOR,
            "HERMES_QUEUE_API_KEYS": f"alpha={ALPHA_1}",
            "HERMES_QUEUE_API_KEYS_FILE": str(path),
        }
    )
    assert {k.tenant for k in settings.api.tenant_keys()} == {"default", "alpha", "beta"}
    assert ALPHA_1 not in repr(settings)
    assert load_settings(settings_env(settings)) == settings


@pytest.mark.parametrize(
    ("pairs", "problem"),
    [
        ("alpha", r"entry 1 is not tenant=key"),
        (f"alpha={ALPHA_1},beta=", r"entry 2 is not tenant=key"),
        (f"Alpha={ALPHA_1}", r"entry 1: tenant name 'Alpha' is not 1-32 characters"),
        (f"al pha={ALPHA_1}", r"tenant name 'al pha'"),
        (f"{'a' * 33}={ALPHA_1}", r"tenant name"),
        ("alpha=sha256:abc", r"64 hex digits"),
        ("alpha=two words", r"whitespace or control"),
        (f"alpha={BETA},beta={BETA}", r"one key is given to two tenants \('alpha' and 'beta'\)"),
        (f"alpha={OPERATOR}", r"one key is given to two tenants \('default' and 'alpha'\)"),
    ],
)
def test_bad_entries_are_a_start_up_error_naming_the_entry(pairs: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem) as raised:
        load_settings({"HERMES_QUEUE_API_KEY": OPERATOR, "HERMES_QUEUE_API_KEYS": pairs})
    assert "HERMES_QUEUE_API_KEYS" in str(raised.value) or "tenants" in str(raised.value)
    for secret in (ALPHA_1, BETA, OPERATOR):
        assert secret not in str(raised.value)


def test_a_bad_file_line_is_named(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text(f"alpha={ALPHA_1}\nbeta {BETA}\n")
    with pytest.raises(ConfigError, match=r"api_keys_file .*keys line 2 is not tenant=key"):
        Settings.of(api_key=OPERATOR, api_keys_file=str(path)).validate()


def test_an_unreadable_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot read api_keys_file"):
        Settings.of(api_key=OPERATOR, api_keys_file=str(tmp_path / "absent")).validate()


def test_tenant_keys_need_the_operator_key() -> None:
    with pytest.raises(ConfigError, match=r"need the operator's key"):
        load_settings({"HERMES_QUEUE_API_KEYS": f"alpha={ALPHA_1}"})


def test_without_tenant_keys_one_key_is_the_default_tenant() -> None:
    keys = table()
    assert keys.tenants == {"default"} and keys.tenant_of(OPERATOR) == "default"
    assert KeyTable().open  # no key at all: the API is open


def test_a_weak_tenant_key_refuses_a_public_bind() -> None:
    with pytest.raises(ConfigError, match=r"a key of tenant 'alpha' .* is shorter than"):
        check_bind_safety(ApiSettings(host="0.0.0.0", api_key=OPERATOR, api_keys="alpha=short"))
    check_bind_safety(ApiSettings(host="0.0.0.0", api_key=OPERATOR, api_keys=f"alpha={ALPHA_1}"))
    # A digest cannot be judged: the operator chose to configure it that way.
    weak = hashlib.sha256(b"short").hexdigest()
    check_bind_safety(ApiSettings(host="0.0.0.0", api_key=OPERATOR, api_keys=f"a=sha256:{weak}"))


def test_parse_keys_reports_no_secret() -> None:
    with pytest.raises(TenantKeyError) as raised:
        parse_keys(f"alpha={ALPHA_1},BAD={BETA}", "api_keys")
    assert BETA not in str(raised.value) and "entry 2" in str(raised.value)
