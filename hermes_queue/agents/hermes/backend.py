"""The ``hermes`` backend: the real Hermes ``AIAgent`` (package ``hermes-agent``) runs each turn.

- The agent is built from the turn's resolved route (``construction``): provider endpoint and
  key (resolved in the worker, for that provider only), model, api mode, the toolsets from
  settings, the turn's instructions as its ephemeral system prompt, and no fallback model under
  a confirmed lock. A warm agent of the same session and construction is reused (see ``warm``).
- It runs synchronously in a thread of the backend's own pool; its callbacks reach the sink
  through ``TurnBridge`` without blocking the event loop. A stop request calls its
  ``interrupt``; approvals go through Redis (``sink.approval``) from any API replica.
- Hermes reports a provider rejection as a failed result ("HTTP 401: ..."); that becomes the
  controlled provider-authentication reply, other failures an ``AgentError`` with the key
  scrubbed out.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from hermes_queue.agents.base import (
    AgentError,
    AgentRequest,
    AgentResult,
    CancelToken,
    EventSink,
    TurnCancelled,
    Usage,
)
from hermes_queue.agents.hermes import process
from hermes_queue.agents.hermes.bridge import TurnBridge
from hermes_queue.agents.hermes.checkpoints import StepInterrupted
from hermes_queue.agents.hermes.construction import (
    AgentFactory,
    Runtime,
    detach,
    estimated_cost,
    platform_toolsets,
    prepare_turn,
    release_clients,
)
from hermes_queue.agents.hermes.conversation import converse, crashed, failure
from hermes_queue.agents.hermes.durable import DurableTurn
from hermes_queue.agents.hermes.installed import hermes_catalog
from hermes_queue.agents.hermes.limits import turn_iterations, turn_toolsets
from hermes_queue.agents.hermes.transcript import to_hermes_history, turn_messages
from hermes_queue.agents.hermes.warm import WarmAgents, signature, warm_first_turn
from hermes_queue.agents.provider_config import ProviderConfig, provider_configs
from hermes_queue.agents.steps import StepJournal, StepSink
from hermes_queue.catalog import BackendCatalog

log = logging.getLogger(__name__)
T = TypeVar("T")


class HermesBackend:
    name = "hermes"

    def __init__(
        self,
        providers: Mapping[str, ProviderConfig],
        default_provider: str,
        *,
        default_model: str = "",
        credentials: Callable[[str], str] | None = None,
        toolsets: tuple[str, ...] = (),
        max_iterations: int = 90,
        agent_cache_size: int = 64,
        hermes_home: str = "",
        max_turns: int = 16,
    ) -> None:
        if default_provider not in providers:
            raise ValueError(f"default provider {default_provider!r} is not configured")
        process.prepare(hermes_home)
        self.agents = AgentFactory(
            dict(providers), default_provider, default_model, credentials, max_iterations
        )
        self.toolsets = list(toolsets) or platform_toolsets()
        self.warm = WarmAgents(agent_cache_size)
        # A thread per turn the worker may run at once, plus a few for builds, releases and
        # the catalog, so a turn never waits for a thread while the worker counts it as busy.
        self._threads = ThreadPoolExecutor(max_turns + 4, thread_name_prefix="hermes-turn")
        self._running: set[Any] = set()  # agents inside run_conversation, for shutdown

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> HermesBackend:
        providers = provider_configs(options)
        default = options.get("default_provider") or next(iter(providers), "")
        return cls(
            providers,
            default,
            default_model=str(options.get("default_model") or ""),
            credentials=options.get("credentials"),
            toolsets=tuple(options.get("toolsets") or ()),
            max_iterations=int(options.get("max_iterations") or 90),
            agent_cache_size=int(options.get("agent_cache_size", 64)),
            hermes_home=str(options.get("hermes_home") or ""),
            max_turns=int(options.get("max_turns") or 16),
        )

    async def warm_up(self) -> None:
        """Before the worker's first turn (``workers/warmup.py``): Hermes' imports, its tool
        registry and TLS context, the catalog, and one agent built and released as a turn on
        the default route would build it, so the first turn costs what a warm one does."""
        await self._in_thread(self._warm)
        await self.catalog()

    def _warm(self) -> None:
        request = AgentRequest(run_id="warm-up", session_id="warm-up", message="")
        try:
            runtime = self.agents.runtime(request)
        except AgentError as exc:  # no default model, or its key unavailable: warm what we can
            log.info("hermes: warming up without an agent (%s)", exc)
            import run_agent  # noqa: F401  (most of Hermes' import time)

            return
        agent = self._build(runtime, request, self.toolsets)
        warm_first_turn(agent)
        release_clients(agent)

    # -- one turn --------------------------------------------------------------------------------

    async def run_turn(
        self, request: AgentRequest, sink: EventSink, cancel: CancelToken
    ) -> AgentResult:
        runtime = self.agents.runtime(request)
        toolsets = turn_toolsets(self.toolsets, request.limits)
        construction = runtime.construction(toolsets, request.instructions)
        sig = signature(construction, runtime.provider.api_key)
        agent = await self._agent_for(request, runtime, sig, cancel, toolsets)
        loop = asyncio.get_running_loop()
        bridge = TurnBridge(
            loop, sink, request.run_id, agent.interrupt, scrub=runtime.provider.scrub
        )
        prepare_turn(agent, bridge, request.route.model_options)
        agent.max_iterations = turn_iterations(self.agents.max_iterations, request.limits)
        if isinstance(sink, StepSink):  # record each step; a resumed attempt replays them
            DurableTurn(agent, bridge, StepJournal.of(request.steps)).install()
        before = (agent.session_prompt_tokens, agent.session_completion_tokens)
        cost_before = estimated_cost(agent)
        history = to_hermes_history(request.history)
        pump = asyncio.ensure_future(bridge.pump())
        stopper = asyncio.ensure_future(_interrupt_when_cancelled(cancel, agent))
        reusable = False
        self._running.add(agent)
        try:
            try:
                result = await self._in_thread(
                    converse,
                    agent,
                    bridge,
                    request.run_id,
                    request.session_id,
                    request.message,
                    history,
                )
            except asyncio.CancelledError:
                agent.interrupt("worker stopping")  # the thread winds down on its own
                pump.cancel()
                raise
            except StepInterrupted:  # why is the bridge's failure, raised below
                result = {"failed": True, "error": "a step of the turn could not be recorded"}
            except Exception as exc:
                raise crashed(runtime.provider, "failed", exc) from None
            finally:
                stopper.cancel()
                bridge.close()
            await pump  # everything the agent emitted goes out before the turn ends
            if bridge.failure is not None:
                raise bridge.failure
            if cancel.cancelled or result.get("interrupted"):
                # What Hermes finished before the interrupt (it closes a tool tail itself).
                done = turn_messages(result.get("messages") or [], len(history))
                raise TurnCancelled(cancel.reason or "interrupted", done)
            if result.get("failed"):
                raise failure(runtime.provider, result)
            reusable = True
            return self._outcome(result, agent, runtime, len(history), before, cost_before)
        finally:
            self._running.discard(agent)
            detach(agent)
            if reusable:
                self._release(self.warm.put(request.session_id, sig, agent))
            else:
                self._release([agent])

    def _build(self, runtime: Runtime, request: AgentRequest, toolsets: list[str]) -> Any:
        return self.agents.build(runtime, request, toolsets)

    async def _agent_for(
        self,
        request: AgentRequest,
        runtime: Runtime,
        sig: str,
        cancel: CancelToken,
        toolsets: list[str],
    ) -> Any:
        """The session's warm agent when its construction still matches, else a new one."""
        agent, stale = self.warm.take(request.session_id, sig)
        self._release(stale)
        if cancel.cancelled:
            raise TurnCancelled(cancel.reason)
        if agent is None:
            try:
                agent = await self._in_thread(self._build, runtime, request, toolsets)
            except Exception as exc:
                raise crashed(runtime.provider, "could not be built", exc) from None
        if cancel.cancelled:  # stopped while the agent was being built
            self._release([agent])
            raise TurnCancelled(cancel.reason)
        return agent

    def _outcome(
        self,
        result: dict[str, Any],
        agent: Any,
        runtime: Runtime,
        history_length: int,
        tokens_before: tuple[int, int],
        cost_before: float,
    ) -> AgentResult:
        """What the turn produced, read from Hermes' result and the agent's counters."""
        # Hermes continues a reply cut at the output limit a few times, then gives up with a
        # partial result whose error says so (upstream's rule for finish_reason length).
        cut = bool(result.get("partial")) and "truncat" in str(result.get("error")).lower()
        return AgentResult(
            output=str(result.get("final_response") or ""),
            usage=Usage(
                input_tokens=max(0, agent.session_prompt_tokens - tokens_before[0]),
                output_tokens=max(0, agent.session_completion_tokens - tokens_before[1]),
            ),
            messages=turn_messages(result.get("messages") or [], history_length),
            runtime=self.agents.actual_runtime(agent, runtime),
            cost_usd=max(0.0, estimated_cost(agent) - cost_before),
            finish_reason="length" if cut else "stop",
        )

    def _release(self, agents: list[Any]) -> None:
        for agent in agents:
            try:
                self._threads.submit(release_clients, agent)
            except RuntimeError:  # shutting down: no new threads, release here
                release_clients(agent)

    async def _in_thread(self, fn: Callable[..., T], *args: Any) -> T:
        call = functools.partial(contextvars.copy_context().run, fn, *args)
        return await asyncio.get_running_loop().run_in_executor(self._threads, call)

    async def catalog(self) -> BackendCatalog:
        """Skills and toolsets for ``/v1/skills`` and ``/v1/toolsets`` (published by the
        worker through Redis)."""
        return await self._in_thread(hermes_catalog, self.toolsets)

    async def aclose(self, grace: float = 10.0) -> None:
        """Interrupt agents still running (a cancelled turn leaves its thread to wind down),
        release the warm ones, and wait a bounded time for the threads: a tool that ignores
        the interrupt must not hold the worker's shutdown forever."""
        for agent in list(self._running):
            agent.interrupt("worker stopping")
        self._release(self.warm.drain())
        try:
            async with asyncio.timeout(grace):
                await asyncio.to_thread(self._threads.shutdown, wait=True, cancel_futures=True)
        except TimeoutError:
            log.warning("hermes: agent threads still running after %.0fs of shutdown", grace)


async def _interrupt_when_cancelled(cancel: CancelToken, agent: Any) -> None:
    await cancel.wait()
    agent.interrupt(cancel.reason or "Stop requested via API")
