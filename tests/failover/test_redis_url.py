"""``redis_url`` in both forms: what each factory is given for a plain and a Sentinel URL."""

from __future__ import annotations

import logging

import pytest

from hermes_queue.config import RedisSettings, Settings
from hermes_queue.jobqueue.connection import redis_settings as arq_settings
from hermes_queue.redisio.connect import on_this_host, parse_sentinel_url
from hermes_queue.store import warn_if_store_is_per_host


def test_plain_urls_are_not_sentinel_urls() -> None:
    for url in ("redis://127.0.0.1:6379/0", "rediss://h:6380/1", "unix:///tmp/redis.sock"):
        assert parse_sentinel_url(url) is None


def test_sentinel_url_names_sentinels_service_db_and_node_credentials() -> None:
    target = parse_sentinel_url(
        "redis+sentinel://app:s%40cret@10.0.0.1:26380,s2,[::1]:26381/main/3"
    )
    assert target is not None
    assert target.sentinels == (("10.0.0.1", 26380), ("s2", 26379), ("::1", 26381))
    assert (target.service, target.db) == ("main", 3)
    assert (target.username, target.password) == ("app", "s@cret")
    assert target.node_kwargs() == {"db": 3, "username": "app", "password": "s@cret"}


def test_sentinel_url_db_defaults_to_zero_and_password_alone_is_accepted() -> None:
    target = parse_sentinel_url("redis+sentinel://:pw@h1:1,h2:2/svc")
    assert target is not None
    assert (target.service, target.db, target.username, target.password) == ("svc", 0, None, "pw")


@pytest.mark.parametrize(
    ("url", "complaint"),
    [
        ("redis+sentinel://:hunter2@/svc", "at least one Sentinel"),
        ("redis+sentinel://:hunter2@h1:26379", "/<service>"),
        ("redis+sentinel://:hunter2@h1:26379/", "/<service>"),
        ("redis+sentinel://:hunter2@h1:26379/svc/x", "not a number"),
        ("redis+sentinel://:hunter2@h1:26379/svc/0/extra", "/<service>"),
        ("redis+sentinel://:hunter2@h1:port/svc", "bad port"),
        ("redis+sentinel://:hunter2@h1/svc?db=1", "no query"),
        ("rediss+sentinel://:hunter2@h1/svc", "unsupported scheme"),
    ],
)
def test_malformed_sentinel_urls_are_refused_without_the_password(url: str, complaint: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_sentinel_url(url)
    assert complaint in str(caught.value)
    assert "hunter2" not in str(caught.value)


def test_arq_uses_its_own_sentinel_support() -> None:
    settings = Settings.of(redis_url="redis+sentinel://:pw@h1:26379,h2:26380/main/2")
    arq = arq_settings(settings.redis)
    assert arq.sentinel is True
    assert arq.sentinel_master == "main"
    assert arq.host == [("h1", 26379), ("h2", 26380)]
    assert (arq.database, arq.password) == (2, "pw")


def test_arq_reads_a_plain_url_as_before() -> None:
    arq = arq_settings(RedisSettings(url="redis://:pw@10.1.2.3:6380/4"))
    assert (arq.sentinel, arq.host, arq.port, arq.database, arq.password) == (
        False,
        "10.1.2.3",
        6380,
        4,
        "pw",
    )


def test_on_this_host_only_when_every_address_is_loopback() -> None:
    assert on_this_host("redis://127.0.0.1:6379/0")
    assert on_this_host("redis://localhost/0")
    assert on_this_host("unix:///run/redis.sock")
    assert on_this_host("redis+sentinel://127.0.0.1:1,[::1]:2/svc")
    assert not on_this_host("redis://10.0.0.5:6379/0")
    assert not on_this_host("redis://redis.internal:6379/0")
    assert not on_this_host("redis+sentinel://127.0.0.1:1,10.0.0.2:2/svc")


def test_sqlite_store_with_redis_on_another_host_is_warned_about(
    caplog: pytest.LogCaptureFixture,
) -> None:
    remote = Settings.of(redis_url="redis://10.0.0.5:6379/0", store_url="sqlite:///s.db")
    with caplog.at_level(logging.WARNING, logger="hermes_queue.store"):
        assert warn_if_store_is_per_host(remote.store.url, remote.redis.url)
    assert "SQLite file but Redis is on another host" in caplog.text
    assert not warn_if_store_is_per_host("postgresql://db/x", remote.redis.url)
    assert not warn_if_store_is_per_host(remote.store.url, "redis://127.0.0.1/0")
