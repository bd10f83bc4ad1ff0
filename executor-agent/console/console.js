// Sagaplane operator console: plain DOM, no framework, no build step.
// Every string the API sends (goals, reasons, agent names, ids) is untrusted: it goes
// into the page only through textContent, createTextNode and setAttribute, never as HTML.
// All URLs are relative ('api/...') so the console works under any base path.
'use strict';

const SESSION_KEY = 'sagaplane-console-session';
const STATES = ['running', 'waitingForASlot', 'waitingForAPerson', 'completed', 'compensated', 'canceled', 'failed'];
const STATE_LABELS = {
  running: 'running', waitingForASlot: 'waiting for a slot', waitingForAPerson: 'waiting for a person',
  completed: 'completed', compensated: 'compensated', canceled: 'canceled', failed: 'failed',
};
const END_STATES = new Set(['completed', 'compensated', 'canceled', 'failed']);
const SVG_NS = 'http://www.w3.org/2000/svg';
const PAGE_SIZE = 50;
const $ = (sel) => document.querySelector(sel);

// ---- small helpers ---------------------------------------------------------------

const isObj = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
const obj = (v) => (isObj(v) ? v : {});
const arr = (v) => (Array.isArray(v) ? v : []);
const num = (v) => (typeof v === 'number' && Number.isFinite(v) ? v : null);
// Any JSON value as display text (the API may send a number where a string was meant).
const str = (v) => (v == null ? '' : typeof v === 'string' ? v : typeof v === 'object' ? JSON.stringify(v) : String(v));
const count = (v) => (num(v) == null ? '—' : String(v));
const short = (s, n) => (s.length > n ? s.slice(0, n - 1) + '…' : s);

function setAttrs(node, attrs) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v == null || v === false) continue;
    if (k === 'text') node.textContent = str(v);
    else if (k.startsWith('on') && typeof v === 'function') node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? '' : str(v));
  }
  return node;
}

function append(node, children) {
  for (const c of children.flat(Infinity)) {
    if (c == null || c === false) continue;
    node.appendChild(c instanceof Node ? c : document.createTextNode(str(c)));
  }
  return node;
}

// h('td', {class: 'x'}, 'text', child…): text children become text nodes, never HTML.
const h = (tag, attrs, ...children) => append(setAttrs(document.createElement(tag), attrs), children);
const s = (tag, attrs, ...children) => append(setAttrs(document.createElementNS(SVG_NS, tag), attrs), children);

const pad = (n, w = 2) => String(n).padStart(w, '0');

// Local time, ISO-like: 2025-01-31 14:05:09 (with .mmm when asked).
function fmtTime(ms, withMs = false) {
  if (num(ms) == null) return '—';
  const d = new Date(ms);
  const t = `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  return withMs ? `${t}.${pad(d.getMilliseconds(), 3)}` : t;
}

// 3d 4h, 2h 5m, 42m 10s, 7s.
function fmtDhms(ms) {
  let t = Math.floor(Math.abs(ms) / 1000);
  const d = Math.floor(t / 86400); t -= d * 86400;
  const hh = Math.floor(t / 3600); t -= hh * 3600;
  const m = Math.floor(t / 60); const sec = t - m * 60;
  if (d) return `${d}d ${hh}h`;
  if (hh) return `${hh}h ${m}m`;
  if (m) return `${m}m ${sec}s`;
  return `${sec}s`;
}

function fmtLeft(deadlineMs, now = Date.now()) {
  const left = deadlineMs - now;
  return left >= 0 ? fmtDhms(left) : `expired ${fmtDhms(left)} ago`;
}

function fmtDuration(ms) {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(ms < 10000 ? 2 : 1)} s`;
  return fmtDhms(ms);
}

function fmtRate(rate, succeeded, gaveUp) {
  if (num(rate) != null) return `${(rate * 100).toFixed(1)}%`;
  // Only when the field is missing altogether: null means "no compensation yet".
  if (rate === undefined && num(succeeded) != null && num(gaveUp) != null && succeeded + gaveUp > 0) {
    return `${((succeeded / (succeeded + gaveUp)) * 100).toFixed(1)}%`;
  }
  return '—';
}

// A cell the 1 s ticker keeps current: "42m 10s" or "expired 3s ago".
function timeLeft(deadlineMs, soonMs) {
  if (num(deadlineMs) == null) return h('span', {}, '—');
  return h('span', { class: 'time-left', 'data-deadline-ms': deadlineMs, 'data-soon-ms': soonMs }, fmtLeft(deadlineMs));
}

function tickTimes() {
  const now = Date.now();
  for (const e of document.querySelectorAll('.time-left[data-deadline-ms]')) {
    const at = Number(e.dataset.deadlineMs);
    e.textContent = fmtLeft(at, now);
    const soon = Number(e.dataset.soonMs);
    e.classList.toggle('expired', at < now);
    e.classList.toggle('soon', at >= now && Number.isFinite(soon) && at - now <= soon);
  }
  for (const e of document.querySelectorAll('.ago[data-since-ms]')) {
    e.textContent = `${fmtDhms(now - Number(e.dataset.sinceMs))} ago`;
  }
}

const stateBadge = (state) => h('span', { class: `badge state-${str(state)}`, 'data-state': state }, STATE_LABELS[state] || str(state) || 'unknown');
// A saga's link; the API finds a saga by its task id too, for a plan without a sagaId.
const sagaLink = (id, taskId) => {
  const target = str(id) || str(taskId);
  return h('a', { href: `#/saga/${encodeURIComponent(target)}`, class: 'mono' }, str(id) || `task ${str(taskId)}`);
};
const sleep = (ms, signal) => new Promise((resolve) => {
  const t = setTimeout(resolve, ms);
  if (signal) signal.addEventListener('abort', () => { clearTimeout(t); resolve(); }, { once: true });
});

// ---- session and API -------------------------------------------------------------

class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

function session() {
  try {
    const saved = JSON.parse(sessionStorage.getItem(SESSION_KEY));
    return isObj(saved) && typeof saved.session === 'string' && saved.session ? saved : null;
  } catch { return null; }
}

const dropSession = () => sessionStorage.removeItem(SESSION_KEY);

async function readJson(res) {
  try { return JSON.parse(await res.text()); } catch { return null; }
}

// The API's errors are {"error": {"code", "message"}}; anything else gets the status line.
function errorMessage(data, res) {
  const m = obj(obj(data).error).message;
  return typeof m === 'string' && m ? m : `HTTP ${res.status} ${res.statusText || ''}`.trim();
}

async function api(path, { method = 'GET', body, signal } = {}) {
  const s0 = session();
  if (!s0) { showLogin(); throw new ApiError(401, 'not logged in'); }
  const headers = { Accept: 'application/json', Authorization: `Bearer ${s0.session}` };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let res;
  try {
    res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), signal, cache: 'no-store' });
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError(0, `the executor did not answer (${e.message})`);
  }
  const data = await readJson(res);
  if (res.status === 401) {
    // The session expired or was revoked: log in again.
    dropSession();
    showLogin(`Logged out: ${errorMessage(data, res)}`);
    throw new ApiError(401, errorMessage(data, res));
  }
  if (!res.ok) throw new ApiError(res.status, errorMessage(data, res));
  return data;
}

function showError(message) {
  const e = $('#error');
  e.textContent = message;
  e.hidden = false;
}

function clearError() {
  $('#error').hidden = true;
  $('#error').textContent = '';
}

// What every view does with a failed call: aborts are silent, a 401 already shows the
// login form, the rest goes to the banner.
function report(err) {
  if (!err || err.name === 'AbortError') return;
  if (err instanceof ApiError && err.status === 401) return;
  showError(err.message || String(err));
}

// ---- login and logout ------------------------------------------------------------

function showLogin(message) {
  stopView();
  $('#view').hidden = true;
  $('#view').replaceChildren();
  $('#nav').hidden = true;
  $('#logout').hidden = true;
  $('#whoami').textContent = '';
  $('#login').hidden = false;
  const le = $('#login-error');
  le.textContent = message || '';
  le.hidden = !message;
  $('#login-token').focus();
}

function showApp() {
  const who = session();
  $('#login').hidden = true;
  $('#view').hidden = false;
  $('#nav').hidden = false;
  $('#logout').hidden = false;
  $('#whoami').replaceChildren(
    h('span', { class: 'who-name' }, str(who.name) || 'someone'), ' ',
    h('span', { class: 'badge role', 'data-role': who.role }, str(who.role) || 'no role'),
  );
  if (num(who.expiresAtMs) != null) $('#whoami').title = `session until ${fmtTime(who.expiresAtMs)}`;
  route();
}

async function login(ev) {
  ev.preventDefault();
  const input = $('#login-token');
  const token = input.value.trim();
  const le = $('#login-error');
  if (!token) { le.textContent = 'Paste a token first.'; le.hidden = false; return; }
  $('#login-submit').disabled = true;
  try {
    const res = await fetch('api/session', { method: 'POST', headers: { Authorization: `Bearer ${token}`, Accept: 'application/json' }, cache: 'no-store' });
    const data = await readJson(res);
    if (res.ok && isObj(data) && typeof data.session === 'string') {
      sessionStorage.setItem(SESSION_KEY, JSON.stringify(data));
      input.value = ''; // the token is a secret: do not leave it in the form
      le.hidden = true;
      clearError();
      showApp();
    } else {
      le.textContent = res.ok ? 'The executor answered without a session.' : errorMessage(data, res);
      le.hidden = false;
    }
  } catch (e) {
    le.textContent = `The executor did not answer (${e.message}).`;
    le.hidden = false;
  } finally {
    $('#login-submit').disabled = false;
  }
}

async function logout() {
  const s0 = session();
  if (s0) {
    // Best effort: the session is dropped here whatever the executor answers.
    try { await fetch('api/session', { method: 'DELETE', headers: { Authorization: `Bearer ${s0.session}` }, cache: 'no-store' }); } catch { /* gone anyway */ }
  }
  dropSession();
  clearError();
  showLogin();
}

// ---- views and routing -----------------------------------------------------------

// The view shown: its requests and timers stop when another is shown.
let current = null;

function startView() {
  stopView();
  current = { controller: new AbortController(), timers: [] };
  return current;
}

function stopView() {
  if (!current) return;
  current.controller.abort();
  current.timers.forEach(clearInterval);
  current = null;
}

// Fetches `path` now and every `ms`, calling draw(data) only when the answer changed, so
// that a refresh does not replace nodes (and the buttons under the pointer) for nothing.
function poll(view, path, ms, draw) {
  let last = null;
  let busy = false;
  const load = async (force) => {
    if (busy || view.paused) return;
    busy = true;
    try {
      const data = await api(typeof path === 'function' ? path() : path, { signal: view.controller.signal });
      if (view.controller.signal.aborted) return;
      const key = JSON.stringify(data);
      if (force === true || key !== last) { last = key; draw(data); }
    } catch (e) { report(e); } finally { busy = false; }
  };
  load();
  if (ms) view.timers.push(setInterval(load, ms));
  return () => load(true);
}

function route() {
  if (!session()) { showLogin(); return; }
  clearError();
  const raw = location.hash.replace(/^#/, '') || '/';
  const q = raw.indexOf('?');
  const path = q < 0 ? raw : raw.slice(0, q);
  const params = new URLSearchParams(q < 0 ? '' : raw.slice(q + 1));
  const view = startView();
  const root = $('#view');
  root.replaceChildren(h('p', { class: 'muted loading' }, 'Loading…'));
  for (const a of document.querySelectorAll('#nav a')) {
    const target = a.getAttribute('href').slice(1);
    a.classList.toggle('active', target === path || (target === '/sagas' && path.startsWith('/saga/')));
  }
  if (path === '/' || path === '') viewOverview(view, root);
  else if (path === '/sagas') viewSagas(view, root, params);
  else if (path.startsWith('/saga/')) {
    let id = path.slice('/saga/'.length);
    try { id = decodeURIComponent(id); } catch { /* shown as typed */ }
    viewSaga(view, root, id);
  } else if (path === '/waiting') viewWaiting(view, root);
  else root.replaceChildren(h('section', { class: 'card' }, h('h2', {}, 'No such page'), h('p', {}, 'Try ', h('a', { href: '#/' }, 'the overview'), '.')));
}

// ---- overview --------------------------------------------------------------------

// The compensation rate's window in seconds (0: since the executor's start); it stays
// chosen across refreshes and visits.
let overviewWindow = 3600;
const WINDOWS = [[3600, 'the last hour'], [86400, 'the last 24 h'], [0, "since the executor's start"]];

function viewOverview(view, root) {
  let reload = () => {};
  const choose = (w) => { overviewWindow = w; reload(); };
  const path = () => (overviewWindow ? `api/overview?windowSecs=${overviewWindow}` : 'api/overview');
  reload = poll(view, path, 5000, (d) => root.replaceChildren(...overviewSections(obj(d), choose)));
}

function windowPicker(choose) {
  return h('select', { id: 'window', 'aria-label': 'window of the compensation rate', onchange: (ev) => choose(Number(ev.target.value)) },
    WINDOWS.map(([secs, label]) => h('option', { value: String(secs), selected: secs === overviewWindow ? '' : null }, label)));
}

function overviewSections(d, choose) {
  const c = obj(d.compensations);
  const u = obj(d.undoHandles);
  const soonMs = num(u.expiringWithinSecs) == null ? null : u.expiringWithinSecs * 1000;
  const since = h('p', { class: 'muted' }, 'over ', windowPicker(choose || (() => {})), ` (${str(d.since) || 'start'})`, num(d.atMs) != null ? ` · as of ${fmtTime(d.atMs)}` : '');

  const byAgent = arr(c.byAgent).filter(isObj);
  const comp = h('section', { class: 'card', id: 'compensations' },
    h('h2', {}, 'Compensation success rate'),
    h('p', { class: 'big' },
      h('span', { class: 'figure', 'data-testid': 'compensation-rate' }, fmtRate(c.rate, c.succeeded, c.gaveUp)),
      h('span', { class: 'muted', 'data-testid': 'compensation-counts' }, ` ${count(c.succeeded)} succeeded · ${count(c.gaveUp)} given up (to a person) · ${count(c.failedAttempts)} failed attempts`)),
    since,
    h('table', { 'data-testid': 'compensation-by-agent' },
      h('thead', {}, h('tr', {}, h('th', {}, 'Agent'), h('th', { class: 'n' }, 'Succeeded'), h('th', { class: 'n' }, 'Given up'),
        h('th', { class: 'n' }, 'Failed attempts'), h('th', { class: 'n' }, 'Rate'))),
      h('tbody', {}, byAgent.length ? byAgent.map((a) => h('tr', { 'data-agent': str(a.agent) },
        h('td', {}, str(a.agent)), h('td', { class: 'n' }, count(a.succeeded)), h('td', { class: 'n' }, count(a.gaveUp)),
        h('td', { class: 'n' }, count(a.failedAttempts)), h('td', { class: 'n' }, fmtRate(a.rate, a.succeeded, a.gaveUp))))
        : h('tr', {}, h('td', { colspan: 5, class: 'muted' }, 'No compensation has run.')))));

  const soonest = arr(u.soonest).filter(isObj);
  const undo = h('section', { class: 'card', id: 'undo-handles' },
    h('h2', {}, 'Undo handles'),
    h('p', { class: 'big' },
      h('span', { class: 'figure', 'data-testid': 'undo-open' }, count(u.open)),
      h('span', { class: 'muted' }, ' open · '),
      h('span', { 'data-testid': 'undo-expiring' }, count(u.expiring)),
      h('span', { class: 'muted' }, soonMs == null ? ' expiring soon' : ` expiring within ${fmtDhms(soonMs)}`)),
    h('table', { 'data-testid': 'undo-soonest' },
      h('thead', {}, h('tr', {}, ['Saga', 'Step', 'Agent', 'Deadline', 'Time left'].map((t) => h('th', {}, t)))),
      h('tbody', {}, soonest.length ? soonest.map((x) => h('tr', { 'data-saga-id': str(x.sagaId), 'data-step': str(x.step) },
        h('td', {}, sagaLink(x.sagaId, x.taskId)), h('td', { class: 'mono' }, str(x.step)), h('td', {}, str(x.agent)),
        h('td', { class: 'mono', title: num(x.deadlineMs) == null ? null : new Date(x.deadlineMs).toISOString() }, fmtTime(x.deadlineMs)),
        h('td', {}, timeLeft(x.deadlineMs, soonMs))))
        : h('tr', {}, h('td', { colspan: 5, class: 'muted' }, 'No undo handle is open.')))));

  const sg = obj(d.sagas);
  // The states the executor counts, in this page's order; any other it sends after them.
  const keys = STATES.filter((k) => k in sg).concat(Object.keys(sg).filter((k) => !STATES.includes(k) && num(sg[k]) != null));
  const states = h('section', { class: 'card wide' }, h('h2', {}, 'Sagas by state'),
    h('div', { class: 'tiles' }, keys.map((k) => h('a', { class: `tile state-${k}`, href: `#/sagas?state=${encodeURIComponent(k)}` },
      h('span', { class: 'tile-n', 'data-testid': `state-${k}` }, count(sg[k])),
      h('span', { class: 'tile-label' }, STATE_LABELS[k] || k)))));

  return [h('div', { class: 'grid2' }, comp, undo), states, callsSection(arr(d.calls).filter(isObj))];
}

// Tool-call outcomes as an agent × outcome table.
function callsSection(calls) {
  const agents = [...new Set(calls.map((c) => str(c.agent)))].sort();
  const order = ['succeeded', 'failed', 'unknown'];
  const outcomes = [...new Set(calls.map((c) => str(c.outcome)))]
    .sort((a, b) => ((order.indexOf(a) + 1 || 99) - (order.indexOf(b) + 1 || 99)) || a.localeCompare(b));
  const cell = (agent, outcome) => calls.filter((c) => str(c.agent) === agent && (outcome == null || str(c.outcome) === outcome))
    .reduce((t, c) => t + (num(c.count) || 0), 0);
  return h('section', { class: 'card wide' }, h('h2', {}, 'Tool-call outcomes by agent'),
    h('table', { 'data-testid': 'calls-by-agent' },
      h('thead', {}, h('tr', {}, h('th', {}, 'Agent'), outcomes.map((o) => h('th', { class: 'n' }, o)), h('th', { class: 'n' }, 'Total'))),
      h('tbody', {}, agents.length ? agents.map((a) => h('tr', { 'data-agent': a }, h('td', {}, a),
        outcomes.map((o) => h('td', { class: `n outcome-${o}` }, String(cell(a, o)))), h('td', { class: 'n' }, String(cell(a, null)))))
        : h('tr', {}, h('td', { colspan: outcomes.length + 2, class: 'muted' }, 'No tool call has been answered.')))));
}

// ---- sagas list ------------------------------------------------------------------

function viewSagas(view, root, params) {
  const filters = { state: params.get('state') || '', agent: params.get('agent') || '', q: params.get('q') || '', supersedes: params.get('supersedes') || '' };
  // Keyset paging: the token of the page shown, and a stack of the earlier pages' tokens.
  const pager = { token: null, earlier: [] };
  const stateSel = h('select', { id: 'filter-state', name: 'state' }, h('option', { value: '' }, 'any'),
    STATES.map((k) => h('option', { value: k, selected: k === filters.state }, STATE_LABELS[k])));
  const agentIn = h('input', { id: 'filter-agent', name: 'agent', type: 'search', value: filters.agent, placeholder: 'agent name' });
  const qIn = h('input', { id: 'filter-q', name: 'q', type: 'search', value: filters.q, placeholder: 'saga id, goal text or idempotency key', class: 'wide-input' });
  const form = h('form', { class: 'filters', id: 'filters' },
    h('label', {}, 'State ', stateSel), h('label', {}, 'Agent ', agentIn), h('label', { class: 'grow' }, 'Search ', qIn),
    h('button', { id: 'filter-apply', type: 'submit' }, 'Apply'));
  const results = h('div', { class: 'results' }, h('p', { class: 'muted' }, 'Loading…'));
  // A link from a saga's page: the plans made to replace it (text, never markup).
  const superseding = filters.supersedes
    ? h('p', { class: 'muted', 'data-testid': 'superseding' }, 'Only the sagas whose plan supersedes ', h('span', { class: 'mono' }, filters.supersedes), ' (Apply clears this).')
    : null;
  root.replaceChildren(h('section', { class: 'card wide' }, h('h2', {}, 'Sagas'), form, superseding, results));

  const load = async () => {
    const qs = new URLSearchParams();
    for (const [k, v] of Object.entries(filters)) if (v) qs.set(k, v);
    qs.set('pageSize', String(PAGE_SIZE));
    if (pager.token) qs.set('pageToken', pager.token);
    try {
      const d = obj(await api(`api/sagas?${qs}`, { signal: view.controller.signal }));
      if (!view.controller.signal.aborted) results.replaceChildren(...sagaTable(d, pager, load));
    } catch (e) { report(e); }
  };

  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    filters.state = stateSel.value; filters.agent = agentIn.value.trim(); filters.q = qIn.value.trim(); filters.supersedes = '';
    const qs = new URLSearchParams();
    for (const [k, v] of Object.entries(filters)) if (v) qs.set(k, v);
    const hash = `#/sagas${qs.toString() ? `?${qs}` : ''}`;
    // The filters live in the hash (a link can be shared); the same hash fires no hashchange.
    if (location.hash === hash) { pager.token = null; pager.earlier = []; load(); } else location.hash = hash;
  });
  load();
}

function sagaTable(d, pager, load) {
  const sagas = arr(d.sagas).filter(isObj);
  const table = h('table', { 'data-testid': 'sagas' },
    h('thead', {}, h('tr', {}, ['Saga', 'State', 'Goal', 'Agents', 'Planner', 'Updated'].map((t) => h('th', {}, t)))),
    h('tbody', {}, sagas.length ? sagas.map((x) => h('tr', { 'data-saga-id': str(x.sagaId), 'data-testid': 'saga-row', 'data-state': str(x.state) },
      h('td', {}, sagaLink(x.sagaId, x.taskId)), h('td', {}, stateBadge(x.state)),
      h('td', { class: 'goal', title: str(x.goal) }, str(x.goal)),
      h('td', {}, arr(x.agents).map(str).join(', ')), h('td', {}, str(x.planner)),
      h('td', { class: 'mono nowrap' }, fmtTime(x.updatedMs))))
      : h('tr', {}, h('td', { colspan: 6, class: 'muted' }, 'No saga matches.'))));
  const pagerBar = h('div', { class: 'pager' },
    h('span', { class: 'muted' }, `page ${pager.earlier.length + 1} · ${sagas.length} shown`, num(d.scanned) != null ? ` · ${d.scanned} scanned` : ''));
  if (pager.earlier.length) {
    pagerBar.append(h('button', { id: 'prev-page', type: 'button', onclick: () => { pager.token = pager.earlier.pop(); load(); } }, '← Newer'));
  }
  if (d.nextPageToken != null && d.nextPageToken !== '') {
    pagerBar.append(h('button', { id: 'next-page', type: 'button', onclick: () => { pager.earlier.push(pager.token); pager.token = str(d.nextPageToken); load(); } }, 'Older →'));
  }
  return [table, pagerBar];
}

// ---- one saga --------------------------------------------------------------------

function viewSaga(view, root, sagaId) {
  const url = `api/sagas/${encodeURIComponent(sagaId)}`;
  const signal = view.controller.signal;
  let data = null;
  let busy = false;
  let again = false;
  let streaming = null; // the events stream's AbortController while it runs
  let timelineBox = null;

  const draw = () => {
    const parts = sagaSections(data);
    timelineBox = parts.timelineBox;
    root.replaceChildren(...parts.sections);
  };
  const load = async () => {
    if (busy) { again = true; return; } // coalesce bursts of "change" events
    busy = true;
    try {
      do {
        again = false;
        const d = obj(await api(url, { signal }));
        if (signal.aborted) return;
        data = d;
        draw();
      } while (again);
    } catch (e) {
      report(e);
      if (!data && !signal.aborted) root.replaceChildren(h('section', { class: 'card' }, h('h2', {}, 'Saga ', h('span', { class: 'mono' }, sagaId)), h('p', {}, e.message || 'Could not load the saga.')));
    } finally { busy = false; }
    if (!data || signal.aborted) return;
    if (END_STATES.has(data.state)) { if (streaming) streaming.abort(); streaming = null; } else if (!streaming) {
      streaming = new AbortController();
      const mine = streaming;
      signal.addEventListener('abort', () => mine.abort(), { once: true });
      followEvents(`${url}/events`, mine.signal, load);
    }
  };
  // An open item grows until now: redraw the timeline alone, from what was fetched.
  view.timers.push(setInterval(() => {
    if (!data || END_STATES.has(data.state) || !timelineBox) return;
    if (!arr(data.timeline).some((x) => isObj(x) && x.endMs == null) && !arr(data.waits).some((w) => isObj(w) && w.endMs == null)) return;
    timelineBox.replaceChildren(...timelineParts(data, timelineBox.clientWidth));
  }, 2000));
  load();
}

// Reads the saga's text/event-stream with fetch (EventSource sends no Authorization):
// every `event: change` re-fetches; a dropped stream reconnects after 2 s.
async function followEvents(url, signal, onChange) {
  let connected = false;
  while (!signal.aborted) {
    try {
      const s0 = session();
      if (!s0) return;
      const res = await fetch(url, { headers: { Authorization: `Bearer ${s0.session}`, Accept: 'text/event-stream' }, signal, cache: 'no-store' });
      if (res.status === 401) { dropSession(); showLogin(`Logged out: ${errorMessage(await readJson(res), res)}`); return; }
      if (res.ok && res.body) {
        if (connected) onChange(); // changes may have happened while it was down
        connected = true;
        await readSse(res.body, (ev) => { if (ev.type === 'change') onChange(); });
      }
    } catch (e) {
      if (signal.aborted) return;
    }
    await sleep(2000, signal);
  }
}

// A small text/event-stream parser: fields per line, an empty line ends an event.
async function readSse(body, onEvent) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  let type = '';
  let data = [];
  const line = (l) => {
    if (l === '') {
      if (type || data.length) onEvent({ type: type || 'message', data: data.join('\n') });
      type = ''; data = [];
      return;
    }
    if (l[0] === ':') return; // a comment (keep-alive)
    const c = l.indexOf(':');
    const field = c < 0 ? l : l.slice(0, c);
    let value = c < 0 ? '' : l.slice(c + 1);
    if (value[0] === ' ') value = value.slice(1);
    if (field === 'event') type = value;
    else if (field === 'data') data.push(value);
  };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += decoder.decode(value, { stream: true });
    let m;
    // A lone \r at the end may be the first half of \r\n: wait for the next chunk.
    while ((m = /\r\n|\n|\r(?!$)/.exec(buf))) {
      line(buf.slice(0, m.index));
      buf = buf.slice(m.index + m[0].length);
    }
  }
}

// The first step the saga cannot unwind past, when it is not the declared pivot (a
// retriable step that changes something), and whether the saga has passed it.
function pointOfNoReturn(p, pivot) {
  if (!isObj(p) || (p.pivot === true && str(p.step) === str(pivot))) return null;
  return [h('dt', {}, 'Point of no return'),
    h('dd', { 'data-testid': 'point-of-no-return' }, h('span', { class: 'mono' }, str(p.step)),
      ` (${str(p.skill)}): ${str(p.why)}`, p.passed === true ? '; passed' : '')];
}

function sagaSections(d) {
  const st = obj(d.status);
  const steps = arr(d.steps).filter(isObj);
  const head = h('section', { class: 'card wide saga-head' },
    h('h2', {}, 'Saga ', h('span', { class: 'mono', 'data-testid': 'saga-id' }, str(d.sagaId)), ' ', h('span', { 'data-testid': 'saga-state' }, stateBadge(d.state))),
    d.why ? h('p', { class: 'why', 'data-testid': 'why' }, str(d.why)) : null,
    h('dl', { class: 'kv' },
      h('dt', {}, 'Task'), h('dd', { class: 'mono' }, str(d.taskId) || '—'),
      h('dt', {}, 'Status'), h('dd', {}, str(st.state) || '—', st.message ? ` — ${str(st.message)}` : '', num(st.atMs) != null ? ` (${fmtTime(st.atMs)})` : ''),
      h('dt', {}, 'Pivot'), h('dd', { class: 'mono' }, str(d.pivot) || 'none'),
      pointOfNoReturn(d.pointOfNoReturn, d.pivot),
      h('dt', {}, 'Trace'), h('dd', {}, h('code', { 'data-testid': 'trace-id' }, str(d.traceId) || '—'))));

  const a = obj(d.audit);
  const m = isObj(a.mandate) ? a.mandate : null;
  const rejected = arr(a.rejectedAlternatives);
  const known = ['goal', 'planner', 'modelId', 'promptHash', 'signerKeyId', 'mandate', 'rejectedAlternatives', 'supersedes'];
  // The saga this plan replaces after it unwound, or after its plan was refused (then
  // this executor keeps no saga of that id); the reason says which, in the executor's
  // words, which may quote a tool: a text node.
  const sup = isObj(a.supersedes) ? a.supersedes : null;
  const supersedes = sup
    ? [h('a', { href: `#/saga/${encodeURIComponent(str(sup.sagaId))}`, class: 'mono' }, str(sup.sagaId)),
      ` (task ${str(sup.executorTaskId)})${sup.failedStep ? ` at ${str(sup.failedStep)}` : ''}: `, h('span', { class: 'muted reason' }, str(sup.reason))]
    : 'none (a first plan)';
  const extra = Object.keys(a).filter((k) => !known.includes(k) && a[k] != null);
  const audit = h('section', { class: 'card wide' }, h('h2', {}, 'Audit record'),
    h('dl', { class: 'kv', 'data-testid': 'audit' },
      h('dt', {}, 'Goal'), h('dd', { class: 'goal-full' }, str(a.goal) || '—'),
      h('dt', {}, 'Planner'), h('dd', {}, str(a.planner) || '—'),
      h('dt', {}, 'Model'), h('dd', { class: 'mono' }, str(a.modelId) || '—'),
      h('dt', {}, 'Prompt hash'), h('dd', { class: 'mono' }, str(a.promptHash) || '—'),
      h('dt', {}, 'Signer key'), h('dd', { class: 'mono' }, str(a.signerKeyId) || '—'),
      h('dt', {}, 'Mandate'), h('dd', {}, m ? mandateText(m) : 'none'),
      h('dt', {}, 'Supersedes'), h('dd', { 'data-testid': 'supersedes' }, supersedes),
      h('dt', {}, 'Superseded by'), h('dd', {}, h('a', { href: `#/sagas?supersedes=${encodeURIComponent(str(d.sagaId))}`, 'data-testid': 'superseded-by' }, 'the sagas planned to replace this one, if any')),
      h('dt', {}, 'Rejected alternatives'), h('dd', {}, rejected.length ? h('pre', { class: 'json small' }, JSON.stringify(rejected, null, 2)) : 'none'),
      extra.map((k) => [h('dt', {}, k), h('dd', { class: 'mono' }, str(a[k]))])));

  const timelineBox = h('div', { class: 'timeline-box' });
  const timeline = h('section', { class: 'card wide' },
    h('h2', {}, 'Timeline'),
    h('p', { class: 'muted' }, `From the ${str(d.timelineFrom) || 'journal'}. Blue: forward calls, orange: compensations, green: questions whether a call took effect; hatched: failed attempts. Each call has its own row: calls of parallel branches overlap. Hover a bar for its idempotency key and times.`),
    timelineBox);
  // Drawn once attached, to know the width it has.
  requestAnimationFrame(() => timelineBox.replaceChildren(...timelineParts(d, timelineBox.clientWidth)));
  timelineBox.append(...timelineParts(d, 1180));

  // What each step did, from the ledger: why it failed, what its compensation was sent
  // and answered (text nodes only: a tool's words are never markup).
  const ledgerSteps = arr(obj(d.ledger).steps).filter(isObj);
  const recordOf = (id) => ledgerSteps.find((r) => r.step === id) || {};
  const outcomeOf = (r) => {
    const f = obj(r.forward);
    return [str(f.state) || '—', f.reason ? h('div', { class: 'muted reason' }, str(f.reason)) : null];
  };
  const undoOf = (r) => {
    const u = obj(r.undo);
    const sent = r.undoRequest === undefined ? null
      : h('div', { class: 'mono small' }, `${str(r.undoSkill)} ${JSON.stringify(r.undoRequest)}` +
        (r.undoResponse === undefined ? '' : ` → ${JSON.stringify(r.undoResponse)}`));
    return [str(u.state) || '—', u.reason ? h('div', { class: 'muted reason' }, str(u.reason)) : null, sent];
  };
  // The steps a step waits for, when the plan names them (parallel branches); else it
  // waits for the step before it, and nothing is shown.
  const afterOf = (x) => (Array.isArray(x.after)
    ? h('div', { class: 'muted', 'data-testid': 'step-after' }, x.after.length ? `after ${x.after.map(str).join(', ')}` : 'after nothing: starts at once')
    : null);
  const stepTable = h('section', { class: 'card wide' }, h('h2', {}, 'Steps'),
    h('table', { 'data-testid': 'steps' },
      h('thead', {}, h('tr', {}, ['Step', 'Agent', 'Skill', 'Class', 'Idempotency key', 'Outcome', 'Compensation'].map((t) => h('th', {}, t)))),
      h('tbody', {}, steps.length ? steps.map((x) => h('tr', { 'data-step': str(x.step), class: x.step === d.pivot ? 'pivot-row' : null },
        h('td', { class: 'mono' }, str(x.step), x.step === d.pivot ? h('span', { class: 'badge pivot' }, 'pivot') : null, afterOf(x)),
        h('td', {}, str(x.agent)), h('td', {}, str(x.skill)), h('td', {}, str(x.class)), h('td', { class: 'mono' }, str(x.idempotencyKey)),
        h('td', { 'data-testid': 'step-outcome' }, outcomeOf(recordOf(x.step))),
        h('td', { 'data-testid': 'step-compensation' }, undoOf(recordOf(x.step)))))
        : h('tr', {}, h('td', { colspan: 7, class: 'muted' }, 'The plan shows no step.')))));

  const ledger = h('section', { class: 'card wide' }, h('h2', {}, 'Ledger'),
    h('pre', { class: 'json', 'data-testid': 'ledger' }, JSON.stringify(d.ledger === undefined ? null : d.ledger, null, 2)));
  return { sections: [head, audit, timeline, stepTable, ledger], timelineBox };
}

// mandateId for principal, then whatever else the mandate says (budgetMinor + currency
// as money; other members as they come).
function mandateText(m) {
  const rest = Object.keys(m).filter((k) => !['mandateId', 'principal', 'budgetMinor', 'currency'].includes(k) && m[k] != null);
  return [h('span', { class: 'mono' }, str(m.mandateId) || '—'), m.principal != null ? ` for ${str(m.principal)}` : '',
    num(m.budgetMinor) != null ? `, budget ${fmtMoney(m.budgetMinor, m.currency)}` : '',
    rest.map((k) => [', ', h('span', { class: 'muted' }, `${k}: `), str(m[k])])];
}

function fmtMoney(minor, currency) {
  if (num(minor) == null) return '—';
  try {
    const f = new Intl.NumberFormat(undefined, { style: 'currency', currency: str(currency) });
    return f.format(minor / 10 ** f.resolvedOptions().maximumFractionDigits);
  } catch {
    return `${minor} (minor units) ${str(currency)}`;
  }
}

// ---- the timeline SVG ------------------------------------------------------------

const COLORS = {
  forward: { fill: '#3b6fb6', dark: '#1d3d6e', light: '#a9c2e6' },
  compensation: { fill: '#d9822b', dark: '#7f4510', light: '#f1c79a' },
  verification: { fill: '#3f8f5a', dark: '#1f4d2f', light: '#a8d5b6' },
  other: { fill: '#7a7a7a', dark: '#3d3d3d', light: '#c8c8c8' },
};

// A step of 1, 2 or 5 × 10^k ms giving about `n` ticks over `span`.
function tickStep(span, n = 8) {
  const raw = span / n;
  const p = 10 ** Math.floor(Math.log10(raw));
  return [1, 2, 5, 10].map((k) => k * p).find((x) => x >= raw) || p * 10;
}

function fmtTick(v, step) {
  if (step < 1000) return `+${Number(v.toFixed(3))} ms`;
  if (step < 60000) return `+${Number((v / 1000).toFixed(3))} s`;
  return `+${fmtDhms(v)}`;
}

// Returns the SVG and, below it, the undo deadlines that fall outside its time axis.
function timelineParts(d, width) {
  const now = Date.now();
  const items = arr(d.timeline).filter(isObj);
  const waits = arr(d.waits).filter(isObj);
  const deadlines = arr(d.undoDeadlines).filter(isObj);
  const pivot = d.pivot == null ? null : str(d.pivot);
  const ended = END_STATES.has(d.state);
  // A start of 0 means "not known" (nothing happened before it), not 1970.
  const startOf = (x) => (num(x.startMs) > 0 ? x.startMs : null);
  const starts = items.concat(waits).map(startOf).filter((v) => v != null);
  const ends = items.concat(waits).map((x) => num(x.endMs)).filter((v) => v != null);
  // Open items run until now; in an ended saga (nothing runs) until its last known time.
  const openEnd = ended ? Math.max(...ends, ...starts, num(obj(d.status).atMs) ?? -Infinity) : now;
  const endOf = (x) => num(x.endMs) ?? openEnd;
  const t0 = starts.length ? Math.min(...starts) : now;
  let t1 = Math.max(t0, ...items.concat(waits).map(endOf));
  if (t1 <= t0) t1 = t0 + 1;

  const W = Math.max(720, Math.floor(width) || 1180);
  const markW = 46; const labelW = 330; const padR = 44;
  const x0 = markW + labelW; const plotW = W - x0 - padR;
  const axisH = 26; const rowH = 22; const barH = 14; const top = axisH + 6;
  const rows = items.length + waits.length;
  const H = top + Math.max(rows, 1) * rowH + 26;
  const x = (t) => x0 + ((t - t0) / (t1 - t0)) * plotW;

  const root = s('svg', { 'data-testid': 'timeline', class: 'timeline', width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': 'saga timeline' });
  const defs = s('defs');
  for (const [kind, c] of Object.entries(COLORS)) {
    defs.append(s('pattern', { id: `tl-hatch-${kind}`, patternUnits: 'userSpaceOnUse', width: 6, height: 6, patternTransform: 'rotate(45)' },
      s('rect', { width: 6, height: 6, fill: c.dark }), s('line', { x1: 1, y1: 0, x2: 1, y2: 6, stroke: c.light, 'stroke-width': 2 })));
  }
  root.append(defs);

  // Axis, ticks and grid.
  const step = tickStep(t1 - t0);
  const axis = s('g', { class: 'axis' });
  axis.append(s('line', { x1: x0, y1: axisH, x2: x0 + plotW, y2: axisH, stroke: '#555' }));
  for (let v = 0; v <= t1 - t0 + step / 1000; v += step) {
    const xv = x(t0 + v);
    axis.append(s('line', { x1: xv, y1: axisH - 4, x2: xv, y2: H - 22, stroke: '#e2e4e8' }),
      s('text', { x: xv, y: axisH - 8, 'text-anchor': 'middle', class: 'tick' }, fmtTick(v, step)));
  }
  axis.append(s('text', { x: markW, y: axisH - 8, class: 'tick' }, `t0 = ${fmtTime(t0, true)}`));
  root.append(axis);

  const rowBg = (i, cls) => s('rect', { x: 0, y: top + i * rowH, width: W, height: rowH, class: `row-bg ${cls}` });
  items.forEach((it, i) => {
    const kind = str(it.kind) || 'forward';
    const c = COLORS[kind] || COLORS.other;
    const outcome = str(it.outcome) || (it.endMs == null ? 'running' : 'unknown');
    const open = num(it.endMs) == null;
    const failed = !open && outcome !== 'succeeded';
    const isPivot = pivot != null && str(it.step) === pivot;
    const y = top + i * rowH;
    const start = startOf(it) ?? t0;
    const xs = x(start); const xe = x(endOf(it));
    const label = `${str(it.step)} · ${kind} · #${str(it.attempt)} · ${outcome}`;
    const tip = [label, `agent: ${str(it.agent)}, skill: ${str(it.skill)}`, `idempotency key: ${str(it.idempotencyKey)}`,
      `start: ${fmtTime(start, true)} (+${Math.round(start - t0)} ms)`,
      open ? 'end: still open' : `end: ${fmtTime(it.endMs, true)} (took ${fmtDuration(it.endMs - start)})`].join('\n');
    root.append(rowBg(i, `${i % 2 ? 'odd' : 'even'}${isPivot ? ' pivot' : ''}`));
    if (isPivot) root.append(s('text', { x: 4, y: y + rowH / 2 + 4, class: 'pivot-mark' }, 'pivot'));
    root.append(s('text', { x: markW, y: y + rowH / 2 + 4, class: `label kind-${kind}` }, short(label, 52), s('title', {}, tip)));
    root.append(s('rect', {
      x: xs, y: y + (rowH - barH) / 2, width: Math.max(2, xe - xs), height: barH, rx: 2,
      fill: failed ? `url(#tl-hatch-${COLORS[kind] ? kind : 'other'})` : c.fill,
      stroke: isPivot ? '#111' : failed ? c.dark : 'none', 'stroke-width': isPivot ? 1.5 : 1,
      'stroke-dasharray': open ? '3 2' : null, 'fill-opacity': open ? 0.6 : null,
      class: `bar ${kind}${failed ? ' failed' : ''}${open ? ' open' : ''}`,
      'data-kind': kind, 'data-step': str(it.step), 'data-attempt': str(it.attempt), 'data-outcome': outcome,
      'data-key': str(it.idempotencyKey), 'data-start-ms': start, 'data-end-ms': num(it.endMs),
      'data-pivot': isPivot ? 'true' : null,
    }, s('title', {}, tip)));
    if (xe + 60 < W) root.append(s('text', { x: Math.max(xe, xs + 2) + 4, y: y + rowH / 2 + 4, class: 'dur' }, open ? 'open' : fmtDuration(it.endMs - start)));
  });

  waits.forEach((w, j) => {
    const i = items.length + j;
    const y = top + i * rowH;
    const start = startOf(w) ?? t0;
    const xs = x(start); const xe = x(endOf(w));
    const tip = `waiting: ${str(w.why)}\nfrom ${fmtTime(start, true)}\n${num(w.endMs) == null ? 'still waiting' : `until ${fmtTime(w.endMs, true)} (${fmtDuration(w.endMs - start)})`}`;
    root.append(rowBg(i, 'wait'));
    root.append(s('text', { x: markW, y: y + rowH / 2 + 4, class: 'label wait-label' }, short(`waiting · ${str(w.why)}`, 52), s('title', {}, tip)));
    root.append(s('rect', { x: xs, y: y + rowH / 2 - 3, width: Math.max(2, xe - xs), height: 6, rx: 3, fill: '#9aa0a6', class: 'wait', 'data-wait': String(j), 'data-why': str(w.why) }, s('title', {}, tip)));
  });
  if (!rows) {
    const none = d.timelineFrom === 'ledger' ? 'No journal is left for this saga: the ledger below says what was done.' : 'Nothing has run yet.';
    root.append(s('text', { x: markW, y: top + rowH / 2 + 4, class: 'label muted' }, none));
  }

  const outside = [];
  for (const dl of deadlines) {
    const at = num(dl.deadlineMs);
    if (at == null) continue;
    if (at < t0 || at > t1) { outside.push(dl); continue; }
    const xv = x(at);
    const tip = `undo deadline of ${str(dl.step)} (${str(dl.agent)}): ${fmtTime(at, true)}`;
    root.append(s('line', { x1: xv, y1: axisH, x2: xv, y2: H - 20, stroke: '#b00020', 'stroke-width': 1.5, 'stroke-dasharray': '5 3', 'data-deadline-step': str(dl.step), class: 'deadline' }, s('title', {}, tip)),
      s('text', { x: xv, y: H - 8, 'text-anchor': 'middle', class: 'deadline-label' }, `undo ${short(str(dl.step), 20)}`, s('title', {}, tip)));
  }
  const parts = [h('div', { class: 'svg-scroll' }, root)];
  if (outside.length) {
    parts.push(h('div', { class: 'outside' }, h('h3', {}, 'Undo deadlines beyond this timeline'),
      h('ul', { 'data-testid': 'undo-deadlines-outside' }, outside.map((dl) => h('li', { 'data-deadline-step': str(dl.step) },
        h('span', { class: 'mono' }, str(dl.step)), ` (${str(dl.agent)}): ${fmtTime(dl.deadlineMs)} — `, timeLeft(dl.deadlineMs))))));
  }
  return parts;
}

// ---- waiting for a person --------------------------------------------------------

function viewWaiting(view, root) {
  const role = obj(session()).role;
  const approver = role === 'approver';
  const resultBox = h('div', { class: 'answer-box', 'aria-live': 'polite' });
  const list = h('div', { class: 'waiting-list' }, h('p', { class: 'muted' }, 'Loading…'));
  root.replaceChildren(h('section', { class: 'card wide' }, h('h2', {}, 'Waiting for a person'),
    h('p', { class: 'muted' }, approver ? 'Each answer is recorded under your name.' : 'You can see what waits; only an approver answers.'),
    resultBox, list));

  const answer = async (x, choice, row) => {
    const resolution = str(choice.resolution);
    const body = { resolution };
    const ap = isObj(x.approval) ? x.approval : null;
    if (resolution === 'approve' && ap) {
      // Exactly the four members the executor reads: it refuses unknown ones.
      body.approval = { sagaId: ap.sagaId, stepId: ap.stepId, argsSha256: ap.argsSha256, expiresAt: new Date(Date.now() + 10 * 60 * 1000).toISOString() };
    }
    for (const b of row.querySelectorAll('button')) b.disabled = true;
    view.paused = true; // no refresh replaces the row while the answer is on its way
    try {
      const r = obj(await api(`api/sagas/${encodeURIComponent(str(x.sagaId) || str(x.taskId))}/answer`, { method: 'POST', body, signal: view.controller.signal }));
      resultBox.replaceChildren(h('p', { class: 'ok' },
        h('span', { 'data-testid': 'answer-result', 'data-saga-id': str(x.sagaId) }, `answered: ${str(r.state) || 'accepted'}`),
        h('span', { class: 'muted' }, ` (saga ${str(x.sagaId)}, ${resolution})`)));
    } catch (e) {
      report(e);
      for (const b of row.querySelectorAll('button')) b.disabled = false;
    } finally {
      view.paused = false;
      if (!view.controller.signal.aborted) refresh();
    }
  };

  const draw = (d) => {
    const sagas = arr(obj(d).sagas).filter(isObj);
    list.replaceChildren(...(sagas.length ? sagas.map((x) => waitingRow(x, approver, answer)) : [h('p', { class: 'empty' }, 'No saga waits for a person.')]));
  };
  const refresh = poll(view, 'api/waiting', 5000, draw);
}

let choiceIds = 0;

function waitingRow(x, approver, answer) {
  const ap = isObj(x.approval) ? x.approval : null;
  const row = h('article', { class: 'waiting', 'data-testid': 'waiting-row', 'data-saga-id': str(x.sagaId), 'data-on': str(x.on) });
  const choices = arr(x.choices).filter(isObj).map((c) => {
    const id = `choice-${++choiceIds}`;
    return h('div', { class: 'choice' },
      h('button', { type: 'button', 'data-resolution': str(c.resolution), 'aria-describedby': id, title: str(c.does), disabled: !approver, onclick: () => answer(x, c, row) }, str(c.resolution)),
      h('span', { class: 'does', id }, str(c.does)));
  });
  append(row, [
    h('header', {}, sagaLink(x.sagaId, x.taskId), ' ', h('span', { class: `badge on-${str(x.on)}` }, str(x.on) || 'waiting'),
      num(x.sinceMs) != null ? h('span', { class: 'muted' }, ' since ', fmtTime(x.sinceMs), ' (', h('span', { class: 'ago', 'data-since-ms': x.sinceMs }, `${fmtDhms(Date.now() - x.sinceMs)} ago`), ')') : null),
    h('p', { class: 'goal-full' }, str(x.goal)),
    h('dl', { class: 'kv' },
      h('dt', {}, 'Step'), h('dd', {}, h('span', { class: 'mono' }, str(x.step) || '—'), x.agent != null ? ` on ${str(x.agent)}` : '', x.skill != null ? ` (${str(x.skill)})` : ''),
      // The question in words for people; the status text (the protocol's wording) only
      // for a pause from before questions were asked.
      x.question != null
        ? [h('dt', {}, 'Question'), h('dd', { class: 'question', 'data-testid': 'question' }, str(x.question))]
        : [h('dt', {}, 'Reason'), h('dd', { class: 'reason' }, str(x.reason) || '—')],
      ap ? [h('dt', {}, 'Approves'), h('dd', { class: 'mono' }, `step ${str(ap.stepId)}, arguments sha256 ${str(ap.argsSha256)}`)] : null,
      x.args != null ? [h('dt', {}, 'Arguments'), h('dd', {}, h('pre', { class: 'json small' }, JSON.stringify(x.args, null, 2)))] : null),
    h('div', { class: 'choices' }, choices.length ? choices : h('p', { class: 'muted' }, 'No answer is offered.')),
    approver ? null : h('p', { class: 'note' }, 'only an approver answers'),
  ]);
  return row;
}

// ---- start -----------------------------------------------------------------------

function start() {
  $('#login-form').addEventListener('submit', login);
  $('#logout').addEventListener('click', logout);
  $('#error').addEventListener('click', clearError);
  window.addEventListener('hashchange', () => { if (session()) route(); });
  setInterval(tickTimes, 1000);
  if (session()) showApp(); else showLogin();
}

start();
