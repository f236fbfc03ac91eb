"""``redis+cluster://`` URLs (redis_cluster.py): parsed, refused when malformed."""

from __future__ import annotations

import pytest

from hermes_queue.redisio.cluster import ClusterTarget, parse_cluster_url
from hermes_queue.redisio.connect import on_this_host


def test_a_cluster_url_names_its_seeds_and_credentials() -> None:
    target = parse_cluster_url("redis+cluster://u:p%40ss@10.0.0.1:7000,10.0.0.2,[::1]:7002/0")
    assert target == ClusterTarget(
        seeds=(("10.0.0.1", 7000), ("10.0.0.2", 6379), ("::1", 7002)),
        username="u",
        password="p@ss",
    )
    assert parse_cluster_url("redis://127.0.0.1:6379/0") is None
    assert on_this_host("redis+cluster://127.0.0.1:7000,localhost:7001")
    assert not on_this_host("redis+cluster://127.0.0.1:7000,10.0.0.2:7001")


@pytest.mark.parametrize(
    "url",
    [
        "redis+cluster://127.0.0.1:7000/1",
        "redis+cluster://127.0.0.1:7000?x=1",
        "redis+cluster://127.0.0.1:port",
        "redis+cluster://:7000",
    ],
)
def test_malformed_cluster_urls_are_refused(url: str) -> None:
    with pytest.raises(ValueError):
        parse_cluster_url(url)
