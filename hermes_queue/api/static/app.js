/*
 * hermes-queue operator dashboard. Vanilla JS, no build step, nothing loaded from elsewhere.
 *
 * The page holds no data: everything comes from the authenticated API with the key the operator
 * typed in (kept in sessionStorage, i.e. for this tab only). EventSource cannot send an
 * Authorization header, so the SSE endpoints are read with fetch() + a ReadableStream and parsed
 * by SseParser below.
 *
 *   queue view  <- GET /v1/queue/stream  (`event: queue` snapshots, ~1 per second: depth,
 *                  workers, the ready and in-flight runs, the recent failures)
 *               <- GET /api/jobs?include_disabled=true (once the stream is live: every 5 s, and
 *                  whenever a run leaves the in-flight list)
 *               <- GET /v1/webhooks/deliveries (with the jobs). Redelivery is the API's and the
 *                  CLI's: a same-origin POST carries an Origin header, which the CORS rules
 *                  (upstream's) refuse unless cors_origins lists the dashboard's own origin.
 *   run view    <- GET /v1/runs/{id}/events (#run/<id>; resumes with Last-Event-ID on a drop)
 */
'use strict';

const KEY_STORAGE = 'hermes-queue.api-key';
const HISTORY_MS = 5 * 60 * 1000; // the depth chart's window
const STATES = ['ready', 'running', 'deferred', 'blocked'];
const IN_FLIGHT_PAGE = 100; // ready and in-flight runs listed (the stream's ?limit=)
const JOBS_REFRESH_MS = 5000;
const WEBHOOKS_SHOWN = 20;
const TERMINAL = new Set(['run.completed', 'run.failed', 'run.cancelled']);
const RETRY_MIN_MS = 500;
const RETRY_MAX_MS = 10000;

const $ = (id) => document.getElementById(id);

class AuthError extends Error {}
class HttpError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

/* ---------------------------------------------------------------- API access */

function apiKey() {
  return sessionStorage.getItem(KEY_STORAGE);
}

/** fetch() with the bearer key; a 401 means the key is wrong: ask for it again. */
async function api(path, options = {}) {
  const headers = { Authorization: `Bearer ${apiKey()}`, ...(options.headers || {}) };
  const response = await fetch(path, { ...options, headers, cache: 'no-store' });
  if (response.status === 401) throw new AuthError('The API key was rejected.');
  if (!response.ok) {
    let message = `HTTP ${response.status}`;
    try {
      const { error } = await response.json();
      // The jobs API's envelope is {"error": "<string>"}; the others' {"error": {"message"}}.
      message = (typeof error === 'string' ? error : error.message) || message;
    } catch (_) {
      /* not the JSON error envelope: keep the status */
    }
    throw new HttpError(response.status, message);
  }
  return response;
}

async function getJson(path, signal) {
  return (await api(path, { signal })).json();
}

/* ---------------------------------------------------------------- SSE */

/**
 * Incremental text/event-stream parser (the WHATWG rules). feed() takes decoded text as it
 * arrives, in chunks of any size; onEvent({event, data, id}) is called for each complete event.
 * Comment lines (": keepalive", ": stream closed") are skipped. The last event id is committed
 * only when its event is dispatched, so a frame cut by a dropped connection is never counted as
 * received: the reconnect's Last-Event-ID then asks for it again.
 */
class SseParser {
  constructor(onEvent) {
    this.onEvent = onEvent;
    this.lastEventId = '';
    this.restart();
  }

  /** Forget a partial frame (call before reading a new connection); keeps lastEventId. */
  restart() {
    this.buffer = '';
    this.idBuffer = this.lastEventId;
    this.event = '';
    this.data = [];
  }

  feed(text) {
    this.buffer += text;
    const newline = /\r\n|\r|\n/g;
    let start = 0;
    let match;
    while ((match = newline.exec(this.buffer)) !== null) {
      // A lone \r at the very end may be the first half of a \r\n: wait for the next chunk.
      if (match[0] === '\r' && newline.lastIndex === this.buffer.length) break;
      this.line(this.buffer.slice(start, match.index));
      start = newline.lastIndex;
    }
    this.buffer = this.buffer.slice(start);
  }

  line(line) {
    if (line === '') return this.dispatch();
    if (line.startsWith(':')) return undefined; // comment
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'event') this.event = value;
    else if (field === 'data') this.data.push(value);
    else if (field === 'id' && !value.includes('\0')) this.idBuffer = value;
    // `retry:` and unknown fields are ignored: reconnecting is paced by follow().
    return undefined;
  }

  dispatch() {
    this.lastEventId = this.idBuffer;
    // No data line, no event (a blank line after comments, or after a lone `id:`).
    const event = this.data.length
      ? { event: this.event || 'message', data: this.data.join('\n'), id: this.lastEventId }
      : null;
    this.event = '';
    this.data = [];
    if (event) this.onEvent(event);
  }
}

/** Read one SSE response to its end. onOpen() runs once the server has accepted it. */
async function readStream(path, parser, signal, onOpen) {
  const headers = { Accept: 'text/event-stream' };
  if (parser.lastEventId) headers['Last-Event-ID'] = parser.lastEventId;
  const response = await api(path, { headers, signal });
  onOpen();
  parser.restart();
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    parser.feed(value);
  }
}

function sleep(ms, signal) {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => { clearTimeout(timer); resolve(); }, { once: true });
  });
}

/**
 * Follow an SSE endpoint: read it, and after a drop reconnect (exponential backoff) until
 * isDone() or the signal aborts. The parser keeps the last event id across connections, so a
 * stream with ids resumes after the last event it delivered. onState(state, detail) reports
 * 'connecting' | 'live' | 'retrying' | 'ended' | 'error'.
 */
async function follow({ path, parser, signal, isDone = () => false, onState }) {
  let delay = RETRY_MIN_MS;
  while (!signal.aborted && !isDone()) {
    try {
      onState('connecting');
      await readStream(path, parser, signal, () => {
        delay = RETRY_MIN_MS;
        onState('live');
      });
    } catch (err) {
      if (signal.aborted) return;
      if (err instanceof AuthError) return askForKey(err.message);
      // A 4xx other than 429 (e.g. no such run) will not change by retrying.
      if (err instanceof HttpError && err.status < 500 && err.status !== 429) {
        return onState('error', err.message);
      }
    }
    if (signal.aborted || isDone()) break;
    onState('retrying');
    await sleep(delay, signal);
    delay = Math.min(delay * 2, RETRY_MAX_MS);
  }
  if (!signal.aborted) onState('ended');
  return undefined;
}

/* ---------------------------------------------------------------- formatting and DOM */

function duration(seconds) {
  if (seconds < 60) return `${seconds.toFixed(1)} s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ${Math.floor(seconds % 60)} s`;
  return `${Math.floor(seconds / 3600)} h ${Math.floor((seconds % 3600) / 60)} min`;
}

function clock(epochSeconds) {
  return new Date(epochSeconds * 1000).toLocaleTimeString();
}

function runLink(runId) {
  const a = document.createElement('a');
  a.href = `#run/${encodeURIComponent(runId)}`;
  a.textContent = runId;
  return a;
}

/** A table row; cells are strings (set as text, never as HTML) or DOM nodes; a run link's
 * cell never breaks the id across lines (it is copied whole). */
function row(cells, attributes = {}) {
  const tr = document.createElement('tr');
  for (const [name, value] of Object.entries(attributes)) tr.dataset[name] = value;
  for (const cell of cells) {
    const td = document.createElement('td');
    if (cell instanceof Node) td.append(cell);
    else td.textContent = String(cell);
    if (cell instanceof HTMLAnchorElement) td.classList.add('id');
    tr.append(td);
  }
  return tr;
}

/**
 * Make tbody's rows match items, one row per key, reusing the rows already there (only cells
 * whose text changed are touched): a link is never replaced under the operator's pointer.
 */
function syncRows(tbody, items, keyOf, cellsOf, empty) {
  const existing = new Map([...tbody.rows].filter((tr) => tr.dataset.key).map((tr) => [tr.dataset.key, tr]));
  const wanted = items.map((item) => {
    const key = String(keyOf(item));
    const cells = cellsOf(item);
    const tr = existing.get(key);
    if (!tr) return row(cells, { key });
    cells.forEach((cell, i) => {
      const text = cell instanceof Node ? cell.textContent : String(cell);
      if (tr.cells[i].textContent !== text) tr.cells[i].replaceChildren(cell);
    });
    return tr;
  });
  if (!wanted.length) {
    wanted.push(row([empty]));
    wanted[0].classList.add('empty');
  }
  const unchanged = wanted.length === tbody.rows.length && wanted.every((tr, i) => tbody.rows[i] === tr);
  if (!unchanged) tbody.replaceChildren(...wanted);
}

function setBadge(element, state, text) {
  element.dataset.state = state;
  element.textContent = text;
}

/* ---------------------------------------------------------------- depth chart */

/** Line chart of depth by state over the last HISTORY_MS, drawn on the canvas. */
function drawChart(canvas, history) {
  const ratio = window.devicePixelRatio || 1;
  const width = canvas.clientWidth;
  const height = canvas.clientHeight;
  if (canvas.width !== Math.round(width * ratio)) canvas.width = Math.round(width * ratio);
  if (canvas.height !== Math.round(height * ratio)) canvas.height = Math.round(height * ratio);
  const ctx = canvas.getContext('2d');
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, width, height);

  const pad = { left: 44, right: 12, top: 10, bottom: 22 };
  const plotWidth = width - pad.left - pad.right;
  const plotHeight = height - pad.top - pad.bottom;
  const now = history.length ? history[history.length - 1].t : Date.now();
  // The y axis: integer steps of 1, 2 or 5 x 10^n, about 4 of them.
  const peak = Math.max(1, ...history.flatMap((p) => STATES.map((s) => p.depth[s])));
  const magnitude = 10 ** Math.floor(Math.log10(peak / 4 || 1));
  const step = Math.max(1, [1, 2, 5, 10].map((m) => m * magnitude).find((s) => s * 4 >= peak));
  const top = step * Math.ceil(peak / step);
  const x = (t) => pad.left + plotWidth * (1 - (now - t) / HISTORY_MS);
  const y = (v) => pad.top + plotHeight * (1 - v / top);

  const style = getComputedStyle(document.documentElement);
  ctx.font = '11px system-ui, sans-serif';
  ctx.lineWidth = 1;
  ctx.strokeStyle = style.getPropertyValue('--grid').trim();
  ctx.fillStyle = style.getPropertyValue('--muted').trim();
  ctx.textAlign = 'right';
  ctx.textBaseline = 'middle';
  for (let v = 0; v <= top; v += step) {
    ctx.beginPath();
    ctx.moveTo(pad.left, y(v));
    ctx.lineTo(width - pad.right, y(v));
    ctx.stroke();
    ctx.fillText(String(v), pad.left - 6, y(v));
  }
  ctx.textAlign = 'center';
  ctx.textBaseline = 'top';
  for (let minutes = 5; minutes >= 0; minutes -= 1) {
    const label = minutes ? `-${minutes} min` : 'now';
    ctx.fillText(label, Math.min(x(now - minutes * 60000), width - pad.right - 10), height - pad.bottom + 6);
  }

  ctx.lineWidth = 2;
  for (const state of STATES) {
    ctx.strokeStyle = style.getPropertyValue(`--${state}`).trim();
    ctx.beginPath();
    history.forEach((point, i) => {
      // A gap of more than 5 s (the stream was down) is left as a gap, not bridged.
      const gap = i === 0 || point.t - history[i - 1].t > 5000;
      if (gap) ctx.moveTo(x(point.t), y(point.depth[state]));
      else ctx.lineTo(x(point.t), y(point.depth[state]));
    });
    ctx.stroke();
  }
}

/* ---------------------------------------------------------------- queue view */

const queue = {
  controller: null, // aborts the queue stream and its status look-ups
  history: [], // [{t: ms, depth}]
  inFlight: new Set(), // run ids on the last snapshot's page
};

function startQueue() {
  queue.controller = new AbortController();
  const parser = new SseParser((frame) => {
    if (frame.event === 'queue') onSnapshot(JSON.parse(frame.data));
  });
  const badge = $('connection');
  follow({
    path: `/v1/queue/stream?limit=${IN_FLIGHT_PAGE}`,
    parser,
    signal: queue.controller.signal,
    onState: (state, detail) => {
      const text = { connecting: 'connecting…', live: 'live', retrying: 'reconnecting…', ended: 'disconnected', error: detail };
      setBadge(badge, state, text[state] || state);
      // Jobs are read once the key is known to work (a wrong key is reported once, by the stream).
      if (state === 'live' && jobs.timer === null) startJobs();
    },
  });
}

/** A tenant's limits as a short text ("run 8 · ready 200 · 5/s"); "–" for none. */
function limitsText(limits) {
  if (!limits) return '–';
  const parts = [];
  if (limits.running) parts.push(`run ${limits.running}`);
  if (limits.ready) parts.push(`ready ${limits.ready}`);
  if (limits.rate_per_second) parts.push(`${limits.rate_per_second}/s`);
  return parts.join(' · ') || '–';
}

function onSnapshot(snap) {
  for (const state of STATES) $(`depth-${state}`).textContent = snap.depth[state];
  $('oldest-ready').textContent = duration(snap.oldest_ready_age_seconds);
  $('claims-rate').textContent = snap.throughput.claims_per_second.toFixed(2);

  queue.history.push({ t: snap.at * 1000, depth: snap.depth });
  while (queue.history.length && queue.history[0].t < snap.at * 1000 - HISTORY_MS) queue.history.shift();
  drawChart($('depth-chart'), queue.history);

  const w = snap.workers;
  $('workers-summary').textContent = `${w.count} live · ${w.slots} slots · ${w.busy} busy · ${w.free_slots} free · ${w.desired} desired`;
  const short = w.count < w.desired;
  $('workers-banner').hidden = !short;
  if (short) {
    $('workers-banner').textContent = `Fewer live workers than desired: ${w.count} live, ${w.desired} desired. Scale the workers up, or find out why they are not starting.`;
  }
  syncRows(
    $('workers-body'),
    w.data,
    (worker) => worker.id,
    (worker) => [worker.id, worker.slots, worker.busy, `${duration(worker.seen_seconds_ago)} ago`],
    'no live worker',
  );

  // The queue per tenant (held: ready runs waiting at the tenant's running limit; claimed, the
  // mean wait of those and refused: over the throughput window).
  const tenants = snap.tenants;
  $('tenants-summary').textContent = `${tenants.data.length} · claimed, their wait and refused over the last ${duration(tenants.window_seconds)}`;
  syncRows(
    $('tenants-body'),
    tenants.data,
    (t) => t.tenant,
    (t) => [
      t.tenant, t.ready, t.held, t.running, t.claimed,
      t.mean_wait_seconds == null ? '–' : duration(t.mean_wait_seconds),
      t.refused, limitsText(t.limits),
    ],
    'no tenant',
  );

  const waiting = snap.queued;
  const listed = waiting.data.length < waiting.total ? ` (first ${waiting.data.length})` : '';
  $('queued-count').textContent = `${waiting.total}${listed}`;
  syncRows(
    $('queued-body'),
    waiting.data,
    (run) => run.run_id,
    (run) => [run.position, runLink(run.run_id), run.session_id, run.attempt, duration(run.age_seconds)],
    'nothing waiting',
  );

  const flight = snap.in_flight;
  const shown = flight.data.length < flight.total ? ` (first ${flight.data.length})` : '';
  $('inflight-count').textContent = `${flight.total}${shown}`;
  syncRows(
    $('inflight-body'),
    flight.data,
    (run) => run.run_id,
    (run) => [runLink(run.run_id), run.session_id, run.status, run.worker, run.attempt, duration(run.age_seconds)],
    'nothing in flight',
  );
  if (noticeFinished(flight.data.map((run) => run.run_id))) refreshAside();

  // The failures the count covers, listed (the snapshot carries the latest ones).
  const t = snap.throughput;
  const failed = snap.recent_failures;
  const latest = failed.data.length < failed.total ? ` (latest ${failed.data.length} listed)` : '';
  $('failures-summary').textContent = `${t.failed} failed, ${t.completed} completed in the last ${duration(t.window_seconds)}${latest}`;
  syncRows(
    $('failures-body'),
    failed.data,
    (f) => f.run_id,
    (f) => [runLink(f.run_id), clock(f.failed_at), f.error, f.reason],
    'none',
  );
}

/** Whether a run left the in-flight list since the last snapshot (maybe a job's run ended:
 * the jobs table is then refreshed). */
function noticeFinished(ids) {
  const current = new Set(ids);
  const left = [...queue.inFlight].some((runId) => !current.has(runId));
  queue.inFlight = current;
  return left;
}

/* ---------------------------------------------------------------- scheduled jobs */

const jobs = { timer: null, loading: false };

function nextFire(job) {
  if (!job.next_run_at) return '–';
  const at = Date.parse(job.next_run_at);
  const left = (at - Date.now()) / 1000;
  return `${new Date(at).toLocaleString()} (${left > 0 ? `in ${duration(left)}` : 'due'})`;
}

function lastRun(job) {
  if (!job.last_run) return '–';
  const cell = document.createElement('span');
  cell.append(runLink(job.last_run.run_id), ` · ${job.last_run.status}`);
  return cell;
}

/** GET /api/jobs (all of them, paused and completed too) into the jobs table. */
async function refreshJobs() {
  if (jobs.loading || !queue.controller) return;
  jobs.loading = true;
  try {
    const { jobs: list } = await getJson('/api/jobs?include_disabled=true', queue.controller.signal);
    const scheduled = list.filter((job) => job.enabled).length;
    $('jobs-summary').textContent = `${scheduled} scheduled · ${list.length - scheduled} paused or done`;
    syncRows(
      $('jobs-body'),
      list,
      (job) => job.id,
      (job) => [job.name, job.schedule_display, job.state, nextFire(job), lastRun(job)],
      'no scheduled jobs',
    );
  } catch (err) {
    if (err instanceof AuthError) askForKey(err.message);
    else if (!queue.controller.signal.aborted) $('jobs-summary').textContent = err.message;
  } finally {
    jobs.loading = false;
  }
}

/* ---------------------------------------------------------------- webhook deliveries */

const webhooks = { loading: false };

function lastAttempt(delivery) {
  const last = delivery.attempts[delivery.attempts.length - 1];
  if (!last) return '–';
  const what = last.status !== null ? `HTTP ${last.status}` : last.outcome;
  return last.error ? `${what}: ${last.error}` : what;
}

/** GET /v1/webhooks/deliveries (the newest) into the webhooks table. */
async function refreshWebhooks() {
  if (webhooks.loading || !queue.controller) return;
  webhooks.loading = true;
  try {
    const { data } = await getJson(`/v1/webhooks/deliveries?limit=${WEBHOOKS_SHOWN}`, queue.controller.signal);
    const count = (state) => data.filter((d) => d.state === state).length;
    $('webhooks-summary').textContent =
      `${count('delivered')} delivered · ${count('pending')} pending · ${count('dead') + count('gone')} dead letters (newest ${data.length})`;
    syncRows(
      $('webhooks-body'),
      data,
      (d) => `${d.id}:${d.state}:${d.attempt_count}`,
      (d) => [d.id, runLink(d.run_id), d.event, d.target, d.state, String(d.attempt_count), lastAttempt(d)],
      'no webhook deliveries',
    );
  } catch (err) {
    if (err instanceof AuthError) askForKey(err.message);
    else if (!queue.controller.signal.aborted) $('webhooks-summary').textContent = err.message;
  } finally {
    webhooks.loading = false;
  }
}

function refreshAside() {
  refreshJobs();
  refreshWebhooks();
}

function startJobs() {
  stopJobs();
  refreshAside();
  jobs.timer = setInterval(refreshAside, JOBS_REFRESH_MS);
}

function stopJobs() {
  if (jobs.timer !== null) clearInterval(jobs.timer);
  jobs.timer = null;
}

/* ---------------------------------------------------------------- run view */

let runController = null; // aborts the open run view's tail

/** "ms-seq" stream ids, compared numerically. */
function idAfter(a, b) {
  const [am, as = '0'] = a.split('-');
  const [bm, bs = '0'] = b.split('-');
  return BigInt(am) > BigInt(bm) || (am === bm && BigInt(as) > BigInt(bs));
}

/** One line of detail for an event of the runs dialect. */
function eventDetail(e) {
  switch (e.event) {
    case 'message.delta': return JSON.stringify(e.delta);
    case 'reasoning.available': return e.text;
    case 'tool.started': return `${e.tool}${e.preview ? `: ${e.preview}` : ''}`;
    case 'tool.completed': return `${e.tool} in ${Number(e.duration).toFixed(2)} s${e.error ? ' (error)' : ''}`;
    case 'run.completed': return `output ${JSON.stringify(e.output).slice(0, 200)} · usage ${JSON.stringify(e.usage)}`;
    case 'run.failed': return e.reason ? `${e.error} (${e.reason})` : e.error;
    case 'run.restarted': return `attempt ${e.attempt}: output so far dropped`;
    default: {
      const { event, run_id: _runId, timestamp: _ts, ...rest } = e;
      return JSON.stringify(rest);
    }
  }
}

async function showRunStatus(runId, signal) {
  try {
    const run = await getJson(`/v1/runs/${encodeURIComponent(runId)}`, signal);
    $('run-status').textContent = run.status + (run.error ? `: ${run.error}` : '') + (run.reason ? ` (${run.reason})` : '');
    $('run-status').dataset.status = run.status;
    $('run-session').textContent = run.session_id;
    $('run-attempt').textContent = run.attempt;
    $('run-trace').textContent = run.trace_id || '–';
    const hook = run.webhook;
    $('run-webhook').textContent = hook
      ? `${hook.state}${hook.attempt_count ? ` after ${hook.attempt_count} attempt(s)` : ''}${hook.last_error ? `: ${hook.last_error}` : ''}`
      : 'none';
  } catch (err) {
    if (err instanceof AuthError) askForKey(err.message);
    else if (!signal.aborted) $('run-status').textContent = err.message;
  }
}

function openRun(runId) {
  closeRun();
  runController = new AbortController();
  const { signal } = runController;
  $('queue-view').hidden = true;
  $('run-view').hidden = false;
  $('run-id').textContent = runId;
  for (const id of ['run-status', 'run-session', 'run-attempt', 'run-trace', 'run-webhook']) $(id).textContent = '–';
  $('run-output').textContent = '';
  $('run-events').replaceChildren();
  $('run-event-count').textContent = '';

  const tail = { lastId: '', done: false, count: 0 };
  const parser = new SseParser((frame) => {
    // Belt and braces: Last-Event-ID already makes the server resume after the last event.
    if (frame.id && tail.lastId && !idAfter(frame.id, tail.lastId)) return;
    if (frame.id) tail.lastId = frame.id;
    let e;
    try {
      e = JSON.parse(frame.data);
    } catch (_) {
      e = { event: frame.event, data: frame.data };
    }
    tail.count += 1;
    $('run-event-count').textContent = `${tail.count}`;
    $('run-events').append(row([frame.id, e.event, eventDetail(e)], { event: e.event, id: frame.id }));
    if (e.event === 'message.delta') $('run-output').textContent += e.delta;
    if (e.event === 'run.restarted') $('run-output').textContent = '';
    if (TERMINAL.has(e.event)) {
      tail.done = true;
      showRunStatus(runId, signal);
    }
  });
  showRunStatus(runId, signal);
  const badge = $('run-stream');
  follow({
    path: `/v1/runs/${encodeURIComponent(runId)}/events`,
    parser,
    signal,
    isDone: () => tail.done,
    onState: (state, detail) => {
      const text = {
        connecting: tail.lastId ? `resuming after ${tail.lastId}…` : 'connecting…',
        live: 'following',
        retrying: 'reconnecting…',
        ended: tail.done ? 'ended (terminal event received)' : 'ended',
        error: detail,
      };
      setBadge(badge, tail.done && state === 'ended' ? 'done' : state, text[state] || state);
    },
  });
}

function closeRun() {
  if (runController) runController.abort();
  runController = null;
  $('run-view').hidden = true;
  $('queue-view').hidden = !apiKey();
}

function route() {
  const match = /^#run\/(.+)$/.exec(window.location.hash);
  if (match) openRun(decodeURIComponent(match[1]));
  else closeRun();
}

/* ---------------------------------------------------------------- key and start */

function askForKey(message) {
  stopJobs();
  if (queue.controller) queue.controller.abort();
  closeRun();
  sessionStorage.removeItem(KEY_STORAGE);
  $('queue-view').hidden = true;
  $('forget-key').hidden = true;
  $('login').hidden = false;
  $('login-error').hidden = !message;
  $('login-error').textContent = message || '';
  setBadge($('connection'), 'idle', 'not connected');
  $('api-key').focus();
}

function start() {
  $('login').hidden = true;
  $('forget-key').hidden = false;
  queue.history = [];
  queue.inFlight = new Set();
  startQueue();
  route();
}

document.addEventListener('DOMContentLoaded', () => {
  $('key-form').addEventListener('submit', (event) => {
    event.preventDefault();
    const key = $('api-key').value.trim();
    if (!key) return;
    sessionStorage.setItem(KEY_STORAGE, key);
    $('api-key').value = '';
    start();
  });
  $('forget-key').addEventListener('click', () => askForKey());
  window.addEventListener('hashchange', () => { if (apiKey()) route(); });
  window.addEventListener('resize', () => drawChart($('depth-chart'), queue.history));
  if (apiKey()) start();
  else askForKey();
});
