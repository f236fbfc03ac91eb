"""Everything between this project and a Redis server: ``connect`` the one reader of
``redis_url`` (plain, ``redis+sentinel://``, ``redis+cluster://``) and its client factories,
``pool`` the bounded connection pool they share, ``pipeline`` calls pipelined on one connection,
``cluster`` a Redis Cluster's clients and slot map, ``replication`` ``WAIT`` for
``redis_min_replicas``, ``embedded`` the private ``redis-server`` of ``hermes-queue dev`` and the
tests, ``addresses`` host:port parsing. Named so it never shadows redis-py's ``redis``."""
