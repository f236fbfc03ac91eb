"""Starting a run: the one way, for the API's turns and the scheduler's fires.

A run is created with its record and queue entry in one script (``repository.py``); this module
decides which script and settles what the session rule answers. A run either runs beside any
other (``start``: ``/v1/runs``, stateless completions and responses) or under its stored
session's one-turn-at-a-time rule (``start_in_session``: session chat, completions on a stored
session, scheduled jobs), where a busy session

- refuses the run (``reject``: the caller answers 409),
- parks it behind the active one (``enqueue``), or
- parks it and stops the active and waiting ones (``interrupt``);

and an active turn nobody reads any more (``streams/presence.py``) is stopped rather than
waited for, whatever the strategy (docs/compatibility.md, "Abandoned turns").

What the record holds is a :class:`~hermes_queue.runs.model.NewRun`, encoded once
(``NewRun.fields``), so no caller writes record fields by hand; its id comes from here too
(``new_run_id``, ``tick_run_id``), placed by ``placement.py`` in the shard its session's keys
live in.
"""

from __future__ import annotations

from typing import Literal

from hermes_queue.runs.model import NewRun
from hermes_queue.runs.repository import RunRepository, SessionAdmission
from hermes_queue.streams.presence import ReaderPresence

# What a second turn on a busy stored session does (see the module docstring).
Strategy = Literal["reject", "enqueue", "interrupt"]


class RunStarter:
    """Starts runs through ``runs``. ``presence``: the API process's readers of runs; a
    session run started with it is read by the request that starts it (and so can be found
    abandoned once that request is gone); the scheduler starts runs nobody reads."""

    def __init__(self, runs: RunRepository, presence: ReaderPresence | None = None) -> None:
        self.runs = runs
        self._presence = presence

    @property
    def read_here(self) -> bool:
        """A session run this starts has this process's reader entry written by its creating
        script (``lua/create_session_run.lua``), which vouches until its request follows it."""
        return self._presence is not None

    def new_run_id(self, session_id: str | None = None) -> str:
        """The id of a new run; given the stored session it will run under, one placed where
        that session's keys are (``placement.py``)."""
        return self.runs.placement.new_run_id(session_id)

    async def tick_run_id(self, base_run_id: str, session_id: str) -> str:
        """The id a scheduled tick's run takes in ``session_id``: the same on every worker
        that fires the tick (``placement.RunPlacement.tick_run_id``)."""
        return await self.runs.placement.tick_run_id(base_run_id, session_id)

    async def start(self, run: NewRun) -> bool:
        """Create and queue ``run`` beside any other; False when its id exists."""
        return await self.runs.create(run)

    async def start_in_session(self, run: NewRun, strategy: Strategy) -> SessionAdmission:
        """Create ``run`` under its session's one-turn-at-a-time rule; the admission says
        ``created``, ``waiting`` (parked), ``busy`` (refused, ``reject``) or ``exists`` (the
        id was taken). A parked run's blockers are stopped as the strategy or their
        abandonment asks."""
        presence = self._presence
        if presence is not None:
            await presence.flush()  # a reader of the active turn that left here is gone
        admission = await self.runs.create_session_run(
            run,
            strategy="reject" if strategy == "reject" else "enqueue",
            read_by=presence.reader_id if presence is not None else None,
        )
        if admission.verdict != "waiting":
            return admission
        if strategy == "interrupt":
            active, waiting = await self.runs.session_runs(run.session_id)
            for other in [active, *waiting]:
                if other and other != run.run_id:
                    await self.runs.request_stop(other)
        elif admission.abandoned and admission.blocking_run_id:
            # Nobody reads the active turn any more: it is superseded, not waited for; it
            # stops within milliseconds and stores its reply as far as it went, then this one
            # starts.
            await self.runs.request_stop(admission.blocking_run_id)
        return admission
