"""Schema migrations as data, one ordered list per dialect.

Store methods never create tables: the schema only changes here, version by version, and the
``schema_migrations`` table records what a database already has. That is what lets several
hosts share one PostgreSQL database (or several processes one SQLite file) and upgrade it in
place. ``apply`` runs every pending version plus its bookkeeping row in ONE transaction, after
taking a lock (``BEGIN IMMEDIATE`` on SQLite, an advisory lock on PostgreSQL), so two hosts
starting at once cannot both apply a version, and a failed upgrade leaves the old schema intact.

Rules for new versions: append only, never edit a released one, keep both dialects in step (the
same version number must mean the same logical schema), and prefer additive changes.
"""

from __future__ import annotations

import time

from hermes_queue.store.backend import Conn, Dialect

Migration = tuple[int, list[str]]


def _sessions_ddl(text: str, real: str, bigint: str) -> str:
    counters = ",\n".join(
        f"    {name} {bigint} NOT NULL DEFAULT 0"
        for name in (
            "message_count",
            "tool_call_count",
            "input_tokens",
            "output_tokens",
            "cache_read_tokens",
            "cache_write_tokens",
            "reasoning_tokens",
            "api_call_count",
        )
    )
    return f"""CREATE TABLE sessions (
    id {text} PRIMARY KEY,
    source {text} NOT NULL,
    user_id {text},
    session_key {text},
    model {text},
    model_config {text},
    system_prompt {text},
    parent_session_id {text},
    started_at {real} NOT NULL,
    ended_at {real},
    end_reason {text},
    title {text},
{counters},
    estimated_cost_usd {real},
    actual_cost_usd {real},
    archived INTEGER NOT NULL DEFAULT 0
)"""


def _messages_ddl(text: str, real: str, id_column: str) -> str:
    return f"""CREATE TABLE messages (
    id {id_column},
    session_id {text} NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    role {text} NOT NULL,
    content {text},
    content_json INTEGER NOT NULL DEFAULT 0,
    tool_call_id {text},
    tool_calls {text},
    tool_name {text},
    timestamp {real} NOT NULL,
    token_count INTEGER,
    finish_reason {text},
    reasoning {text},
    reasoning_content {text}
)"""


def _v1(dialect: Dialect) -> list[str]:
    """Sessions and messages as upstream's SessionDB has them (upstream-api.md §6.1)."""
    if dialect == "sqlite":
        sessions = _sessions_ddl("TEXT", "REAL", "INTEGER")
        messages = _messages_ddl("TEXT", "REAL", "INTEGER PRIMARY KEY AUTOINCREMENT")
    else:
        # DOUBLE PRECISION, not REAL: float4 would round epoch timestamps to ~2 minutes.
        sessions = _sessions_ddl("TEXT", "DOUBLE PRECISION", "BIGINT")
        messages = _messages_ddl("TEXT", "DOUBLE PRECISION", "BIGSERIAL PRIMARY KEY")
    return [
        sessions,
        # UNIQUE allows any number of NULL titles on both backends.
        "CREATE UNIQUE INDEX sessions_title_key ON sessions (title)",
        "CREATE INDEX sessions_parent_idx ON sessions (parent_session_id)",
        "CREATE INDEX sessions_started_idx ON sessions (started_at)",
        messages,
        "CREATE INDEX messages_session_idx ON messages (session_id, id)",
    ]


def _v2(dialect: Dialect) -> list[str]:
    """Idempotent appends: a retried worker attempt re-sends its turn_key and inserts nothing.

    One turn appends several messages, so the unique key lives in a side table (one row per
    (session, turn)); ``messages.turn_key`` only records which turn wrote a message.
    """
    real = "REAL" if dialect == "sqlite" else "DOUBLE PRECISION"
    return [
        "ALTER TABLE messages ADD COLUMN turn_key TEXT",
        f"""CREATE TABLE message_turns (
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    turn_key TEXT NOT NULL,
    created_at {real} NOT NULL,
    PRIMARY KEY (session_id, turn_key)
)""",
    ]


def _v3(dialect: Dialect) -> list[str]:
    """Stored Responses (``/v1/responses``) and conversation names, shared by every replica.

    Upstream keeps them in a per-host SQLite file (an LRU of 100); here they live beside the
    sessions. ``transcript`` is the history the turn saw plus its own messages, which is all a
    chained response needs; ``run_id`` lets any replica finish or replay a response whose
    creating process went away. A conversation name maps to its latest response.
    """
    real = "REAL" if dialect == "sqlite" else "DOUBLE PRECISION"
    return [
        f"""CREATE TABLE responses (
    id TEXT PRIMARY KEY,
    run_id TEXT,
    session_id TEXT NOT NULL,
    previous_response_id TEXT,
    conversation TEXT,
    model TEXT,
    instructions TEXT,
    status TEXT NOT NULL,
    response TEXT NOT NULL,
    transcript TEXT NOT NULL,
    created_at {real} NOT NULL
)""",
        f"""CREATE TABLE conversations (
    name TEXT PRIMARY KEY,
    response_id TEXT NOT NULL,
    updated_at {real} NOT NULL
)""",
    ]


def _v4(dialect: Dialect) -> list[str]:
    """Scheduled jobs (``/api/jobs``) and the runs their ticks fired (``store/jobs.py``).

    ``schedule`` and ``skills`` are JSON; times are epoch seconds. ``next_run_at`` is indexed:
    every worker's scheduler asks for the due jobs about once a second. A ``job_runs`` row is
    a fire, keyed by its run id so recording the same tick twice inserts nothing.
    """
    real = "REAL" if dialect == "sqlite" else "DOUBLE PRECISION"
    return [
        f"""CREATE TABLE jobs (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    prompt TEXT NOT NULL,
    schedule TEXT NOT NULL,
    skills TEXT NOT NULL,
    deliver TEXT NOT NULL,
    repeat_times INTEGER,
    repeat_completed INTEGER NOT NULL DEFAULT 0,
    enabled INTEGER NOT NULL,
    state TEXT NOT NULL,
    paused_at {real},
    paused_reason TEXT,
    created_at {real} NOT NULL,
    next_run_at {real},
    last_run_at {real},
    last_run_id TEXT,
    last_status TEXT,
    last_error TEXT,
    session_id TEXT NOT NULL,
    origin TEXT
)""",
        "CREATE INDEX jobs_next_run_idx ON jobs (next_run_at)",
        f"""CREATE TABLE job_runs (
    run_id TEXT PRIMARY KEY,
    job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
    trigger TEXT NOT NULL,
    tick {real},
    fired_at {real} NOT NULL,
    status TEXT NOT NULL,
    output TEXT,
    error TEXT,
    finished_at {real}
)""",
        "CREATE INDEX job_runs_job_idx ON job_runs (job_id, fired_at)",
        "CREATE INDEX job_runs_open_idx ON job_runs (finished_at)",
    ]


def _v5(dialect: Dialect) -> list[str]:
    """Tenants (docs/tenants.md): sessions, stored responses and jobs carry the tenant that
    created them (rows from before: ``default``), listings filter on it (indexed); titles are
    unique per tenant, and conversation names are per tenant (the table rebuilt with the tenant
    in its key, the same statements on both backends). Messages, message turns and job runs
    belong to their session or job and need no column of their own."""
    real = "REAL" if dialect == "sqlite" else "DOUBLE PRECISION"
    tenant = "tenant TEXT NOT NULL DEFAULT 'default'"
    return [
        f"ALTER TABLE sessions ADD COLUMN {tenant}",
        "DROP INDEX sessions_title_key",
        "CREATE UNIQUE INDEX sessions_title_key ON sessions (tenant, title)",
        "CREATE INDEX sessions_tenant_idx ON sessions (tenant, started_at)",
        f"ALTER TABLE responses ADD COLUMN {tenant}",
        f"ALTER TABLE jobs ADD COLUMN {tenant}",
        "CREATE INDEX jobs_tenant_idx ON jobs (tenant, created_at)",
        f"""CREATE TABLE conversations_v5 (
    {tenant},
    name TEXT NOT NULL,
    response_id TEXT NOT NULL,
    updated_at {real} NOT NULL,
    PRIMARY KEY (tenant, name)
)""",
        "INSERT INTO conversations_v5 (tenant, name, response_id, updated_at)"
        " SELECT 'default', name, response_id, updated_at FROM conversations",
        "DROP TABLE conversations",
        "ALTER TABLE conversations_v5 RENAME TO conversations",
    ]


MIGRATIONS: dict[Dialect, list[Migration]] = {
    dialect: [
        (1, _v1(dialect)),
        (2, _v2(dialect)),
        (3, _v3(dialect)),
        (4, _v4(dialect)),
        (5, _v5(dialect)),
    ]
    for dialect in ("sqlite", "postgres")
}
LATEST_VERSION = MIGRATIONS["sqlite"][-1][0]

_VERSIONS_DDL: dict[Dialect, str] = {
    "sqlite": "CREATE TABLE IF NOT EXISTS schema_migrations "
    "(version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)",
    "postgres": "CREATE TABLE IF NOT EXISTS schema_migrations "
    "(version INTEGER PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)",
}
# SQLite needs no extra lock: the caller's BEGIN IMMEDIATE already holds the write lock.
# PostgreSQL: one advisory lock per schema, released at commit.
_LOCK_SQL: dict[Dialect, str | None] = {
    "sqlite": None,
    "postgres": "SELECT pg_advisory_xact_lock("
    "hashtext('hermes_queue.migrations:' || current_schema()))",
}


async def current_version(conn: Conn) -> int:
    """Highest applied version, 0 for a fresh database. Expects the versions table to exist."""
    row = await conn.fetchrow("SELECT MAX(version) AS v FROM schema_migrations")
    return int(row["v"]) if row and row["v"] is not None else 0


async def apply(conn: Conn, dialect: Dialect, target: int | None = None) -> list[int]:
    """Apply the pending versions up to ``target`` (default: latest); returns what ran.

    ``conn`` must already be inside a write transaction; the caller commits.
    """
    if target is not None and not 0 <= target <= LATEST_VERSION:
        raise ValueError(f"migration target must be between 0 and {LATEST_VERSION}")
    goal = LATEST_VERSION if target is None else target
    lock = _LOCK_SQL[dialect]
    if lock:
        await conn.fetchrow(lock)
    await conn.execute(_VERSIONS_DDL[dialect])
    have = await current_version(conn)
    applied: list[int] = []
    for version, statements in MIGRATIONS[dialect]:
        if version <= have or version > goal:
            continue
        for statement in statements:
            await conn.execute(statement)
        await conn.execute(
            "INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)",
            version,
            time.time(),
        )
        applied.append(version)
    return applied


_VERSIONS_TABLE_EXISTS: dict[Dialect, str] = {
    "sqlite": "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'",
    "postgres": "SELECT to_regclass('schema_migrations')::text AS name",
}


async def read_version(conn: Conn, dialect: Dialect) -> int:
    """Like ``current_version`` but read-only: 0 when the versions table does not exist yet."""
    row = await conn.fetchrow(_VERSIONS_TABLE_EXISTS[dialect])
    if row is None or row["name"] is None:
        return 0
    return await current_version(conn)
