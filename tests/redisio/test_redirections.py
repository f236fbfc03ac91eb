"""Reading a Redis Cluster redirection from an error reply, in either form redis-py gives it."""

from __future__ import annotations

from redis.exceptions import (
    AskError,
    ClusterDownError,
    ConnectionError,
    MovedError,
    ResponseError,
    TryAgainError,
)

from hermes_queue.redisio.redirections import moved, redirection


def test_a_redirection_reads_the_same_from_a_cluster_parser_and_a_plain_one() -> None:
    """A cluster connection's parser makes each redirection a class and strips its word (and
    its ``MovedError`` is an ``AskError``); a plain connection's leaves the word in the text."""
    for stripped, plain, kind in (
        (MovedError("3999 10.0.0.2:6381"), ResponseError("MOVED 3999 10.0.0.2:6381"), "MOVED"),
        (AskError("3999 10.0.0.2:6381"), ResponseError("ASK 3999 10.0.0.2:6381"), "ASK"),
    ):
        for error in (stripped, plain):
            found = redirection(error)
            assert found is not None and found.kind == kind, error
            assert found.address == "10.0.0.2:6381"
    tryagain = redirection(TryAgainError("Multiple keys request during rehashing of slot"))
    assert tryagain is not None and tryagain.kind == "TRYAGAIN"
    assert redirection(ResponseError("TRYAGAIN Multiple keys request")).kind == "TRYAGAIN"  # type: ignore[union-attr]
    down = redirection(ClusterDownError("The cluster is down"))
    assert down is not None and down.kind == "CLUSTERDOWN"
    assert redirection(ResponseError("WRONGTYPE Operation against a key")) is None
    assert redirection(ResponseError("ASKING is not a reply")) is None


def test_only_a_moved_reply_says_the_slot_table_is_out_of_date() -> None:
    """The lease keeper asks for the slot table again on ``MOVED`` alone: an ``ASK`` (redis-py's
    ``MovedError`` is an ``AskError``, not the other way round), a migration's ``TRYAGAIN``, or
    a lost connection is no reason to."""
    assert moved(MovedError("3999 10.0.0.2:6381"))
    assert moved(ResponseError("MOVED 3999 10.0.0.2:6381"))
    assert not moved(AskError("3999 10.0.0.2:6381"))
    assert not moved(ResponseError("ASK 3999 10.0.0.2:6381"))
    assert not moved(TryAgainError("Multiple keys request during rehashing of slot"))
    assert not moved(ResponseError("WRONGTYPE Operation against a key"))
    assert not moved(ConnectionError("MOVED 3999 10.0.0.2:6381"))  # not a reply of Redis
