"""arq's connection settings for ``redis_url``: a plain URL through arq's own DSN parsing, a
``redis+sentinel://`` one (``redisio.connect.parse_sentinel_url``) through arq's own Sentinel
support (``sentinel=True``), so the job loop finds the primary as every other client does; a
``redis+cluster://`` one is served by a cluster client instead (``worker.py``)."""

from __future__ import annotations

from arq.connections import RedisSettings as ArqRedisSettings

from hermes_queue.config import RedisSettings
from hermes_queue.redisio.cluster import parse_cluster_url
from hermes_queue.redisio.connect import CONNECT_TIMEOUT, parse_sentinel_url


def redis_settings(settings: RedisSettings) -> ArqRedisSettings:
    cluster = parse_cluster_url(settings.url)
    if cluster is not None:
        # Never connected with: on a cluster the loop is handed a cluster client instead
        # (worker.py); arq only keeps these for its log line.
        host, port = cluster.seeds[0]
        return ArqRedisSettings(host=host, port=port, conn_timeout=int(CONNECT_TIMEOUT))
    target = parse_sentinel_url(settings.url)
    if target is None:
        return ArqRedisSettings.from_dsn(settings.url)
    return ArqRedisSettings(
        host=list(target.sentinels),
        sentinel=True,
        sentinel_master=target.service,
        database=target.db,
        username=target.username,
        password=target.password,
        conn_timeout=int(CONNECT_TIMEOUT),
    )
