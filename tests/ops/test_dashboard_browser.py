"""The dashboard in a real headless Chromium (selenium + chromedriver) against a live API + worker.

The API and an in-process worker run on their own event loop in a thread, on a real TCP port,
so the test itself can be plain blocking selenium code. A test-only middleware records every
SSE request (with its Last-Event-ID) and can cut the open streams, like a network drop would.

Skipped when Chromium, chromedriver or selenium is missing, unless CI is set: then it fails.
Set HERMES_QUEUE_DASHBOARD_SCREENSHOT=/path.png to keep a screenshot of the page.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import threading
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from hermes_queue.api.app import create_app
from hermes_queue.config import Settings
from tests.support.inprocess import running_worker

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1280,1200",
)
WAIT_SECONDS = 20.0
SLOW = "[slow:0.1]"  # the echo agent pads to 51 tokens, 0.1 s apart: ~5 s in flight


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{reason}, but CI is set: the browser test must run in CI")
    pytest.skip(reason)


class LiveApi:
    """API (real TCP port on 127.0.0.1) + worker on an event loop in a background thread; the
    API traces (exported nowhere), so its runs carry a trace id to the run view."""

    def __init__(self, settings: Settings, *, worker: bool = True) -> None:
        from opentelemetry.sdk.trace import TracerProvider

        from hermes_queue.tracing.spans import Tracing

        self.settings = settings
        self.worker = worker
        self.tracing = Tracing(TracerProvider())
        self.loop = asyncio.new_event_loop()
        self.base_url = ""
        self._held: list[Any] = []  # session streams started and left open (start_turn)
        self.stream_requests: list[tuple[str, str | None]] = []  # (path, Last-Event-ID)
        self._open_streams: dict[int, web.Request] = {}
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="live-api", daemon=True)

    @web.middleware
    async def _track_streams(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if not request.path.endswith(("/events", "/stream")):
            return await handler(request)
        self.stream_requests.append((request.path, request.headers.get("Last-Event-ID")))
        self._open_streams[id(request)] = request
        try:
            return await handler(request)
        finally:
            self._open_streams.pop(id(request), None)

    def drop_streams(self) -> None:
        """Cut every open SSE connection, as a flaky network or a restarted proxy would."""

        def close() -> None:
            for request in list(self._open_streams.values()):
                if request.transport is not None:
                    request.transport.close()

        self.loop.call_soon_threadsafe(close)

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        app = create_app(self.settings, self.tracing)
        app.middlewares.append(self._track_streams)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        try:
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            host, port = runner.addresses[0][:2]
            self.base_url = f"http://{host}:{port}"
            if not self.worker:  # the queue fills up: nothing takes its runs
                self._ready.set()
                await self._stop.wait()
                return
            async with running_worker(self.settings):
                self._ready.set()
                await self._stop.wait()
        finally:
            await runner.cleanup()

    def _run(self) -> None:
        try:
            self.loop.run_until_complete(self._main())
        except BaseException as exc:  # reported by __enter__ / __exit__
            self._error = exc
        finally:
            self._ready.set()
            self.loop.close()

    def __enter__(self) -> LiveApi:
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None or not self.base_url:
            raise RuntimeError("the live API did not start") from self._error
        return self

    def __exit__(self, *exc: object) -> None:
        for response in self._held:
            response.close()
        if self._stop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)
        assert not self._thread.is_alive(), "the live API did not stop"

    def _open(self, method: str, path: str, body: dict[str, Any] | None) -> Any:
        request = urllib.request.Request(
            self.base_url + path,
            method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={
                "Authorization": f"Bearer {self.settings.api.api_key}",
                "Content-Type": "application/json",
            },
        )
        return urllib.request.urlopen(request, timeout=10)

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        with self._open(method, path, body) as response:
            return json.loads(response.read())

    def start_run(self, text: str) -> str:
        return str(self.call("POST", "/v1/runs", {"input": text})["run_id"])

    def start_turn(self, session_id: str, text: str) -> str:
        """A session chat turn queued behind the session's active one (if any). Its stream is
        held open unread until the API stops: a turn nobody reads would not block the next."""
        body = {"message": text, "multitask_strategy": "enqueue"}
        response = self._open("POST", f"/api/sessions/{session_id}/chat/stream", body)
        self._held.append(response)
        return str(response.headers["X-Hermes-Run-Id"])


def _tuned(settings: Settings) -> Settings:
    return settings.replace(
        metrics_port=0, worker_concurrency=8, queue_stream_interval_seconds=0.25
    )


@pytest.fixture
def live(settings: Settings) -> Iterator[LiveApi]:
    with LiveApi(_tuned(settings)) as api:
        yield api


@pytest.fixture
def no_worker(settings: Settings) -> Iterator[LiveApi]:
    """An API whose deployment has no worker: what it is given stays queued."""
    with LiveApi(_tuned(settings), worker=False) as api:
        yield api


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    try:
        from selenium import webdriver
    except ImportError:
        _unavailable("selenium is not installed")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    chromedriver = shutil.which("chromedriver")
    if not chromium or not chromedriver:
        _unavailable("Chromium or chromedriver is not installed (apt: chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = webdriver.ChromeService(
        executable_path=chromedriver, log_output=str(tmp_path / "chromedriver.log")
    )
    driver = webdriver.Chrome(options=options, service=service)
    try:
        yield driver
    finally:
        console = driver.get_log("browser")
        driver.quit()
        # The only errors allowed on the console: the deliberately wrong key's 401, and the
        # streams cut by drop_streams(). Anything else (an uncaught exception, a request the
        # CSP blocked, a 404 asset) fails the test.
        allowed = (
            "/v1/queue/stream?limit=100 - Failed to load resource: the server responded with "
            "a status of 401",
            "/v1/queue/stream?limit=100 - Failed to load resource: net::ERR_INCOMPLETE_CHUNKED",
            "/events - Failed to load resource: net::ERR_INCOMPLETE_CHUNKED",
        )
        errors = [e["message"] for e in console if e["level"] == "SEVERE"]
        assert [m for m in errors if not any(a in m for a in allowed)] == [], errors


def until(driver: Any, condition: Callable[[Any], Any], what: str) -> Any:
    """Poll ``condition`` (bounded) until it returns something truthy; return that."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.wait import WebDriverWait

    wait = WebDriverWait(
        driver,
        WAIT_SECONDS,
        poll_frequency=0.1,
        ignored_exceptions=(StaleElementReferenceException,),
    )
    return wait.until(condition, message=f"waiting for {what}")


def text(driver: Any, element_id: str) -> str:
    return str(driver.execute_script(f"return document.getElementById('{element_id}').textContent"))


def rows(driver: Any, tbody: str) -> list[dict[str, str]]:
    """The data attributes and cell texts of a table's rows, read in one atomic call."""
    return list(
        driver.execute_script(
            """return [...document.querySelectorAll(`#${arguments[0]} tr`)]
                 .filter((tr) => !tr.classList.contains('empty'))
                 .map((tr) => ({
                   ...tr.dataset, cells: [...tr.cells].map((td) => td.textContent),
                 }));""",
            tbody,
        )
    )


def chart_pixels(driver: Any, css_var: str) -> int:
    """How many pixels of the depth chart are drawn in a state's colour."""
    return int(
        driver.execute_script(
            """const canvas = document.getElementById('depth-chart');
               const probe = document.createElement('canvas').getContext('2d');
               probe.fillStyle = getComputedStyle(document.documentElement)
                 .getPropertyValue(arguments[0]).trim();
               probe.fillRect(0, 0, 1, 1);
               const [r, g, b] = probe.getImageData(0, 0, 1, 1).data;
               const data = canvas.getContext('2d')
                 .getImageData(0, 0, canvas.width, canvas.height).data;
               let count = 0;
               for (let i = 0; i < data.length; i += 4) {
                 const [pr, pg, pb, alpha] = data.subarray(i, i + 4);
                 if (pr === r && pg === g && pb === b && alpha === 255) count++;
               }
               return count;""",
            css_var,
        )
    )


def screenshot(driver: Any, suffix: str = "") -> None:
    target = os.environ.get("HERMES_QUEUE_DASHBOARD_SCREENSHOT")
    if target:
        path = Path(target)
        driver.save_screenshot(str(path.with_stem(path.stem + suffix)))


@pytest.mark.timeout(120)
def test_dashboard_follows_the_queue_and_tails_a_run(live: LiveApi, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    driver = browser
    driver.get(f"{live.base_url}/dashboard")

    # A wrong key is refused and asked for again; the right one connects the live view.
    until(driver, lambda d: d.find_element(By.ID, "api-key").is_displayed(), "the key prompt")
    driver.find_element(By.ID, "api-key").send_keys("not-the-key\n")
    until(driver, lambda d: "rejected" in text(d, "login-error"), "the wrong key's refusal")
    assert driver.find_element(By.ID, "login").is_displayed()
    driver.find_element(By.ID, "api-key").send_keys(live.settings.api.api_key + "\n")
    until(driver, lambda d: text(d, "connection") == "live", "the queue stream")
    until(driver, lambda d: text(d, "workers-summary").startswith("1 live"), "the worker")
    assert [r["cells"][1:3] for r in rows(driver, "workers-body")] == [["8", "0"]]
    assert text(driver, "inflight-count") == "0"

    # Runs started over HTTP show up in flight, in the depth figures and on the chart. The
    # first two are turns of one session, so the second is blocked until the first ends.
    live.call("POST", "/api/sessions", {"id": "dash"})
    runs = [live.start_turn("dash", f"{SLOW} dashboard turn {i}") for i in range(2)]
    runs.append(live.start_run(f"{SLOW} dashboard run 2"))
    doomed = live.start_run(f"{SLOW} [fail] dashboard doomed run")
    in_flight = {runs[0], runs[2], doomed}
    # Fails at once: most likely never in flight when a snapshot is taken, listed all the same.
    quick = live.start_run("[fail] dashboard quick failure")
    until(
        driver,
        lambda d: {r["key"] for r in rows(d, "inflight-body")} == in_flight,
        "three runs in flight",
    )
    until(driver, lambda d: text(d, "depth-running") == "3", "running depth 3")
    until(driver, lambda d: text(d, "depth-blocked") == "1", "blocked depth 1")
    until(driver, lambda d: " 3 busy " in text(d, "workers-summary"), "3 busy slots")
    assert text(driver, "depth-ready") == "0"
    assert text(driver, "inflight-count") == "3"
    row = next(r for r in rows(driver, "inflight-body") if r["key"] == runs[0])
    assert row["cells"][:3] == [runs[0], "dash", "running"]
    until(driver, lambda d: chart_pixels(d, "--running") > 20, "the running line on the chart")
    until(driver, lambda d: chart_pixels(d, "--blocked") > 20, "the blocked line on the chart")
    screenshot(driver)

    # An in-flight row links to its run view, which shows the run's events as they come.
    link = driver.find_element(By.CSS_SELECTOR, f'#inflight-body a[href="#run/{runs[0]}"]')
    until(driver, lambda d: link.text == runs[0], "the link to stay put across snapshots")
    link.click()
    until(driver, lambda d: d.find_element(By.ID, "run-view").is_displayed(), "the run view")
    assert not driver.find_element(By.ID, "queue-view").is_displayed()
    assert text(driver, "run-id") == runs[0]
    until(driver, lambda d: len(rows(d, "run-events")) >= 3, "the first run's deltas")

    # The blocked run's view: keepalive comments only until it starts (never shown as events),
    # then its events; a dropped connection resumes after the last id, with no duplicates.
    driver.execute_script("window.location.hash = arguments[0]", f"#run/{runs[1]}")
    until(driver, lambda d: text(d, "run-id") == runs[1], "the blocked run's view")
    until(driver, lambda d: len(rows(d, "run-events")) >= 5, "the blocked run's first deltas")
    streams_before = len(live.stream_requests)
    live.drop_streams()
    resumed = until(
        driver,
        lambda d: [
            cursor
            for path, cursor in live.stream_requests[streams_before:]
            if path == f"/v1/runs/{runs[1]}/events"
        ],
        "the run view's reconnect",
    )
    assert resumed[0], "the reconnect must carry Last-Event-ID"
    until(
        driver,
        lambda d: any(r["event"] == "run.completed" for r in rows(d, "run-events")),
        "the terminal event",
    )
    until(driver, lambda d: text(d, "run-status") == "completed", "the completed status")
    assert text(driver, "run-stream") == "ended (terminal event received)"
    events = rows(driver, "run-events")
    assert [e["event"] for e in events] == ["message.delta"] * 51 + ["run.completed"]
    ids = [tuple(map(int, e["id"].split("-"))) for e in events]
    assert ids == sorted(set(ids)), "events duplicated or out of order across the reconnect"
    assert resumed[0] in {e["id"] for e in events}
    assert text(driver, "run-output") == live.call("GET", f"/v1/runs/{runs[1]}")["output"]
    screenshot(driver, "-run")

    # The queue stream reconnected on its own, and everything drains; the failure is listed.
    assert any(p == "/v1/queue/stream" for p, _ in live.stream_requests[streams_before:])
    driver.find_element(By.LINK_TEXT, "← back to the queue").click()
    until(driver, lambda d: d.find_element(By.ID, "queue-view").is_displayed(), "the queue view")
    until(driver, lambda d: text(d, "inflight-count") == "0", "an empty in-flight list")
    assert text(driver, "depth-running") == "0"
    # The failures panel lists what it counts (the snapshot's recent failures, newest first).
    until(driver, lambda d: text(d, "failures-summary").startswith("2 failed, 3 completed"), "")
    failures = until(
        driver,
        lambda d: rows(d, "failures-body") if len(rows(d, "failures-body")) == 2 else None,
        "both failed runs listed",
    )
    assert [(f["key"], f["cells"][2]) for f in failures] == [
        (doomed, "echo backend failure requested"),
        (quick, "echo backend failure requested"),
    ]


@pytest.mark.timeout(120)
def test_dashboard_shows_queued_runs_and_too_few_workers(no_worker: LiveApi, browser: Any) -> None:
    """Ready runs are listed in the order workers will take them, ids whole; with fewer live
    workers than desired a banner says so."""
    from selenium.webdriver.common.by import By

    live = no_worker
    driver = browser
    driver.get(f"{live.base_url}/dashboard")
    until(driver, lambda d: d.find_element(By.ID, "api-key").is_displayed(), "the key prompt")
    driver.find_element(By.ID, "api-key").send_keys(live.settings.api.api_key + "\n")
    until(driver, lambda d: text(d, "connection") == "live", "the queue stream")
    assert not driver.find_element(By.ID, "workers-banner").is_displayed()  # nothing wanted

    queued = [live.start_run(f"waits {i}") for i in range(3)]
    listed = until(
        driver,
        lambda d: rows(d, "queued-body") if len(rows(d, "queued-body")) == 3 else None,
        "three queued runs",
    )
    # In the order workers take them (/v1/queue's), each with its position and its whole id.
    order = [run["run_id"] for run in live.call("GET", "/v1/queue")["queued"]["data"]]
    assert sorted(order) == sorted(queued)
    assert [(r["key"], r["cells"][0], r["cells"][1]) for r in listed] == [
        (run_id, str(i + 1), run_id) for i, run_id in enumerate(order)
    ]
    assert text(driver, "queued-count") == "3" and text(driver, "depth-ready") == "3"
    assert text(driver, "inflight-count") == "0"
    # The queue per tenant: the one tenant, default, with the three (no limits: "–").
    (tenant,) = until(
        driver,
        lambda d: (
            rows(d, "tenants-body") if rows(d, "tenants-body")[0]["cells"][1] == "3" else None
        ),
        "the default tenant's three ready runs",
    )
    assert tenant["key"] == "default" and tenant["cells"] == [
        "default",
        "3",
        "0",
        "0",
        "0",
        "–",  # no mean wait: nothing taken yet
        "0",
        "–",
    ]
    banner = driver.find_element(By.ID, "workers-banner")
    until(driver, lambda d: banner.is_displayed(), "the too-few-workers banner")
    assert banner.text.startswith("Fewer live workers than desired: 0 live, 1 desired.")
    # A run id is one line (one box), whole, even in a narrow window.
    driver.set_window_size(480, 1200)
    boxes = driver.execute_script(
        "return [...document.querySelectorAll('#queued-body td.id a')]"
        ".map((a) => [a.getClientRects().length, a.textContent])"
    )
    assert boxes == [[1, run_id] for run_id in queued]
    screenshot(driver, "-queued")


@pytest.mark.timeout(120)
def test_dashboard_lists_scheduled_jobs(live: LiveApi, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    nightly = live.call(
        "POST", "/api/jobs", {"name": "nightly digest", "schedule": "0 3 * * *", "prompt": "go"}
    )["job"]
    paused = live.call(
        "POST", "/api/jobs", {"name": "paused one", "schedule": "every 2h", "prompt": "x"}
    )["job"]
    live.call("POST", f"/api/jobs/{paused['id']}/pause")

    driver = browser
    driver.get(f"{live.base_url}/dashboard")
    until(driver, lambda d: d.find_element(By.ID, "api-key").is_displayed(), "the key prompt")
    driver.find_element(By.ID, "api-key").send_keys(live.settings.api.api_key + "\n")
    listed = until(
        driver,
        lambda d: (
            {r["key"]: r["cells"] for r in rows(d, "jobs-body")}
            if len(rows(d, "jobs-body")) == 2
            else None
        ),
        "both jobs listed",
    )
    assert text(driver, "jobs-summary") == "1 scheduled · 1 paused or done"
    name, schedule, state, next_fire, last_run = listed[nightly["id"]]
    assert (name, schedule, state, last_run) == ("nightly digest", "0 3 * * *", "scheduled", "–")
    assert "(in " in next_fire  # when it fires, and how long until then
    assert listed[paused["id"]][2:] == ["paused", "–", "–"]

    # Fired now: the row shows the run (it ends while the page watches), linked to its view.
    run_id = live.call("POST", f"/api/jobs/{nightly['id']}/run")["run_id"]
    until(
        driver,
        lambda d: any(
            r["key"] == nightly["id"] and r["cells"][4] == f"{run_id} · completed"
            for r in rows(d, "jobs-body")
        ),
        "the job's run, completed",
    )
    screenshot(driver, "-jobs")
    driver.find_element(By.CSS_SELECTOR, f'#jobs-body a[href="#run/{run_id}"]').click()
    until(driver, lambda d: text(d, "run-id") == run_id, "the job run's view")
    until(driver, lambda d: text(d, "run-status") == "completed", "its completed status")
    assert text(driver, "run-session") == nightly["session_id"]


def test_the_run_view_shows_the_runs_trace(live: LiveApi, browser: Any) -> None:
    """A run started while the API traces carries its trace id to the run view."""
    from selenium.webdriver.common.by import By

    run_id = live.start_run("traced turn")
    trace_id = live.call("GET", f"/v1/runs/{run_id}")["trace_id"]
    assert len(trace_id) == 32

    driver = browser
    driver.get(f"{live.base_url}/dashboard")
    until(driver, lambda d: d.find_element(By.ID, "api-key").is_displayed(), "the key prompt")
    driver.find_element(By.ID, "api-key").send_keys(live.settings.api.api_key + "\n")
    until(driver, lambda d: text(d, "connection") == "live", "the queue stream")
    driver.execute_script(f"location.hash = '#run/{run_id}'")
    until(driver, lambda d: text(d, "run-id") == run_id, "the run's view")
    until(driver, lambda d: text(d, "run-trace") == trace_id, "its trace id")


class FlakyReceiver:
    """A webhook receiver on 127.0.0.1 in a thread: answers 500 until ``healthy`` is set."""

    def __init__(self) -> None:
        import http.server

        receiver = self
        self.healthy = threading.Event()
        self.hits: list[str] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                receiver.hits.append(self.headers.get("webhook-id", ""))
                self.send_response(200 if receiver.healthy.is_set() else 500)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FlakyReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[FlakyReceiver]:
    with FlakyReceiver() as started:
        yield started


@pytest.fixture
def hooked_live(settings: Settings, receiver: FlakyReceiver) -> Iterator[LiveApi]:
    """The live API whose worker sends webhooks to ``receiver`` (allow-listed), retrying once."""
    hooked = settings.replace(
        metrics_port=0,
        queue_stream_interval_seconds=0.25,
        webhook_allowed_hosts=("127.0.0.1",),
        webhook_retry_schedule=("0.2s",),
        webhook_poll_seconds=0.1,
    )
    with LiveApi(hooked) as api:
        yield api


@pytest.mark.timeout(120)
def test_the_webhooks_panel_lists_deliveries_and_redelivers(
    hooked_live: LiveApi, receiver: FlakyReceiver, browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    live = hooked_live
    run_id = str(live.call("POST", "/v1/runs", {"input": "hi", "webhook": receiver.url})["run_id"])
    driver = browser
    driver.get(f"{live.base_url}/dashboard")
    until(driver, lambda d: d.find_element(By.ID, "api-key").is_displayed(), "the key prompt")
    driver.find_element(By.ID, "api-key").send_keys(live.settings.api.api_key + "\n")
    dead = until(
        driver,
        lambda d: [r for r in rows(d, "webhooks-body") if r["cells"][4] == "dead"],
        "the dead letter listed",
    )
    delivery_id, run, event, target, _state, attempts, last = dead[0]["cells"]
    assert (run, event, target, attempts, last) == (run_id, "run.completed", "run", "2", "HTTP 500")
    assert "1 dead letters" in text(driver, "webhooks-summary")
    screenshot(driver, "-webhooks")

    # Redelivered (through the API: the dashboard only reads) once the receiver is back.
    receiver.healthy.set()
    live.call("POST", f"/v1/webhooks/deliveries/{delivery_id}/redeliver")
    until(
        driver,
        lambda d: any(
            r["cells"][0] == delivery_id and r["cells"][4] == "delivered"
            for r in rows(d, "webhooks-body")
        ),
        "the redelivered delivery",
    )
    driver.find_element(By.CSS_SELECTOR, f'#webhooks-body a[href="#run/{run_id}"]').click()
    until(
        driver,
        lambda d: text(d, "run-webhook").startswith("delivered after 3 attempt(s)"),
        "the run view's webhook state",
    )
    assert receiver.hits == [delivery_id] * 3
