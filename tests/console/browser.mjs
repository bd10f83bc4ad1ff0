// Drives the executor's operator console (/console/) in a headless Chromium:
//  a) the API refuses no token, a planner's token and no session;
//  b) an operator logs in through the form; the overview's compensation rate and open
//     undo handles equal what /metrics says;
//  c) the sagas list finds COMPENSATED_SAGA; its timeline shows the compensations in the
//     reverse order of their forwards; PARALLEL_SAGA (a saga of the parallel plan) shows
//     its two branches' bars overlapping in time and, in its step table, the steps each
//     step waits for ("after …");
//     COMPENSATED_SAGA, whose point of no return is its declared pivot, shows no line
//     of its own for it, and no undo deadline (its undos ran); NO_PIVOT_SAGA (a plan
//     with no irreversible step, completed) shows its point of no return, a retriable
//     step, and that it was passed;
//  d) after logging out, an approver logs in and answers ESCALATED_SAGA, which then
//     leaves waitingForAPerson;
//  e) every screenshot shows something (not a blank page).
// Prints one `ok - …` / `not ok - …` line per check; exits 1 at the first failure.
//
//   CONSOLE_URL=http://127.0.0.1:PORT/console/ METRICS_URL=http://127.0.0.1:PORT/metrics \
//   OPERATOR_TOKEN=… APPROVER_TOKEN=… PLANNER_TOKEN=… COMPENSATED_SAGA=… ESCALATED_SAGA=… \
//   PARALLEL_SAGA=… NO_PIVOT_SAGA=… node tests/console/browser.mjs

import { mkdir, writeFile, copyFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { chromium } from 'playwright-core';

const here = path.dirname(fileURLToPath(import.meta.url));
const env = process.env;

function required(name) {
  const v = env[name];
  if (!v) {
    console.log(`not ok - environment: ${name} is not set`);
    process.exit(1);
  }
  return v;
}

const CONSOLE_URL = (() => { const u = required('CONSOLE_URL'); return u.endsWith('/') ? u : `${u}/`; })();
const METRICS_URL = required('METRICS_URL');
const OPERATOR_TOKEN = required('OPERATOR_TOKEN');
const APPROVER_TOKEN = required('APPROVER_TOKEN');
const PLANNER_TOKEN = required('PLANNER_TOKEN');
const COMPENSATED_SAGA = required('COMPENSATED_SAGA');
const ESCALATED_SAGA = required('ESCALATED_SAGA');
const PARALLEL_SAGA = required('PARALLEL_SAGA');
const NO_PIVOT_SAGA = required('NO_PIVOT_SAGA');
const ESCALATED_RESOLUTION = env.ESCALATED_RESOLUTION || 'resolved-manually';
const SCREENSHOT_DIR = path.resolve(env.SCREENSHOT_DIR || path.join(here, 'screenshots'));
const CHROMIUM = env.CHROMIUM || '/usr/bin/chromium';
const SESSION_KEY = 'sagaplane-console-session';
const TIMEOUT = 30_000;

const apiUrl = (p) => new URL(`api/${p}`, CONSOLE_URL).toString();
// A CSS attribute value in double quotes.
const cssValue = (s) => `"${String(s).replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\a ')}"`;

let passed = 0;
let browser = null;
let page = null;
const pageProblems = []; // CSP violations and uncaught errors seen in the page

async function fail(name, detail) {
  console.log(`not ok - ${name}${detail ? `: ${detail}` : ''}`);
  for (const p of pageProblems) console.log(`# page: ${p}`);
  if (page) {
    try {
      await mkdir(SCREENSHOT_DIR, { recursive: true });
      await page.screenshot({ path: path.join(SCREENSHOT_DIR, 'failure.png'), fullPage: true });
      console.log(`# screenshot: ${path.join(SCREENSHOT_DIR, 'failure.png')}`);
    } catch (e) {
      console.log(`# no failure screenshot: ${e.message}`);
    }
  }
  if (browser) await browser.close().catch(() => {});
  process.exit(1);
}

// One check: `fn` returns nothing or a note to print, or throws (a failure).
async function check(name, fn) {
  let note;
  try {
    note = await fn();
  } catch (e) {
    const cause = e && e.cause ? ` (${e.cause.code || e.cause.message || e.cause})` : '';
    await fail(name, `${e && e.message ? e.message.split('\n')[0] : String(e)}${cause}`);
  }
  passed += 1;
  console.log(`ok - ${name}${note ? ` (${note})` : ''}`);
}

function assert(cond, message) {
  if (!cond) throw new Error(message);
}

// Polls `fn` until it returns a truthy value, or throws the last reason after `timeoutMs`.
async function eventually(fn, timeoutMs, what) {
  const until = Date.now() + timeoutMs;
  let last = 'nothing yet';
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (e) {
      last = e.message;
    }
    if (Date.now() > until) throw new Error(`${what} within ${timeoutMs / 1000} s: ${last}`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

async function jsonOf(res) {
  try { return JSON.parse(await res.text()); } catch { return null; }
}

async function refused(name, init) {
  await check(name, async () => {
    const res = await fetch(init.url, { method: init.method, headers: init.headers || {} });
    const body = await jsonOf(res);
    assert(res.status === 401, `status ${res.status}, expected 401`);
    const e = body && body.error;
    assert(e && e.code === 401 && typeof e.message === 'string' && e.message,
      `body is not {"error": {"code": 401, "message": …}}: ${JSON.stringify(body)}`);
    return e.message;
  });
}

// ---- /metrics ----

// Sums of each sample name in OpenMetrics text, with the samples' labels.
function parseMetrics(text) {
  const samples = [];
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels = {};
    for (const l of (m[3] || '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2];
    samples.push({ name: m[1], labels, value: Number(m[4]) });
  }
  return samples;
}

const sum = (samples, name, where = () => true) => samples
  .filter((x) => x.name === name && where(x.labels)).reduce((t, x) => t + x.value, 0);

// The names metrics.rs registers under the prefix `sagaplane` (counters get `_total`).
const COMPENSATIONS = 'sagaplane_compensations_total';
const UNDO_OPEN = 'sagaplane_undo_handles_open';

async function metricsNow() {
  const res = await fetch(METRICS_URL);
  assert(res.ok, `GET ${METRICS_URL}: ${res.status}`);
  const text = await res.text();
  // A family with no sample yet still has its TYPE line: a renamed metric fails here
  // rather than reading as 0.
  for (const family of ['sagaplane_compensations counter', 'sagaplane_undo_handles_open gauge']) {
    assert(text.includes(`# TYPE ${family}`), `/metrics has no "# TYPE ${family}"`);
  }
  const samples = parseMetrics(text);
  // As the PromQL in docs/running-the-executor.md: compensations that succeeded, of those that ended (a
  // failed attempt is retried; dead_lettered and unavailable went to a person).
  const total = sum(samples, COMPENSATIONS, (l) => l.outcome !== 'failed');
  const succeeded = sum(samples, COMPENSATIONS, (l) => l.outcome === 'succeeded');
  const failed = sum(samples, COMPENSATIONS, (l) => l.outcome === 'failed');
  const pct = (a, b) => (b > 0 ? `${((a / b) * 100).toFixed(1)}%` : '—');
  return {
    rate: pct(succeeded, total),
    // Only for the diagnosis: the rate over attempts (failed attempts counted).
    attemptsRate: pct(succeeded, succeeded + failed),
    succeeded, total,
    undoOpen: String(sum(samples, UNDO_OPEN)),
  };
}

// ---- the page ----

async function shot(name) {
  await mkdir(SCREENSHOT_DIR, { recursive: true });
  const file = path.join(SCREENSHOT_DIR, name);
  const buf = await page.screenshot({ fullPage: true });
  await writeFile(file, buf);
  await check(`${name} is not blank`, async () => {
    assert(buf.length > 10 * 1024, `the screenshot is ${buf.length} bytes (at most 10 KB)`);
    const chars = await page.evaluate(() => document.body.innerText.trim().length);
    assert(chars > 50, `the page shows ${chars} characters of text`);
    return `${Math.round(buf.length / 1024)} KB, ${chars} characters`;
  });
  return file;
}

async function loginWith(token, role) {
  await page.locator('#login-token').waitFor({ state: 'visible', timeout: TIMEOUT });
  await page.fill('#login-token', token);
  await page.click('#login-submit');
  await page.waitForFunction(
    (want) => (document.querySelector('#whoami')?.textContent || '').includes(want)
      || !document.querySelector('#login-error')?.hidden,
    role, { timeout: TIMEOUT },
  );
  const err = await page.evaluate(() => { const e = document.querySelector('#login-error'); return e && !e.hidden ? e.textContent : null; });
  assert(!err, `the login form says: ${err}`);
  const who = (await page.textContent('#whoami')).trim();
  assert(who.includes(role), `#whoami shows "${who}"`);
  return who;
}

async function sessionToken() {
  const saved = await page.evaluate((k) => sessionStorage.getItem(k), SESSION_KEY);
  assert(saved, 'no session in sessionStorage');
  return JSON.parse(saved).session;
}

async function main() {
  // a) refusals, straight to the API.
  await refused('POST api/session without Authorization is refused (401)', { url: apiUrl('session'), method: 'POST' });
  await refused("POST api/session with a planner's token is refused (401)",
    { url: apiUrl('session'), method: 'POST', headers: { Authorization: `Bearer ${PLANNER_TOKEN}` } });
  await refused('GET api/overview without a session is refused (401)', { url: apiUrl('overview'), method: 'GET' });

  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  page = await context.newPage();
  page.on('pageerror', (e) => pageProblems.push(`uncaught: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error' && /Content Security Policy|Refused to/i.test(m.text())) pageProblems.push(`CSP: ${m.text()}`);
  });

  // b) the operator, and the overview against /metrics.
  await page.goto(CONSOLE_URL);
  await check('the console shows the login form without a session', async () => {
    await page.locator('#login-token').waitFor({ state: 'visible', timeout: TIMEOUT });
    assert(await page.getAttribute('#login-token', 'type') === 'password', '#login-token is not a password field');
  });
  await check('an operator logs in through the form', () => loginWith(OPERATOR_TOKEN, 'operator'));
  await check('the overview shows the compensation rate and the open undo handles', async () => {
    await page.click('a[href="#/"]');
    await page.locator('[data-testid=compensation-rate]').waitFor({ timeout: TIMEOUT });
    await page.locator('[data-testid=undo-open]').waitFor({ timeout: TIMEOUT });
    // Each state the executor counts has its number (a failed task is counted among the
    // compensated: the store keeps one state for both).
    const states = [];
    for (const k of ['running', 'waitingForASlot', 'waitingForAPerson', 'completed', 'compensated', 'canceled', 'rejected']) {
      const t = (await page.textContent(`[data-testid=state-${k}]`, { timeout: TIMEOUT })).trim();
      assert(/^\d+$/.test(t), `[data-testid=state-${k}] shows "${t}"`);
      states.push(`${k} ${t}`);
    }
    await page.locator('[data-testid=compensation-by-agent]').waitFor({ timeout: TIMEOUT });
    return states.join(', ');
  });
  await check('the compensation rate and open undo handles equal /metrics', async () => {
    // /metrics counts since the executor's start: the overview over the same span.
    await page.selectOption('#window', '0');
    await page.locator('#window option[value="0"][selected]').waitFor({ state: 'attached', timeout: TIMEOUT });
    // The overview refreshes every 5 s and the metrics move while sagas run: poll until
    // one reading of both agrees.
    let seen = {};
    try {
      return await eventually(async () => {
        const m = await metricsNow();
        const rate = (await page.textContent('[data-testid=compensation-rate]')).trim();
        const open = (await page.textContent('[data-testid=undo-open]')).trim();
        // The list shows each open handle (up to 20), the soonest first.
        const rows = await page.locator('[data-testid=undo-soonest] tr[data-saga-id]').count();
        seen = { m, rate, open, rows };
        return rate === m.rate && open === m.undoOpen && String(rows) === m.undoOpen
          && `rate ${rate} = ${m.succeeded}/${m.total}, ${open} undo handles open, ${rows} listed`;
      }, 20_000, 'no agreement');
    } catch (e) {
      const { m = {}, rate, open, rows } = seen;
      let why = `page rate ${rate}, /metrics ${m.rate} (${m.succeeded} succeeded of ${m.total}); page undo-open ${open} (${rows} listed), /metrics ${m.undoOpen}`;
      if (rate !== m.rate && rate === m.attemptsRate) {
        why += `; the page's rate is succeeded/(succeeded+failed) = ${m.attemptsRate}, while the rate in docs/running-the-executor.md leaves failed attempts out`;
      }
      throw new Error(why);
    }
  });
  await shot('overview.png');

  // c) the sagas list, and the compensated saga's timeline.
  const row = `tr[data-saga-id=${cssValue(COMPENSATED_SAGA)}]`;
  await check('the sagas list finds COMPENSATED_SAGA', async () => {
    await page.click('a[href="#/sagas"]');
    await page.locator('#filter-q').waitFor({ timeout: TIMEOUT });
    await page.fill('#filter-q', COMPENSATED_SAGA);
    // The unfiltered first page may hold the row too: wait for the searched one.
    const searched = page.waitForResponse((r) => r.url().includes('api/sagas?') && new URL(r.url()).searchParams.get('q') === COMPENSATED_SAGA, { timeout: TIMEOUT });
    await page.click('#filter-apply');
    const res = await searched;
    assert(res.status() === 200, `GET api/sagas?q=…: ${res.status()}`);
    await page.locator(row).waitFor({ timeout: TIMEOUT });
    assert(await page.getAttribute(row, 'data-testid') === 'saga-row', 'the row has no data-testid=saga-row');
  });
  await shot('sagas.png');
  await check('the compensated saga shows its compensations in the reverse order of their forwards', async () => {
    await page.locator(`${row} a`).first().click();
    await page.locator('svg[data-testid=timeline]').waitFor({ timeout: TIMEOUT });
    const rects = await page.$$eval('svg[data-testid=timeline] rect[data-kind]', (els) => els.map((e) => ({
      kind: e.getAttribute('data-kind'), step: e.getAttribute('data-step'), attempt: e.getAttribute('data-attempt'),
      outcome: e.getAttribute('data-outcome'), key: e.getAttribute('data-key'),
    })));
    const comps = rects.map((r, i) => ({ ...r, i })).filter((r) => r.kind === 'compensation');
    const undone = [...new Set(comps.filter((r) => r.outcome === 'succeeded').map((r) => r.step))];
    const succeededComps = comps.filter((r) => r.outcome === 'succeeded').length;
    assert(undone.length === 3, `${undone.length} steps have a succeeded compensation (${undone.join(', ')}), expected 3`);
    assert(rects.every((r) => r.key !== null && r.step), 'a rect lacks data-key or data-step');
    const firstComp = comps[0].i;
    // The order the undone steps first succeeded forward in, all before the first compensation.
    const forwards = [];
    rects.forEach((r, i) => {
      if (r.kind === 'forward' && r.outcome === 'succeeded' && undone.includes(r.step) && !forwards.includes(r.step)) {
        assert(i < firstComp, `the forward of ${r.step} comes after a compensation`);
        forwards.push(r.step);
      }
    });
    assert(forwards.length === 3, `forwards succeeded for ${forwards.join(', ')} only`);
    const compOrder = [...new Set(comps.map((r) => r.step))];
    const want = [...forwards].reverse();
    assert(JSON.stringify(compOrder) === JSON.stringify(want),
      `compensations ran ${compOrder.join(', ')}; forwards ran ${forwards.join(', ')}, so expected ${want.join(', ')}`);
    const state = (await page.textContent('[data-testid=saga-state]')).trim();
    return `forwards ${forwards.join(', ')}; compensations ${compOrder.join(', ')}; ${succeededComps} succeeded compensation rects; state ${state}`;
  });
  await check('each step shows why it failed and what its compensation was sent and answered', async () => {
    const cells = await page.$$eval('table[data-testid=steps] tbody tr', (rows) => rows.map((r) => ({
      step: r.getAttribute('data-step'),
      outcome: r.querySelector('[data-testid=step-outcome]')?.textContent || '',
      compensation: r.querySelector('[data-testid=step-compensation]')?.textContent || '',
    })));
    const sent = cells.filter((c) => c.compensation.includes('→'));
    assert(sent.length === 3, `${sent.length} steps show a compensation sent and answered: ${JSON.stringify(cells)}`);
    const failed = cells.filter((c) => c.outcome.startsWith('failed') || c.outcome.startsWith('unknown'));
    assert(failed.length >= 1 && failed.every((c) => c.outcome.length > 'failed'.length),
      `the failed step shows no reason: ${JSON.stringify(cells)}`);
    return `${sent.map((c) => `${c.step}: ${c.compensation}`).join('; ')}; ${failed.map((c) => `${c.step}: ${c.outcome}`).join('; ')}`;
  });
  await check('the saga page shows the audit record, the ledger and the trace id', async () => {
    await page.locator('[data-testid=audit]').waitFor({ timeout: TIMEOUT });
    const ledger = (await page.textContent('pre[data-testid=ledger]')).trim();
    assert(ledger.length > 2, 'the ledger is empty');
    const trace = (await page.textContent('[data-testid=trace-id]')).trim();
    assert(trace && trace !== '—', 'no trace id');
    return `trace ${trace}`;
  });
  await check('a declared pivot has no point-of-no-return line of its own, and undos that ran no deadline', async () => {
    const pivot = (await page.textContent('[data-testid=saga-id]')).trim();
    assert(pivot === COMPENSATED_SAGA, `the page shows ${pivot}`);
    const lines = await page.locator('[data-testid=point-of-no-return]').count();
    assert(lines === 0, `${lines} point-of-no-return line(s) for a saga whose point of no return is its pivot`);
    const deadlines = await page.locator('[data-deadline-step]').count();
    assert(deadlines === 0, `${deadlines} undo deadline(s) shown for undos that ran`);
  });
  const sagaShot = await shot('saga.png');
  await copyFile(sagaShot, path.join(SCREENSHOT_DIR, 'timeline.png'));

  // The parallel saga: its branches are the steps that wait for the same one step.
  let branches = [];
  await check("PARALLEL_SAGA's step table shows what each step waits for", async () => {
    await page.evaluate((id) => { location.hash = `#/saga/${encodeURIComponent(id)}`; }, PARALLEL_SAGA);
    await page.waitForFunction((id) => (document.querySelector('[data-testid=saga-id]')?.textContent || '') === id,
      PARALLEL_SAGA, { timeout: TIMEOUT });
    await page.locator('table[data-testid=steps] [data-testid=step-after]').first().waitFor({ timeout: TIMEOUT });
    const rows = await page.$$eval('table[data-testid=steps] tbody tr', (trs) => trs.map((r) => ({
      step: r.getAttribute('data-step'),
      after: (r.querySelector('[data-testid=step-after]')?.textContent || '').trim(),
    })));
    const shown = rows.filter((r) => r.after);
    assert(shown.length >= 3 && shown.every((r) => /^after \S/.test(r.after)),
      `the step table shows "after" on ${shown.length} steps: ${JSON.stringify(rows)}`);
    const join = rows.find((r) => r.after.includes(','));
    assert(join, `no step waits for two steps: ${JSON.stringify(rows)}`);
    const byAfter = new Map();
    for (const r of shown) byAfter.set(r.after, [...(byAfter.get(r.after) || []), r.step]);
    branches = [...byAfter.values()].find((steps) => steps.length >= 2) || [];
    assert(branches.length === 2, `no two steps wait for the same one: ${JSON.stringify(rows)}`);
    const joined = join.after.replace(/^after /, '').split(', ');
    assert(JSON.stringify([...joined].sort()) === JSON.stringify([...branches].sort()),
      `${join.step} waits for ${joined.join(', ')}, the branches are ${branches.join(', ')}`);
    return shown.map((r) => `${r.step}: ${r.after}`).join('; ');
  });
  await check("PARALLEL_SAGA's branch bars overlap in time", async () => {
    await page.locator('svg[data-testid=timeline]').waitFor({ timeout: TIMEOUT });
    // Read once the timeline was drawn at its width (after the first frame).
    await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
    const bars = await page.$$eval('svg[data-testid=timeline] rect[data-kind=forward]', (els) => els.map((e) => {
      const b = e.getBoundingClientRect();
      return { step: e.getAttribute('data-step'), outcome: e.getAttribute('data-outcome'), x: b.x, y: b.y, w: b.width, h: b.height };
    }));
    const [a, b] = branches.map((step) => bars.find((r) => r.step === step && r.outcome === 'succeeded'));
    assert(a && b, `no succeeded forward bar for ${branches.join(' or ')}: ${JSON.stringify(bars)}`);
    assert(a.w > 0 && b.w > 0 && a.h > 0 && b.h > 0, `a branch bar is not drawn: ${JSON.stringify([a, b])}`);
    const overlap = Math.min(a.x + a.w, b.x + b.w) - Math.max(a.x, b.x);
    assert(overlap > 0, `the x-ranges [${a.x}, ${a.x + a.w}] of ${branches[0]} and [${b.x}, ${b.x + b.w}] of ${branches[1]} do not intersect`);
    assert(Math.abs(a.y - b.y) >= Math.min(a.h, b.h), `the branch bars share a row (y ${a.y} and ${b.y}): one hides the other`);
    return `${branches[0]} x ${a.x.toFixed(0)}–${(a.x + a.w).toFixed(0)}, ${branches[1]} x ${b.x.toFixed(0)}–${(b.x + b.w).toFixed(0)}: ${overlap.toFixed(0)} px together`;
  });
  await shot('parallel.png');

  await check('NO_PIVOT_SAGA shows its point of no return, a retriable step, as passed', async () => {
    await page.evaluate((id) => { location.hash = `#/saga/${encodeURIComponent(id)}`; }, NO_PIVOT_SAGA);
    await page.waitForFunction((id) => (document.querySelector('[data-testid=saga-id]')?.textContent || '') === id,
      NO_PIVOT_SAGA, { timeout: TIMEOUT });
    const line = page.locator('[data-testid=point-of-no-return]');
    await line.waitFor({ timeout: TIMEOUT });
    const text = (await line.textContent()).trim();
    for (const want of ['s5', 'email.send', 'a retriable step that changes something', '; passed']) {
      assert(text.includes(want), `the point-of-no-return line "${text}" lacks "${want}"`);
    }
    const deadlines = await page.locator('[data-deadline-step]').count();
    assert(deadlines === 0, `${deadlines} undo deadline(s) shown past the point of no return`);
    return text;
  });

  const waitingRow = `[data-testid=waiting-row][data-saga-id=${cssValue(ESCALATED_SAGA)}]`;
  const answerButton = `${waitingRow} button[data-resolution=${cssValue(ESCALATED_RESOLUTION)}]`;
  await check("an operator sees ESCALATED_SAGA waiting but cannot answer", async () => {
    await page.click('a[href="#/waiting"]');
    await page.locator(answerButton).waitFor({ timeout: TIMEOUT });
    assert(await page.locator(answerButton).isDisabled(), `${ESCALATED_RESOLUTION} is enabled for an operator`);
    assert((await page.textContent(waitingRow)).includes('only an approver answers'), 'no note that only an approver answers');
  });

  // d) log out; the approver answers.
  await check('logging out shows the login form, also after a reload', async () => {
    await page.click('#logout');
    await page.locator('#login-token').waitFor({ state: 'visible', timeout: TIMEOUT });
    await page.reload();
    await page.locator('#login-token').waitFor({ state: 'visible', timeout: TIMEOUT });
    const saved = await page.evaluate((k) => sessionStorage.getItem(k), SESSION_KEY);
    assert(saved === null, 'a session is still stored');
  });
  await check("a link to a saga's page opens it once logged in", async () => {
    const link = `${CONSOLE_URL}#/saga/${encodeURIComponent(COMPENSATED_SAGA)}`;
    await page.goto(link);
    await page.locator('#login-token').waitFor({ state: 'visible', timeout: TIMEOUT });
    await loginWith(OPERATOR_TOKEN, 'operator');
    await page.locator('svg[data-testid=timeline]').waitFor({ timeout: TIMEOUT });
    const hash = await page.evaluate(() => location.hash);
    assert(hash === `#/saga/${encodeURIComponent(COMPENSATED_SAGA)}`, `the login left the link for ${hash}`);
    const state = (await page.textContent('[data-testid=saga-state]')).trim();
    await page.click('#logout');
    await page.locator('#login-token').waitFor({ state: 'visible', timeout: TIMEOUT });
    return `${link} shows the saga (${state})`;
  });
  await check('an approver logs in through the form', () => loginWith(APPROVER_TOKEN, 'approver'));
  await check('the waiting page shows ESCALATED_SAGA with its answers', async () => {
    await page.click('a[href="#/waiting"]');
    await page.locator(waitingRow).waitFor({ timeout: TIMEOUT });
    await page.locator(answerButton).waitFor({ timeout: TIMEOUT });
    assert(await page.locator(answerButton).isEnabled(), `${ESCALATED_RESOLUTION} is disabled for an approver`);
    const choices = await page.$$eval(`${waitingRow} button[data-resolution]`, (b) => b.map((x) => x.getAttribute('data-resolution')));
    // The question in words for people, naming what the answers do.
    const question = (await page.locator(`${waitingRow} [data-testid=question]`).textContent()).trim();
    assert(/did not complete|take effect\?/.test(question) && question.includes(`${ESCALATED_RESOLUTION} to`),
      `the question does not say what ${ESCALATED_RESOLUTION} does: "${question}"`);
    return `choices ${choices.join(', ')}; asks "${question}"`;
  });
  await shot('waiting.png');
  await check(`the approver answers ESCALATED_SAGA with ${ESCALATED_RESOLUTION}`, async () => {
    await page.click(answerButton);
    const result = page.locator('[data-testid=answer-result]');
    await result.waitFor({ state: 'visible', timeout: TIMEOUT });
    const text = (await result.textContent()).trim();
    assert(text.startsWith('answered: '), `[data-testid=answer-result] says "${text}"`);
    return text;
  });
  await check('ESCALATED_SAGA no longer waits for a person', async () => {
    const token = await sessionToken();
    const state = await eventually(async () => {
      const res = await fetch(apiUrl(`sagas/${encodeURIComponent(ESCALATED_SAGA)}`), { headers: { Authorization: `Bearer ${token}` } });
      const body = await jsonOf(res);
      assert(res.ok, `GET api/sagas/${ESCALATED_SAGA}: ${res.status} ${JSON.stringify(body)}`);
      if (body.state === 'waitingForAPerson') throw new Error('still waitingForAPerson');
      return body.state;
    }, TIMEOUT, 'the saga did not move on');
    console.log(`# ${ESCALATED_SAGA} is now ${state}`);
    return `state ${state}`;
  });

  await check('the page saw no CSP violation and no uncaught error', async () => {
    assert(pageProblems.length === 0, pageProblems.join('; '));
  });

  await browser.close();
  browser = null;
  console.log(`console browser test: ${passed} checks passed`);
}

main().catch((e) => fail('the browser test', e && e.stack ? e.stack.split('\n')[0] : String(e)));
