// The status page's history in a real browser (Debian's chromium, headless, driven by
// playwright-core). Used by tests/integration/test_status_page.py:
//
//   node status_history.mjs ADMIN_URL GATEWAY_URL MODEL BACKENDS SLOW_URL SCREENSHOT PROFILE_DIR
//
// BACKENDS: the backend names, comma-separated; SLOW_URL: the llmsim replica (one of them)
// to slow down mid-run through its control API. Loads the page, keeps a closed loop of
// streamed requests going through the gateway, waits for a few points of history with
// traffic, slows that replica tenfold (POST /sim/control {"speed": 0.1}), waits for a few
// more, takes a full-page screenshot while the load still runs, and prints one JSON line:
// per backend its TTFT p50 and share before and after the slowdown, read from the history
// the page drew (window.lgHistory), and the slowed replica's TTFT line as drawn (the y of
// its points in the plot's SVG path, before and after). Exit status 0 when the page drew
// every row and plot without a console error.
import { chromium } from 'playwright-core';

const [adminUrl, gatewayUrl, model, backendList, slowUrl, screenshot, profile] =
  process.argv.slice(2);
const backends = backendList.split(',');
const CONCURRENCY = 6;
const BEFORE_POINTS = 3; // points with traffic before the slowdown
const AFTER_POINTS = 5;  // points after it

function fail(msg) {
  console.error('status history: ' + msg);
  process.exit(1);
}

// A closed loop of streamed requests until stop() (every status must be 200).
function load() {
  const body = JSON.stringify({ model, stream: true, max_tokens: 8,
    messages: [{ role: 'user', content: 'hello from the status history test' }] });
  let running = true;
  const bad = [];
  let done = 0;
  const loops = [];
  for (let k = 0; k < CONCURRENCY; k++) {
    loops.push((async () => {
      while (running) {
        const r = await fetch(gatewayUrl + '/v1/chat/completions', {
          method: 'POST', headers: { 'Content-Type': 'application/json' }, body });
        await r.text();
        if (r.status !== 200) bad.push(r.status);
        done++;
      }
    })());
  }
  return { stop: async () => { running = false; await Promise.all(loops); return { done, bad }; } };
}

// The median of the known values.
function median(vals) {
  const v = vals.filter((x) => x != null).sort((a, b) => a - b);
  return v.length ? v[Math.floor(v.length / 2)] : null;
}

function mean(vals) {
  const v = vals.filter((x) => x != null);
  return v.length ? v.reduce((a, b) => a + b, 0) / v.length : null;
}

const context = await chromium.launchPersistentContext(profile, {
  executablePath: '/usr/bin/chromium',
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
         '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  viewport: { width: 1400, height: 500 },
});
const result = {};
let traffic = null;
try {
  const page = context.pages()[0] || await context.newPage();
  const consoleErrors = [];
  page.on('console', (m) => { if (m.type() === 'error') consoleErrors.push(m.text()); });
  page.on('pageerror', (e) => consoleErrors.push(String(e)));
  // everything the page loads comes from the admin listener (no external script or font)
  const elsewhere = [];
  page.on('request', (q) => {
    if (!q.url().startsWith(adminUrl + '/') && !q.url().startsWith('data:')) elsewhere.push(q.url());
  });
  await page.goto(adminUrl + '/', { waitUntil: 'domcontentloaded' });

  // the history section shows, with the fleet's row and one row per backend
  await page.waitForFunction((n) =>
    document.querySelectorAll('#htable tbody tr[data-history]').length === n + 1,
    backends.length, { timeout: 15000 });
  result.rows = await page.$$eval('#htable tbody tr[data-history]',
    (trs) => trs.map((tr) => tr.dataset.history));

  const tLoad = Date.now();
  traffic = load();
  // points whose whole interval had traffic
  const pointsAfter = (t, n) => page.waitForFunction(([t, n]) => {
    const h = window.lgHistory;
    return h && h.t_ms.filter((x) => x - h.resolution_s * 1000 >= t).length >= n;
  }, [t, n], { timeout: 30000 });
  await pointsAfter(tLoad, BEFORE_POINTS);
  const r = await fetch(slowUrl + '/sim/control', { method: 'POST',
    headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ speed: 0.1 }) });
  if (r.status !== 200) fail('the control API answered ' + r.status);
  const tSlow = Date.now();
  await pointsAfter(tSlow, AFTER_POINTS);
  await page.waitForTimeout(300); // the page has drawn what it fetched
  await page.screenshot({ path: screenshot, fullPage: true });
  const sent = await traffic.stop();
  traffic = null;
  result.requests = sent.done;
  if (sent.bad.length) fail('traffic got statuses ' + sent.bad.join(','));

  // what the plots were drawn from: each backend before and after the slowdown
  const h = await page.evaluate(() => window.lgHistory);
  const res = h.resolution_s * 1000;
  const before = h.t_ms.map((t, i) => (t - res >= tLoad && t <= tSlow ? i : -1)).filter((i) => i >= 0);
  const after = h.t_ms.map((t, i) => (t - res >= tSlow ? i : -1)).filter((i) => i >= 0);
  result.points = { before: before.length, after: after.length, resolution_s: h.resolution_s };
  result.backends = {};
  for (const b of h.backends) {
    const at = (k, idx) => idx.map((i) => b[k][i]);
    result.backends[b.name] = {
      ttft_p50_before: median(at('ttft_p50_ms', before)),
      ttft_p50_after: median(at('ttft_p50_ms', after)),
      share_before: mean(at('share', before)),
      share_after: mean(at('share', after)),
      health: b.health[b.health.length - 1],
    };
  }
  result.fleet_rps = mean(after.map((i) => h.fleet.requests_per_s[i]));
  // the page's copy, merged from replies with ?since=, against the whole history fetched now
  const whole = await fetch(adminUrl + '/admin/history').then((x) => x.json());
  let common = 0, mismatch = 0;
  h.t_ms.forEach((t, i) => {
    const j = whole.t_ms.indexOf(t);
    if (j < 0) return;
    common++;
    for (const b of h.backends) {
      const w = whole.backends.find((x) => x.name === b.name);
      for (const k of ['requests_per_s', 'share', 'ttft_p50_ms', 'in_flight', 'queue']) {
        if (!w || w[k][j] !== b[k][i]) mismatch++;
      }
    }
    for (const r of h.reasons) {
      const w = whole.reasons.find((x) => x.policy === r.policy && x.reason === r.reason);
      if (!w || w.counts[j] !== r.counts[i]) mismatch++;
    }
  });
  result.merged = { common, mismatch, page_points: h.t_ms.length };
  result.reasons = h.reasons.map((x) => x.policy + ':' + x.reason);

  // the slowed replica's TTFT p50 as drawn: the y of each point of its path (smaller is
  // higher), split at the slowdown by x (the plot's right edge is the last point's time)
  const slowName = await fetch(slowUrl + '/sim/state').then((x) => x.json()).then((s) => s.name);
  const drawn = await page.$eval(
    `tr[data-history="${slowName}"] td.h-ttft svg path.p50`, (p) => ({
      d: p.getAttribute('d'),
      width: Number(p.ownerSVGElement.getAttribute('width')),
      max: Number(p.ownerSVGElement.dataset.max),
    }));
  const end = h.t_ms[h.t_ms.length - 1];
  const xSlow = drawn.width * (1 - (end - tSlow) / (h.window_s * 1000));
  const pts = [...drawn.d.matchAll(/[ML]([\d.]+) ([\d.]+)/g)].map((m) => [Number(m[1]), Number(m[2])]);
  result.slow = {
    name: slowName,
    plot_max_ms: drawn.max,
    y_before: pts.filter(([x]) => x < xSlow - drawn.width * res / (h.window_s * 1000)).map(([, y]) => y),
    y_after: pts.filter(([x]) => x > xSlow + drawn.width * res / (h.window_s * 1000)).map(([, y]) => y),
  };
  result.plots = await page.$$eval('#htable svg.spark', (s) => s.length);
  result.legend = await page.locator('#legend').innerText();
  result.console_errors = consoleErrors;
  result.elsewhere = elsewhere;
  if (consoleErrors.length) fail('console errors: ' + consoleErrors.join(' | '));
} finally {
  if (traffic) await traffic.stop();
  await context.close();
}
console.log(JSON.stringify(result));
