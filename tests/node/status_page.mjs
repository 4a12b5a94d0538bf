// The admin status page in a real browser (Debian's chromium, headless, driven
// by playwright-core). Used by tests/integration/test_status_page.py:
//
//   node status_page.mjs ADMIN_URL GATEWAY_URL MODEL BACKENDS SCREENSHOT PROFILE_DIR [WxH]
//
// BACKENDS is a comma-separated list of the backend names the page must show;
// WxH the browser's viewport (default 1400x500; the screenshot is the full page).
// Loads the page, waits for the table to fill, checks each backend's row and
// health, sends traffic through the gateway and waits for the numbers to move,
// drains and undrains a backend with its button, takes a screenshot while streams run, and
// prints one JSON line with what it saw. Exit status 0 when every check held.
import { chromium } from 'playwright-core';

const [adminUrl, gatewayUrl, model, backendList, screenshot, profile, size] = process.argv.slice(2);
const [vw, vh] = (size || '1400x500').split('x').map(Number);
const backends = backendList.split(',');

function fail(msg) {
  console.error('status page: ' + msg);
  process.exit(1);
}

async function cellText(page, name, cls) {
  return page.locator(`tr[data-backend="${name}"] td.${cls}`).innerText();
}

async function sendTraffic(n, maxTokens = 8) {
  const body = JSON.stringify({ model, stream: true, max_tokens: maxTokens,
    messages: [{ role: 'user', content: 'hello from the status page test' }] });
  const all = [];
  for (let i = 0; i < n; i++) {
    all.push(fetch(gatewayUrl + '/v1/chat/completions', {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body,
    }).then((r) => r.text().then(() => r.status)));
  }
  const codes = await Promise.all(all);
  if (codes.some((c) => c !== 200)) fail('traffic got statuses ' + codes.join(','));
}

const context = await chromium.launchPersistentContext(profile, {
  executablePath: '/usr/bin/chromium',
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
         '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  viewport: { width: vw, height: vh },
});
const result = {};
try {
  const page = context.pages()[0] || await context.newPage();
  const consoleErrors = [];
  page.on('console', (m) => { if (m.type() === 'error') consoleErrors.push(m.text()); });
  page.on('pageerror', (e) => consoleErrors.push(String(e)));
  await page.goto(adminUrl + '/', { waitUntil: 'domcontentloaded' });

  // the table fills with one row per backend
  await page.waitForFunction((n) =>
    document.querySelectorAll('#backends tbody tr[data-backend]').length === n,
    backends.length, { timeout: 15000 });
  result.rows = await page.$$eval('#backends tbody tr[data-backend]',
    (trs) => trs.map((tr) => tr.dataset.backend));
  for (const b of backends) {
    if (!result.rows.includes(b)) fail(`no row for ${b}: ${result.rows}`);
    const state = (await cellText(page, b, 'state')).toLowerCase();
    if (state !== 'up') fail(`${b} shows state ${state}`);
  }
  result.header = await page.locator('header').innerText();
  const before = {};
  for (const b of backends) before[b] = Number(await cellText(page, b, 'requests'));

  // traffic: the request counts grow, and a share and a TTFT appear
  await sendTraffic(4 * backends.length);
  await page.waitForFunction((names) => names.every((n) => {
    const td = document.querySelector(`tr[data-backend="${n}"] td.requests`);
    return td && Number(td.textContent) >= 1;
  }), backends, { timeout: 15000 });
  result.after = {};
  for (const b of backends) result.after[b] = Number(await cellText(page, b, 'requests'));
  if (!backends.some((b) => result.after[b] > before[b])) fail('no request count moved');
  // keep the traffic flowing until a refresh shows per-interval figures
  let shares = [];
  for (let i = 0; i < 20 && !shares.some((s) => s.includes('%')); i++) {
    await sendTraffic(backends.length);
    await page.waitForTimeout(300);
    shares = await Promise.all(backends.map((b) => cellText(page, b, 'share')));
  }
  result.shares = shares;
  if (!shares.some((s) => s.includes('%'))) fail('no share of traffic shown: ' + shares);

  // drain a backend with its button, then bring it back
  const target = backends[0];
  await page.locator(`tr[data-backend="${target}"] td.action button`).click();
  await page.waitForFunction((n) => document.querySelector(
    `tr[data-backend="${n}"] td.state`).textContent === 'draining', target, { timeout: 10000 });
  result.drained = await cellText(page, target, 'state');
  // the picture while streams run (the fast replicas' end within the refresh, the slow
  // ones' later), and every row's score: the dry run explains every candidate
  const running = sendTraffic(2 * backends.length, 400);
  await page.waitForTimeout(2000);
  result.scores = {};
  for (const b of backends) result.scores[b] = await cellText(page, b, 'score');
  await page.screenshot({ path: screenshot, fullPage: true });
  await running;
  await page.locator(`tr[data-backend="${target}"] td.action button`).click();
  await page.waitForFunction((n) => document.querySelector(
    `tr[data-backend="${n}"] td.state`).textContent === 'up', target, { timeout: 10000 });
  result.undrained = await cellText(page, target, 'state');
  result.updates = Number(await page.getAttribute('body', 'data-updates'));
  result.console_errors = consoleErrors;
  if (consoleErrors.length) fail('console errors: ' + consoleErrors.join(' | '));
} finally {
  await context.close();
}
console.log(JSON.stringify(result));
