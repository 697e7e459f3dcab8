// The punctual dashboard: reads and acts through the JSON API under
// /api/v1, refreshes every 2 s, draws its charts as inline SVG. No
// libraries, no network but this server. Data is put in the page with
// textContent only, never as HTML.
'use strict';

const REFRESH_MS = 2000;
const TOKEN_KEY = 'punctual.api-token';

const state = {
  token: sessionStorage.getItem(TOKEN_KEY) || '',
  info: null,
  topics: [],
  selected: null,
  rendered: {},
  busy: false,
};

const $ = (sel) => document.querySelector(sel);

// el('td', {class: 'num'}, 'text', childNode, ...)
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) node.addEventListener(k.slice(2), v);
    else if (k === 'dataset') Object.assign(node.dataset, v);
    else node.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

// ---- talking to the API ----------------------------------------------------

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

async function api(method, path, body, { auth = method !== 'GET' } = {}) {
  const headers = { Accept: 'application/json' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const needed = auth || (state.info && state.info.reads_need_token);
  if (needed && state.token) headers.Authorization = 'Bearer ' + state.token;
  const resp = await fetch('/api/v1' + path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    cache: 'no-store',
  });
  let data = null;
  try { data = await resp.json(); } catch (_) { /* not JSON */ }
  if (!resp.ok) {
    const e = (data && data.error) || {};
    throw new ApiError(resp.status, e.code || 'http_' + resp.status,
      e.message || resp.status + ' ' + resp.statusText);
  }
  return data;
}

const enc = encodeURIComponent;
const topicPath = (t) => '/topics/' + enc(t);

function flash(message, isError) {
  const box = $('#flash');
  box.replaceChildren(el('div', { class: 'flash' + (isError ? ' error' : '') }, message));
  clearTimeout(flash.timer);
  flash.timer = setTimeout(() => box.replaceChildren(), isError ? 12000 : 5000);
}

function explain(e) {
  if (e.status === 401) return 'Enter the API token at the top' + (state.info && state.info.reads_need_token ? '' : ' to make changes') + '. (' + e.message + ')';
  return e.message || String(e);
}

// Runs a change, reports it, refreshes.
async function act(what, fn) {
  try {
    const msg = await fn();
    flash(msg || what);
  } catch (e) {
    flash(what + ' failed: ' + explain(e), true);
  }
  await refresh();
}

// ---- formatting --------------------------------------------------------------

function span(ms) {
  ms = Math.max(0, Math.round(ms));
  if (ms < 1000) return ms + ' ms';
  const s = Math.floor(ms / 1000);
  if (s < 60) return (ms / 1000).toFixed(s < 10 ? 1 : 0) + ' s';
  const m = Math.floor(s / 60);
  if (m < 60) return m + ' m ' + (s % 60) + ' s';
  const h = Math.floor(m / 60);
  if (h < 48) return h + ' h ' + (m % 60) + ' m';
  return Math.floor(h / 24) + ' d ' + (h % 24) + ' h';
}

function when(atMs, nowMs) {
  const d = atMs - nowMs;
  return d >= 0 ? 'in ' + span(d) : span(-d) + ' ago';
}

function clock(ms) {
  const d = new Date(ms);
  const today = new Date();
  const time = d.toLocaleTimeString([], { hour12: false });
  return d.toDateString() === today.toDateString() ? time : d.toISOString().slice(0, 10) + ' ' + time;
}

const count = (n) => Number(n || 0).toLocaleString('en-US');

// Re-renders a region only when its data changed (keeps buttons stable).
function changed(key, data) {
  const text = JSON.stringify(data);
  if (state.rendered[key] === text) return false;
  state.rendered[key] = text;
  return true;
}

// ---- topics ---------------------------------------------------------------

function renderTopics(topics) {
  const body = $('#topics tbody');
  const names = $('#topic-names');
  if (!changed('topics', [topics, state.selected])) return;
  names.replaceChildren(...topics.map((t) => el('option', { value: t.topic })));
  if (topics.length === 0) {
    body.replaceChildren(el('tr', { class: 'empty' }, el('td', { colspan: 10 },
      'No topics yet. A topic appears when a job is enqueued to it (POST /api/v1/topics/NAME/jobs, or punctual push).')));
    return;
  }
  body.replaceChildren(...topics.map((t) => {
    const c = t.counters || {};
    const row = el('tr', {
      dataset: { topic: t.topic },
      class: t.topic === state.selected ? 'selected' : null,
      onclick: (ev) => { if (!ev.target.closest('button')) select(t.topic); },
    },
      el('td', { class: 'topic mono' }, t.topic),
      el('td', { class: 'status' }, badge(t)),
      el('td', { class: 'num pool' }, count(t.pool)),
      el('td', { class: 'num ready' }, count(t.ready), limitedMark(t)),
      el('td', { class: 'num running' }, count(t.running - (t.waiting || 0)),
        t.waiting > 0 ? el('span', { class: 'waiting', title: 'leased by a worker, not started yet' }, ' +' + count(t.waiting) + ' waiting') : null),
      el('td', { class: 'num dead' + (t.dead > 0 ? ' dead-count' : '') }, count(t.dead)),
      el('td', { class: 'num done' }, count(c.done)),
      el('td', { class: 'next-due' }, t.next_due_in_ms == null ? '–' : 'in ' + span(t.next_due_in_ms)),
      el('td', { class: 'oldest-ready' }, t.oldest_ready_ms == null ? '–' : span(t.oldest_ready_ms)),
      el('td', {}, el('button', {
        type: 'button',
        class: t.paused ? 'resume' : 'pause',
        onclick: () => togglePause(t.topic, t.paused),
      }, t.paused ? 'Resume' : 'Pause')),
    );
    return row;
  }));
}

function togglePause(topic, paused) {
  const verb = paused ? 'resume' : 'pause';
  return act((paused ? 'Resumed ' : 'Paused ') + topic, async () => {
    await api('POST', topicPath(topic) + '/' + verb);
  });
}

function select(topic) {
  state.selected = topic;
  state.rendered = {};
  history.replaceState(null, '', '#topic=' + enc(topic));
  refresh();
}

// ---- resident handlers ------------------------------------------------------

// figures: {topic: {alive, restarts, jobs, restarts_by_reason}}, {} when
// this server runs no resident handler (the panel stays hidden).
function renderResident(figures) {
  if (!changed('resident', figures)) return;
  const names = Object.keys(figures).sort();
  $('#resident').hidden = names.length === 0;
  $('#resident tbody').replaceChildren(...names.map((t) => {
    const f = figures[t];
    const why = Object.entries(f.restarts_by_reason || {}).map(([k, v]) => k + ': ' + v).join(', ');
    return el('tr', { dataset: { topic: t } },
      el('td', { class: 'topic mono' }, t),
      el('td', { class: 'num alive' }, count(f.alive)),
      el('td', { class: 'num restarts', title: why || null }, count(f.restarts)),
      el('td', { class: 'num jobs' }, count(f.jobs)));
  }));
}

// ---- processes and the overdue signal ----------------------------------------

// Which limit holds a topic's ready jobs back (rate or max_running), with
// its limits as the tooltip; nothing when none does.
function limitedMark(t) {
  if (!t.limited) return null;
  const l = t.limits || {};
  const parts = [];
  if (l.rate) parts.push('rate ' + l.rate + (l.burst ? ', burst ' + l.burst : ''));
  if (l.max_running) parts.push('max running ' + l.max_running);
  return el('span', { class: 'limited', title: 'held back by its limits: ' + parts.join(', ') }, ' (' + t.limited + ')');
}

// A topic's status badge: active only with a live worker (the API says).
function badge(t) {
  const status = t.status || (t.paused ? 'paused' : 'active');
  const cls = { active: '', idle: ' idle', paused: ' paused', 'no consumer': ' bad', overdue: ' bad' }[status] || ' idle';
  const title = status === 'no consumer' ? 'jobs are waiting and no worker serving this topic is alive'
    : status === 'overdue' ? (t.reasons || []).join('; ') : null;
  return el('span', { class: 'badge' + cls, title }, status);
}

// The topics over an alert (their reasons), as a warning above the topics.
function renderOverdue(topics) {
  const reasons = topics.flatMap((t) => t.reasons || []);
  if (!changed('overdue', reasons)) return;
  $('#overdue').hidden = reasons.length === 0;
  $('#overdue ul').replaceChildren(...reasons.map((r) => el('li', {}, r)));
}

// {now_ms, processes: [{id, host, pid, role, topics, version, started_ms, beat_ms}]}
function renderProcesses(reply) {
  const procs = reply.processes || [];
  if (!changed('processes', procs.map((p) => [p.id, p.pid, p.beat_ms]))) return;
  const body = $('#processes tbody');
  if (procs.length === 0) {
    body.replaceChildren(el('tr', { class: 'empty' }, el('td', { colspan: 8 },
      'No live punctual process is registered: nothing runs a worker or a scheduler for this prefix.')));
    return;
  }
  const ago = (ms) => span(Math.max(0, reply.now_ms - ms));
  body.replaceChildren(...procs.map((p) => el('tr', { dataset: { id: p.id, role: p.role } },
    el('td', { class: 'role' }, p.role),
    el('td', { class: 'host mono' }, p.host),
    el('td', { class: 'num pid' }, String(p.pid)),
    el('td', { class: 'topics mono' }, p.topics.length ? p.topics.join(', ') : '–'),
    el('td', { class: 'up' }, ago(p.started_ms)),
    el('td', { class: 'beat' }, ago(p.beat_ms) + ' ago'),
    el('td', { class: 'version' }, p.version),
    el('td', { class: 'id mono' }, p.id))));
}

// ---- one topic --------------------------------------------------------------

function renderDetail(topic, stats, history, pool, ready, dead, schedules) {
  $('#detail').hidden = false;
  $('#detail-topic').textContent = topic;
  $('#detail-status').replaceWith(Object.assign(badge(stats), { id: 'detail-status' }));
  const toggle = $('#pause-toggle');
  toggle.textContent = stats.paused ? 'Resume' : 'Pause';
  toggle.onclick = () => togglePause(topic, stats.paused);

  if (changed('history', history)) renderCharts(history);
  if (changed('pool', pool)) renderPeek('#next-due', pool, 'Nothing waiting for its due time.');
  if (changed('ready', ready)) renderPeek('#ready', ready, 'No due job is waiting for a worker.');
  if (changed('dead', dead)) renderDead(topic, dead);
  if (changed('schedules', schedules)) renderSchedules(topic, schedules);
}

function renderSchedules(topic, reply) {
  const now = Date.now();
  const rows = reply.schedules.map((s) => el('tr', { dataset: { name: s.name } },
    el('td', { class: 'id' }, s.name),
    el('td', {}, s.cron ? s.cron + (s.tz !== 'UTC' ? ' (' + s.tz + ')' : '') : 'every ' + span(s.every_ms)),
    el('td', {}, s.catch_up + (s.spread_ms ? ' over ' + span(s.spread_ms) : '')),
    el('td', { title: s.next_ms ? clock(s.next_ms) : '' },
      s.paused ? 'paused' : (s.next_ms ? clock(s.next_ms) + ' (' + when(s.next_ms, now) + ')' : '–')),
    el('td', {},
      el('button', { type: 'button', onclick: () => toggleSchedule(topic, s.name, s.paused) },
        s.paused ? 'Resume' : 'Pause')),
  ));
  $('#schedules tbody').replaceChildren(...(rows.length ? rows
    : [el('tr', { class: 'empty' }, el('td', { colspan: 5 },
      'No schedules (add one with `punctual schedule add` or [schedules.NAME] in the config).'))]));
}

function toggleSchedule(topic, name, paused) {
  const verb = paused ? 'resume' : 'pause';
  return act(paused ? 'Resume' : 'Pause', async () => {
    await api('POST', topicPath(topic) + '/schedules/' + enc(name) + '/' + verb);
    return (paused ? 'Resumed' : 'Paused') + ' schedule ' + name + ' of ' + topic + '.';
  });
}

function renderPeek(table, page, emptyText) {
  const rows = page.jobs.map((j) => el('tr', { dataset: { id: j.id } },
    el('td', { class: 'id' }, j.id),
    el('td', { title: clock(j.at_ms) }, when(j.at_ms, page.now_ms))));
  $(table + ' tbody').replaceChildren(...(rows.length ? rows
    : [el('tr', { class: 'empty' }, el('td', { colspan: 2 }, emptyText))]));
}

function renderDead(topic, page) {
  $('#dead-total').textContent = '(' + count(page.total) + ')';
  $('#replay-all').disabled = page.total === 0;
  $('#purge-all').disabled = page.total === 0;
  const rows = page.jobs.map((j) => el('tr', { dataset: { id: j.id } },
    el('td', { class: 'id' }, j.id),
    el('td', {}, clock(j.state_since_ms)),
    el('td', { class: 'num' }, j.attempts + ' / ' + j.max_attempts),
    el('td', { class: 'err' }, j.last_error || '–'),
    el('td', { class: 'payload', title: j.payload }, j.payload),
    el('td', {},
      el('button', { type: 'button', class: 'replay', onclick: () => replay(topic, [j.id]) }, 'Replay'), ' ',
      el('button', { type: 'button', class: 'purge danger', onclick: () => purge(topic, [j.id]) }, 'Purge')),
  ));
  if (page.total > page.jobs.length) {
    rows.push(el('tr', { class: 'empty' }, el('td', { colspan: 6 },
      'Showing the ' + page.jobs.length + ' most recent of ' + count(page.total) + '.')));
  }
  $('#dead tbody').replaceChildren(...(rows.length ? rows
    : [el('tr', { class: 'empty' }, el('td', { colspan: 6 }, 'No dead jobs.'))]));
}

function replay(topic, ids) {
  return act('Replay', async () => {
    const body = ids ? { ids } : { all: true };
    const r = await api('POST', topicPath(topic) + '/dead/replay', body);
    return 'Replayed ' + r.replayed + ' job(s) of ' + topic + ': they are due now.';
  });
}

function purge(topic, ids) {
  const what = ids ? 'job ' + ids.join(', ') : 'every dead job of ' + topic;
  if (!confirm('Delete ' + what + ' for good?')) return Promise.resolve();
  return act('Purge', async () => {
    const r = await api('POST', topicPath(topic) + '/dead/purge', ids ? { ids } : { all: true });
    return 'Purged ' + r.purged + ' dead job(s) of ' + topic + '.';
  });
}

// ---- charts ------------------------------------------------------------------

const SVG = 'http://www.w3.org/2000/svg';

function svg(tag, attrs, text) {
  const n = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, v);
  if (text !== undefined) n.textContent = text;
  return n;
}

function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}

function fmtValue(v) {
  if (v >= 100) return Math.round(v).toString();
  if (v >= 10) return v.toFixed(1).replace(/\.0$/, '');
  return v.toFixed(2).replace(/\.?0+$/, '') || '0';
}

// Lateness in ms as an axis label: 0.1ms, 1ms, 10ms, 100ms, 1s, 10s, 100s.
function fmtMs(ms) {
  if (ms >= 1000) return fmtValue(ms / 1000) + 's';
  return fmtValue(ms) + 'ms';
}

// lines: [{name, color, points: [[t_ms, value or null]]}]; the x axis
// spans the data (at least 5 minutes, at most the hour shown). With `log`,
// the y axis is logarithmic, one grid line per decade, so a 60 s spike and
// the usual few ms are both readable. Each point is a circle with its time
// and value (data-t, data-v), so a lone minute between gaps shows too.
function lineChart(container, lines, endMs, startMs, emptyText, { log = false, label = fmtValue } = {}) {
  const W = Math.max(300, container.clientWidth || 600);
  const H = 180;
  const L = 46, R = 10, T = 22, B = 20;
  const window = Math.min(3600e3, Math.max(300e3, endMs - startMs));
  const t0 = endMs - window;
  const x = (t) => L + ((t - t0) / window) * (W - L - R);
  let max = 0;
  let minPos = Infinity;
  for (const l of lines) {
    for (const [, v] of l.points) {
      if (v != null && v > max) max = v;
      if (v != null && v > 0 && v < minPos) minPos = v;
    }
  }
  let y, ticks;
  if (log) {
    const lo = Math.max(-3, Math.min(-1, Math.floor(Math.log10(minPos))));
    const hi = Math.max(lo + 1, Math.ceil(Math.log10(max > 0 ? max : 1)));
    y = (v) => T + (1 - (Math.log10(Math.max(v, Math.pow(10, lo))) - lo) / (hi - lo)) * (H - T - B);
    ticks = [];
    for (let k = lo; k <= hi; k++) ticks.push(Math.pow(10, k));
  } else {
    const top = niceMax(max);
    y = (v) => T + (1 - v / top) * (H - T - B);
    ticks = [0, top / 2, top];
  }
  const root = svg('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'data-bottom': H - B });
  for (const v of ticks) {
    root.append(svg('line', { class: 'axis', x1: L, x2: W - R, y1: y(v), y2: y(v) }));
    root.append(svg('text', { x: L - 6, y: y(v) + 3, 'text-anchor': 'end' }, label(v)));
  }
  const step = [60e3, 120e3, 300e3, 600e3, 900e3].find((s) => window / s <= 6) || 900e3;
  for (let ago = 0; ago <= window + 1; ago += step) {
    const label = ago === 0 ? 'now' : '−' + Math.round(ago / 60e3) + ' min';
    const anchor = ago === 0 ? 'end' : ago + step > window + 1 ? 'start' : 'middle';
    root.append(svg('text', { x: x(endMs - ago), y: H - 5, 'text-anchor': anchor }, label));
  }
  const hasData = lines.some((l) => l.points.some(([, v]) => v != null));
  if (!hasData) {
    root.append(svg('text', { class: 'nodata', x: (L + W - R) / 2, y: H / 2, 'text-anchor': 'middle' }, emptyText));
  }
  for (const l of lines) {
    let d = '';
    let pen = false;
    for (const [t, v] of l.points) {
      if (v == null || t < t0) { pen = false; continue; }
      d += (pen ? 'L' : 'M') + x(t).toFixed(1) + ' ' + y(v).toFixed(1) + ' ';
      pen = true;
      root.append(svg('circle', {
        cx: x(t).toFixed(1), cy: y(v).toFixed(1), r: 2, fill: l.color,
        'data-line': l.name, 'data-t': t, 'data-v': v,
      }));
    }
    if (d) root.append(svg('path', { d, fill: 'none', stroke: l.color, 'stroke-width': 1.6, 'stroke-linejoin': 'round' }));
  }
  const legend = svg('g', { class: 'legend' });
  let lx = L;
  for (const l of lines) {
    legend.append(svg('rect', { x: lx, y: 6, width: 10, height: 10, rx: 2, fill: l.color }));
    const last = [...l.points].reverse().find(([, v]) => v != null);
    const text = l.name + (last ? ' ' + label(last[1]) : '');
    legend.append(svg('text', { x: lx + 14, y: 15 }, text));
    lx += 22 + text.length * 6.2;
  }
  root.append(legend);
  container.replaceChildren(root);
}

// The charts, from the per-minute history in Redis (every host; survives
// restarts). A point is drawn at the end of its minute. Throughput shows
// complete minutes only (the current one is still counting); a minute
// without the schedulers' snapshots is a gap in the line.
function renderCharts(history) {
  const mins = history.minutes;
  const end = history.now_ms;
  const start = mins.length ? mins[0].minute * 60e3 : end;
  const at = (m) => (m.partial ? end : (m.minute + 1) * 60e3);
  const done = mins.filter((m) => !m.partial);
  const count = (name) => done.map((m) => [at(m), m.counters ? (m.counters[name] || 0) : null]);
  lineChart($('#chart-throughput'), [
    { name: 'done/min', color: '#15803d', points: count('done') },
    { name: 'enqueued/min', color: '#2563eb', points: count('enqueued') },
    { name: 'died/min', color: '#b91c1c', points: count('dead') },
  ], end, start, 'no history: no scheduler took snapshots in this hour');
  const late = (f) => mins.map((m) => [at(m), m.lateness.count ? f(m.lateness) : null]);
  lineChart($('#chart-lateness'), [
    { name: 'max', color: '#9333ea', points: late((l) => l.max_us / 1000) },
    { name: 'mean', color: '#0891b2', points: late((l) => l.sum_us / l.count / 1000) },
  ], end, start, 'no handler started in this hour', { log: true, label: fmtMs });
  const gaps = done.filter((m) => !m.counters).length;
  $('#lateness-note').textContent =
    'Per minute, from Redis (every host, kept 7 days): how late handlers started after the due time, ' +
    'as the workers measured it; logarithmic scale.' +
    (gaps ? ' ' + gaps + ' of the last ' + done.length + ' minutes have no throughput figures: no scheduler ran.' : '');
}

// ---- job lookup ----------------------------------------------------------------

async function lookup(ev) {
  if (ev) ev.preventDefault();
  const topic = $('#lookup-topic').value.trim();
  const id = $('#lookup-id').value.trim();
  const out = $('#lookup-result');
  if (!topic || !id) return;
  try {
    const j = await api('GET', topicPath(topic) + '/jobs/' + enc(id));
    showJob(topic, j);
  } catch (e) {
    out.replaceChildren(el('p', { class: 'flash error' }, explain(e)));
  }
}

function showJob(topic, j) {
  const row = (k, v) => [el('dt', {}, k), el('dd', {}, v)];
  const since = j.state === 'running' ? 'lease until' : j.state === 'dead' ? 'died' : null;
  const buttons = [];
  if (j.state === 'pool' || j.state === 'ready') {
    buttons.push(el('button', { type: 'button', class: 'run-now', onclick: () => act('Run now', async () => {
      await api('POST', topicPath(topic) + '/jobs/' + enc(j.id) + '/reschedule', { delay_ms: 0 });
      await lookup();
      return 'Job ' + j.id + ' is due now.';
    }) }, 'Run now'));
  }
  if (j.state === 'dead') {
    buttons.push(el('button', { type: 'button', class: 'replay', onclick: async () => { await replay(topic, [j.id]); await lookup(); } }, 'Replay'));
  }
  buttons.push(el('button', { type: 'button', class: 'cancel danger', onclick: () => {
    if (!confirm('Cancel job ' + j.id + '?')) return;
    act('Cancel', async () => {
      await api('DELETE', topicPath(topic) + '/jobs/' + enc(j.id));
      $('#lookup-result').replaceChildren();
      return 'Cancelled job ' + j.id + '.';
    });
  } }, 'Cancel'));
  $('#lookup-result').replaceChildren(
    el('dl', { class: 'job' },
      row('Id', el('span', { class: 'mono' }, j.id)),
      row('State', j.state),
      row('Due', clock(j.due_ms) + ' (' + when(j.due_ms, j.now_ms) + ')'),
      row('Created', clock(j.created_ms)),
      since && j.state_since_ms ? row(since, clock(j.state_since_ms)) : [],
      row('Attempts', j.attempts + ' of ' + j.max_attempts),
      row('Last error', j.last_error || '–'),
      row('Payload', el('span', { class: 'mono' }, j.payload)),
    ),
    el('div', {}, ...buttons.flatMap((b) => [b, ' '])),
  );
}

// ---- token -------------------------------------------------------------------

async function checkToken() {
  const label = $('#token-state');
  if (state.info && !state.info.changes_allowed) {
    $('#token-form').replaceChildren(el('span', { class: 'muted' },
      'read-only: this server has no API token (set PUNCTUAL_API_TOKEN to allow changes)'));
    return;
  }
  if (!state.token) { label.textContent = 'not set: changes are refused'; return; }
  try {
    await api('GET', '/auth', undefined, { auth: true });
    label.textContent = 'accepted';
  } catch (e) {
    label.textContent = e.status === 401 ? 'wrong token' : 'cannot check: ' + e.message;
  }
}

function saveToken(ev) {
  ev.preventDefault();
  state.token = $('#token').value.trim();
  $('#token').value = '';
  if (state.token) sessionStorage.setItem(TOKEN_KEY, state.token);
  else sessionStorage.removeItem(TOKEN_KEY);
  checkToken();
}

// ---- audit trail --------------------------------------------------------------

function auditDetail(d) {
  if (!d || typeof d !== 'object') return d == null ? '' : String(d);
  return Object.entries(d)
    .map(([k, v]) => k + '=' + (typeof v === 'string' ? v : JSON.stringify(v)))
    .join(' ');
}

// audit: GET /api/v1/audit's answer (entries newest first), or {error}.
function renderAudit(audit) {
  if (!changed('audit', audit)) return;
  const body = $('#audit tbody');
  if (audit.error) {
    body.replaceChildren(el('tr', { class: 'empty' }, el('td', { colspan: 5 },
      'cannot read the audit trail: ' + audit.error)));
    return;
  }
  const entries = audit.entries || [];
  if (entries.length === 0) {
    body.replaceChildren(el('tr', { class: 'empty' }, el('td', { colspan: 5 },
      'Nothing recorded yet: replays, purges, cancels, pauses, resumes and imports through the API or the CLI appear here.')));
    return;
  }
  body.replaceChildren(...entries.map((e) => el('tr', {},
    el('td', { class: 'when', title: new Date(e.at_ms).toISOString() }, clock(e.at_ms)),
    el('td', { class: 'who mono' }, e.who + ' (' + e.from + ')'),
    el('td', { class: 'action mono' }, e.action),
    el('td', { class: 'topic mono' }, e.topic || '–'),
    el('td', { class: 'detail mono' }, auditDetail(e.detail)))));
}

// ---- the loop ----------------------------------------------------------------

async function refresh() {
  if (state.busy) return;
  state.busy = true;
  try {
    const [{ topics }, resident, audit] = await Promise.all([
      api('GET', '/topics'),
      api('GET', '/resident'),
      // A trail that cannot be read must not stop the rest of the page.
      api('GET', '/audit?limit=20').catch((e) => ({ error: explain(e) })),
    ]);
    state.topics = topics;
    renderResident(resident);
    renderAudit(audit);
    renderOverdue(topics);
    renderProcesses(await api('GET', '/processes'));
    if (!state.selected || !topics.some((t) => t.topic === state.selected)) {
      const fromHash = decodeURIComponent((location.hash.match(/topic=([^&]+)/) || [])[1] || '');
      const pick = topics.find((t) => t.topic === fromHash) || topics[0];
      state.selected = pick ? pick.topic : null;
    }
    renderTopics(topics);
    const t = state.selected;
    if (t) {
      const p = topicPath(t);
      const [history, pool, ready, dead, schedules] = await Promise.all([
        api('GET', p + '/history?minutes=60'),
        api('GET', p + '/jobs?state=pool&limit=10'),
        api('GET', p + '/jobs?state=ready&limit=10'),
        api('GET', p + '/dead?limit=20'),
        api('GET', p + '/schedules'),
      ]);
      renderDetail(t, topics.find((x) => x.topic === t), history, pool, ready, dead, schedules);
    } else {
      $('#detail').hidden = true;
    }
    $('#refreshed').textContent = 'updated ' + new Date().toLocaleTimeString([], { hour12: false });
    $('#refreshed').classList.remove('stale');
  } catch (e) {
    $('#refreshed').textContent = 'cannot refresh: ' + explain(e);
  } finally {
    state.busy = false;
  }
}

async function start() {
  $('#token-form').addEventListener('submit', saveToken);
  $('#lookup-form').addEventListener('submit', lookup);
  $('#replay-all').addEventListener('click', () => {
    if (state.selected && confirm('Replay every dead job of ' + state.selected + '?')) replay(state.selected, null);
  });
  $('#purge-all').addEventListener('click', () => state.selected && purge(state.selected, null));
  try {
    state.info = await api('GET', '/info');
    $('#server').textContent = (state.info.redis || 'Redis') + ' · prefix ' + state.info.prefix + ' · punctual ' +
      state.info.mode + ' ' + state.info.version;
  } catch (e) {
    $('#server').textContent = 'cannot reach the API: ' + explain(e);
  }
  checkToken();
  await refresh();
  setInterval(refresh, REFRESH_MS);
  window.addEventListener('resize', () => { delete state.rendered.history; refresh(); });
}

document.addEventListener('DOMContentLoaded', start);
