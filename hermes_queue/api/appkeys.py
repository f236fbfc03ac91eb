"""Typed application state keys (aiohttp ``web.AppKey``), one place for what the app holds."""

from __future__ import annotations

import redis.asyncio as aioredis
from aiohttp import web

from hermes_queue.config import Settings
from hermes_queue.runs.repository import RunRepository
from hermes_queue.store.base import SessionStore
from hermes_queue.streams.hub import StreamHub

SETTINGS = web.AppKey("settings", Settings)
REDIS = web.AppKey("redis", aioredis.Redis)
RUNS = web.AppKey("runs", RunRepository)
HUB = web.AppKey("hub", StreamHub)
STORE = web.AppKey("store", SessionStore)
