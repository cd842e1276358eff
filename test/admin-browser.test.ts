// The operator console in Chromium, as an operator uses it, on one page of one server: sign in with a
// link from the CLI, watch the overview's figures rise with traffic without a reload, take down a
// bundle a visitor reported, block a file's content, mint and revoke a key. Every step is checked from
// outside the browser too (451, 422, 401), and no console page logs an error or a CSP violation.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import type { Browser, Page, Response } from 'playwright-core';
import { backends, ROOT, startServer, type TestServer } from './helpers/server.ts';
import { chromiumSkip, launchChromium } from './helpers/browser.ts';
import { freePort } from './helpers/services.ts';
import { waitFor } from './helpers/wait.ts';
import { bearer, call, file, upload, uploaded } from './helpers/http.ts';
import { sha256 } from './abuse-util.ts';

const skip = chromiumSkip('the operator console in a browser (test/admin-browser.test.ts)');
/**
 * Where the console's two screenshots go: a temp dir under npm test (a run changes no tracked file),
 * docs/ under `npm run console-screenshots`, which refreshes the pictures docs/operating.md shows.
 */
const SHOTS = process.env.SLUICE_SCREENSHOTS === 'docs' ? path.join(ROOT, 'docs') : fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-console-shots-'));
/** The overview polls every 10 s: a rise shows within two polls; the rest is room for a busy machine. */
const POLLED_MS = 60_000;

describe(`operator console in Chromium (${backends()[0]})`, { skip }, () => {
  let srv: TestServer;
  let browser: Browser;
  let page: Page;
  /** Script errors, console errors (CSP refusals among them) and CSP violation events, with the page's path. */
  const problems: string[] = [];
  let code = '';
  let reportId = '';
  const reported = [file('invoice-2024.pdf.exe', randomBytes(3000), 'application/octet-stream'), file('read me.txt', 'open the invoice\n', 'text/plain')];

  before(async () => {
    const port = await freePort();
    // BASE_URL: the CLI's link names this server, so the browser opens it as printed.
    srv = await startServer(backends()[0]!, { CONSOLE_SAMPLE_SECONDS: '1', PORT: String(port), BASE_URL: `http://127.0.0.1:${port}` });
    browser = await launchChromium();
    page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    const where = (): string => new URL(page.url()).pathname;
    page.on('console', (m) => {
      if (m.type() === 'error') problems.push(`${where()}: ${m.text()}`);
    });
    page.on('pageerror', (e) => problems.push(`${where()}: ${e.message}`));
    await page.addInitScript(() => {
      document.addEventListener('securitypolicyviolation', (e) => console.error(`CSP violation: ${e.violatedDirective} ${e.blockedURI}`));
    });
  });
  after(async () => {
    await browser?.close();
    await srv?.close();
  });

  test('a link from the CLI opens a sign-in page; its button lands on the overview', async () => {
    const r = await srv.cli(['admin', 'link', '--label', 'browser test']);
    assert.equal(r.code, 0, r.stderr);
    const link = r.stdout.trim();
    assert.ok(link.startsWith(`${srv.url}/admin/login/`), link);
    await page.goto(link);
    assert.match(await page.locator('main, body').first().innerText(), /Sign in as browser test/);
    await Promise.all([page.waitForURL(`${srv.url}/admin`), page.getByRole('button', { name: 'Sign in' }).click()]);
    assert.equal(await page.locator('h1').innerText(), 'Overview');
    assert.equal(await page.locator('nav.console-nav a[aria-current=page]').innerText(), 'Overview');
    assert.match(await page.locator('nav.console-nav').innerText(), /browser test/);
    // uPlot draws a canvas into each chart once the first answer is in.
    await page.locator('figure[data-chart=requests] canvas').first().waitFor();
  });

  test('the overview\'s request figures rise with 30 uploads, without a reload', async () => {
    // The total since the node started, as the page shows it (and rewrites from each poll's answer).
    const total = (): Promise<number> =>
      page.locator('td[data-figure=sinceStart]').innerText().then((t) => Number(/^(\d+) requests/.exec(t)![1]));
    // The answers the charts are drawn from: the requests series after `from` (epoch seconds).
    const answers: Array<{ t: number[]; requests: number[] }> = [];
    const seen = (res: Response): void => {
      if (new URL(res.url()).pathname === '/admin/overview.json') res.json().then((o: { node: (typeof answers)[number] }) => answers.push(o.node), () => {});
    };
    page.on('response', seen);
    await page.evaluate(() => ((window as unknown as { notReloaded: boolean }).notReloaded = true));
    // A young node has no figure yet ("no sample yet") until its second sample and the next poll.
    await page.waitForFunction(() => /^\d+ requests/.test(document.querySelector('td[data-figure=sinceStart]')!.textContent!), null, { timeout: POLLED_MS });
    const start = await total();
    const from = Date.now() / 1000;
    for (let i = 0; i < 30; i++) await uploaded(srv, [file(`traffic-${i}.bin`, randomBytes(20_000 + i * 1000))]);
    for (let i = 0; i < 5; i++) assert.equal((await call(srv, 'GET', '/api/v1/bundle/zzzzz')).status, 404);
    // A poll adds one request every 10 s: only the uploads reach 30 more within the wait.
    await page.waitForFunction(
      (want) => Number(/^(\d+) requests/.exec(document.querySelector('td[data-figure=sinceStart]')!.textContent!)?.[1] ?? 0) >= want,
      start + 30,
      { timeout: POLLED_MS, polling: 250 },
    );
    assert.ok(await page.evaluate(() => (window as unknown as { notReloaded?: boolean }).notReloaded), 'the same document: no reload');
    // Each point is a rate over about a second: their sum is the count, within the rounding of the intervals.
    const since = (a: (typeof answers)[number]): number => a.requests.filter((_, i) => a.t[i]! >= Math.floor(from)).reduce((x, y) => x + y, 0);
    await waitFor('the uploads in the chart\'s requests series', () => answers.some((a) => since(a) >= 30 * 0.9));
    page.off('response', seen);
    assert.ok((await total()) >= start + 30);
    // The figures and the first row of charts (requests, bytes, transfers).
    const firstRow = (await page.locator('figure[data-chart=transfers]').boundingBox())!;
    await page.screenshot({ path: path.join(SHOTS, 'console-overview.png'), fullPage: true, clip: { x: 0, y: 0, width: 1280, height: Math.ceil(firstRow.y + firstRow.height + 24) } });
  });

  test('a report filed on the public form is in the queue; quarantine from its page answers 451', async () => {
    const up = await uploaded(srv, reported, { fields: { description: 'Your invoice is attached' } });
    code = up.short_code;
    await page.goto(`${srv.url}/${code}`);
    await Promise.all([page.waitForURL(`${srv.url}/report/${code}`), page.getByRole('link', { name: 'Report abuse' }).click()]);
    await page.selectOption('select[name=reason]', 'malware');
    await page.fill('textarea[name=details]', 'The .pdf.exe is a trojan; the link came in a spam mail.');
    await page.fill('input[name=contact]', 'abuse-desk@example.org');
    await Promise.all([page.waitForURL(/\?sent=\d+$/), page.getByRole('button', { name: 'Send report' }).click()]);
    reportId = new URL(page.url()).searchParams.get('sent')!;
    assert.equal(await page.locator('h1').innerText(), 'Thank you');

    await page.goto(`${srv.url}/admin`);
    await page.locator('nav.console-nav').getByRole('link', { name: 'Reports' }).click();
    await page.waitForURL(`${srv.url}/admin/reports`);
    const row = page.locator('table.grid tbody tr', { has: page.locator(`a[href="/admin/reports/${reportId}"]`) });
    assert.match(await row.innerText(), new RegExp(`malware\\s+${code} active\\s+The \\.pdf\\.exe is a trojan`));
    await Promise.all([page.waitForURL(`${srv.url}/admin/reports/${reportId}`), row.getByRole('link', { name: reportId, exact: true }).click()]);
    assert.equal(await page.locator('h1').innerText(), `Report ${reportId} about ${code}`);
    const text = await page.locator('main, body').first().innerText();
    for (const s of ['abuse-desk@example.org', 'invoice-2024.pdf.exe', 'read me.txt', '2.9 KB', 'anonymous']) assert.ok(text.includes(s), `the report's page shows ${s}`);
    await page.screenshot({ path: path.join(SHOTS, 'console-report.png'), fullPage: true });

    assert.equal((await call(srv, 'GET', `/${code}`)).status, 200);
    await Promise.all([page.waitForURL(/\?done=/), page.getByRole('button', { name: 'Quarantine (451)' }).click()]);
    assert.match(await page.locator('p.notice').innerText(), new RegExp(`Quarantined ${code}: every path of it answers 451`));
    assert.equal((await call(srv, 'GET', `/${code}`)).status, 451);
    assert.equal((await call(srv, 'GET', `/api/v1/bundle/${code}`)).status, 451);
    assert.ok(await page.getByRole('button', { name: 'Release' }).isVisible());
  });

  test('blocking a file from the report page refuses a new upload of its bytes with 422 BLOCKED_CONTENT', async () => {
    const hex = sha256(reported[0]!.data);
    const fileRow = page.locator('tr', { hasText: 'invoice-2024.pdf.exe' });
    await Promise.all([page.waitForURL(/\?done=/), fileRow.getByRole('button', { name: 'Hash and block' }).click()]);
    assert.match(await page.locator('p.notice').innerText(), new RegExp(`Blocked ${hex}`));
    assert.ok((await page.locator('tr', { hasText: 'invoice-2024.pdf.exe' }).innerText()).includes(hex), 'the hash is shown beside the file');
    await page.locator('nav.console-nav').getByRole('link', { name: 'Blocklist' }).click();
    await page.waitForURL(`${srv.url}/admin/blocklist`);
    assert.match(await page.locator('tr', { hasText: hex }).innerText(), new RegExp(`report ${reportId} \\(malware\\)[\\s\\S]*browser test`));
    const again = await upload(srv, [file('renamed.bin', reported[0]!.data)]);
    assert.equal(again.status, 422, again.text);
    assert.equal(again.json.code, 'BLOCKED_CONTENT');
    assert.equal((await upload(srv, [reported[1]!])).status, 201, 'the other file is not blocked');
  });

  test('a key minted on the keys page is shown once, works as a Bearer, and is refused once revoked there', async () => {
    await page.locator('nav.console-nav').getByRole('link', { name: 'Keys' }).click();
    await page.waitForURL(`${srv.url}/admin/keys`);
    await page.selectOption('#k-plan', 'power');
    await page.fill('#k-label', 'partner uploads');
    await page.getByRole('button', { name: 'Mint key' }).click();
    await page.locator('#new-key').waitFor();
    const key = await page.inputValue('#new-key');
    assert.match(key, /^sk_[A-Za-z0-9]{43}$/);
    assert.ok(!page.url().includes(key), 'the key is in no URL');
    const usage = (): Promise<number> => call(srv, 'GET', '/api/v1/my/usage', { headers: bearer(key) }).then((r) => r.status);
    assert.equal(await usage(), 200);
    await page.getByRole('link', { name: 'Back to the keys' }).click();
    await page.waitForURL(`${srv.url}/admin/keys`);
    assert.ok(!(await page.content()).includes(key), 'the list shows the prefix only');
    const row = page.locator('tr', { hasText: key.slice(0, 12) });
    assert.match(await row.innerText(), /partner uploads\s+power\s+active/);
    await Promise.all([page.waitForURL(/\?done=/), row.getByRole('button', { name: 'Revoke' }).click()]);
    assert.match(await page.locator('p.notice').innerText(), new RegExp(`Revoked ${key.slice(0, 12)}`));
    assert.equal(await usage(), 401);
  });

  test('the trail lists every action under the session\'s label; no page logged an error or a CSP violation', async () => {
    await page.locator('nav.console-nav').getByRole('link', { name: 'Audit trail' }).click();
    await page.waitForURL(`${srv.url}/admin/audit`);
    const trail = await page.locator('table.grid tbody').innerText();
    for (const action of ['bundles quarantine', 'block add', 'keys create', 'keys revoke']) {
      assert.match(trail, new RegExp(`${action}\\s+\\S+\\s+browser test`), `${action} in\n${trail}`);
    }
    assert.deepEqual(problems, []);
  });
});
