import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createHash, randomBytes } from 'node:crypto';
import type { Browser, Page } from 'playwright-core';
import { backends, ROOT, startServer, type TestServer } from './helpers/server.ts';
import { chromiumSkip, launchChromium } from './helpers/browser.ts';
import { freePort } from './helpers/services.ts';

// Locally a missing browser skips the suite (and npm test says so at the end); in CI it fails.
const skip = chromiumSkip('the web pages in a browser (test/browser.test.ts)');
/**
 * Where the page screenshots go: a temp dir under npm test (a test run changes no tracked file),
 * docs/ under `npm run screenshots`, which refreshes the pictures the README shows.
 */
// Screenshots go to a temp dir; `npm run screenshots` alone writes the two the docs show.
const SHOTS = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-shots-'));
const DOC_SHOTS = process.env.SLUICE_SCREENSHOTS === 'docs' ? path.join(ROOT, 'docs') : SHOTS;

describe(`web front end in Chromium (${backends()[0]})`, { skip }, () => {
  let srv: TestServer;
  let browser: Browser;
  const problems: string[] = [];

  before(async () => {
    const port = await freePort();
    srv = await startServer(backends()[0]!, { PORT: String(port), BASE_URL: `http://127.0.0.1:${port}` });
    browser = await launchChromium();
  });
  after(async () => {
    await browser?.close();
    await srv?.close();
  });

  async function newPage(width = 1280, height = 860): Promise<Page> {
    const page = await browser.newPage({ viewport: { width, height }, acceptDownloads: true });
    // CSP violations and script errors surface as console errors: none may happen.
    page.on('console', (m) => {
      if (m.type() === 'error' && !/Failed to load resource/.test(m.text())) problems.push(m.text());
    });
    page.on('pageerror', (e) => problems.push(e.message));
    return page;
  }

  async function uploadThroughPage(page: Page, files: Array<{ name: string; body: string }>, password?: string): Promise<string> {
    await page.goto(`${srv.url}/`);
    await page.setInputFiles(
      '#pick',
      files.map((f) => ({ name: f.name, mimeType: 'text/plain', buffer: Buffer.from(f.body) })),
    );
    assert.equal(await page.locator('#queue li').count(), files.length);
    await page.locator('details.options summary').click();
    await page.fill('textarea[name=description]', 'Holiday <b>notes</b>');
    if (password) await page.fill('input[name=access_password]', password);
    await page.screenshot({ path: path.join(SHOTS, `upload-${password ? 'locked' : 'public'}.png`), fullPage: true });
    await page.click('#send');
    await page.locator('#result').waitFor({ state: 'visible' });
    const link = await page.inputValue('#share-link');
    assert.match(link, /^http:\/\/127\.0\.0\.1:\d+\/[A-Za-z0-9]{5}$/);
    assert.match(await page.inputValue('#upload-link'), /\/u\/[0-9a-f]{64}$/);
    assert.match((await page.getAttribute('#qr', 'src')) ?? '', /^data:image\/gif;base64,/);
    return link;
  }

  test('upload two files, open the share link, download a file', async () => {
    const page = await newPage();
    const link = await uploadThroughPage(page, [
      { name: 'notes <1>.txt', body: 'first file' },
      { name: 'second.txt', body: 'second file body' },
    ]);
    await page.goto(link);
    assert.deepEqual(await page.locator('#files .name').allTextContents(), ['notes <1>.txt', 'second.txt']);
    assert.equal(await page.locator('.desc').textContent(), 'Holiday <b>notes</b>');
    assert.doesNotMatch((await page.locator('time.local-time').textContent()) ?? '', /UTC$/, 'expiry shown in local time');
    const [download] = await Promise.all([page.waitForEvent('download'), page.locator('#files a.btn').nth(1).click()]);
    assert.equal(download.suggestedFilename(), 'second.txt');
    assert.equal(fs.readFileSync((await download.path())!, 'utf8'), 'second file body');
    await page.setViewportSize({ width: 390, height: 844 });
    await page.screenshot({ path: path.join(SHOTS, 'share-phone.png'), fullPage: true });
    await page.setViewportSize({ width: 1280, height: 860 });
    await page.screenshot({ path: path.join(SHOTS, 'share-desktop.png'), fullPage: true });
    await page.close();
    assert.deepEqual(problems, []);
  });

  test('a password bundle unlocks in the page and its files download with the token', async () => {
    const page = await newPage(390, 844);
    const link = await uploadThroughPage(page, [{ name: 'secret.txt', body: 'the secret' }], 'pw-42');
    const manageLink = await page.inputValue('#upload-link');
    await page.screenshot({ path: path.join(SHOTS, 'uploaded-phone.png'), fullPage: true });
    await page.goto(link);
    assert.equal(await page.locator('#files li').count(), 0, 'nothing listed while locked');
    assert.equal(await page.locator('.desc').count(), 0, 'no description while locked');
    await page.emulateMedia({ colorScheme: 'dark' });
    await page.screenshot({ path: path.join(SHOTS, 'locked-dark.png'), fullPage: true });
    await page.emulateMedia({ colorScheme: 'light' });
    await page.fill('#pw', 'wrong');
    await page.click('#unlock button');
    await page.locator('#unlock .error').waitFor({ state: 'visible' });
    assert.match((await page.locator('#unlock .error').textContent()) ?? '', /Wrong password/);
    await page.fill('#pw', 'pw-42');
    await page.click('#unlock button');
    await page.locator('#unlocked').waitFor({ state: 'visible' });
    assert.deepEqual(await page.locator('#files .name').allTextContents(), ['secret.txt']);
    assert.equal(await page.locator('.desc').textContent(), 'Holiday <b>notes</b>', 'the description, as text, once unlocked');
    assert.match((await page.getAttribute('#zip', 'href')) ?? '', /^\/zip\/[A-Za-z0-9]{5}\?t=/);
    await page.screenshot({ path: path.join(SHOTS, 'unlocked-phone.png'), fullPage: true });
    const [download] = await Promise.all([page.waitForEvent('download'), page.locator('#files a.btn').first().click()]);
    assert.equal(fs.readFileSync((await download.path())!, 'utf8'), 'the secret');

    // The upload link adds files, but lists the bundle's files only once the password is given.
    await page.goto(manageLink);
    assert.equal(await page.locator('#files li').count(), 0, 'the manage page lists nothing while locked');
    await page.screenshot({ path: path.join(SHOTS, 'manage-locked.png'), fullPage: true });
    await page.fill('#pw', 'pw-42');
    await page.click('#unlock button');
    await page.waitForURL(/\?t=/);
    assert.deepEqual(await page.locator('#files .name').allTextContents(), ['secret.txt']);
    assert.equal(await page.locator('#files [data-delete]').count(), 1);
    await page.close();
    assert.deepEqual(problems, []);
  });

  test('large files go through tus (retried after a dropped PATCH) into the same bundle as small ones', async () => {
    const page = await newPage();
    const MiB = 1 << 20;
    const big = randomBytes(3 * MiB + 17);
    const sha = (b: Buffer): string => createHash('sha256').update(b).digest('hex');
    const tus: string[] = [];
    let dropped = 0;
    // The second PATCH never reaches the server, as if the network went away: the page retries it.
    await page.route('**/api/v1/tus/**', async (route) => {
      const req = route.request();
      if (req.method() === 'PATCH') {
        const n = tus.filter((m) => m.startsWith('PATCH')).length;
        tus.push(`PATCH ${req.headers()['upload-offset']}`);
        if (n === 1 && dropped === 0) {
          dropped++;
          return route.abort('connectionreset');
        }
      } else tus.push(req.method());
      return route.continue();
    });
    // What each API answer says is left of the hourly budget.
    const budget: Array<[string, number]> = [];
    page.on('response', (res) => {
      const left = res.headers()['x-ratelimit-remaining'];
      if (left !== undefined) budget.push([`${res.request().method()} ${new URL(res.url()).pathname}`, Number(left)]);
    });
    // The query may only lower the threshold and chunk size: 1 MiB pushes `big` through tus in pieces.
    await page.goto(`${srv.url}/?tus_threshold=${MiB}&tus_chunk=${MiB}`);
    assert.equal(await page.getAttribute('#upload', 'data-tus-threshold'), String(MiB));
    await page.setInputFiles('#pick', [
      { name: 'small.txt', mimeType: 'text/plain', buffer: Buffer.from('small file') },
      { name: 'big.bin', mimeType: 'application/octet-stream', buffer: big },
    ]);
    await page.click('#send');
    await page.locator('#result').waitFor({ state: 'visible', timeout: 60_000 });
    assert.equal(dropped, 1);
    assert.equal(tus[0], 'POST');
    assert.ok(tus.includes('HEAD'), `resumed after asking the offset: ${tus.join(', ')}`);
    assert.ok(tus.filter((m) => m.startsWith('PATCH')).length >= 5, tus.join(', '));
    // The small file's request and the big file's creation spend the budget; the big file's pieces,
    // its HEAD and its retry spend nothing more: one request per file carried by tus.
    const spent = budget[0]![1] + 1 - budget.at(-1)![1];
    assert.equal(spent, 2, budget.map(([what, left]) => `${what}: ${left}`).join(', '));
    const code = new URL(await page.inputValue('#share-link')).pathname.slice(1);
    const bundle = (await (await fetch(`${srv.url}/api/v1/bundle/${code}`)).json()) as { files: Array<{ id: number; name: string; size: number }> };
    assert.deepEqual(bundle.files.map((f) => [f.name, f.size]), [['small.txt', 10], ['big.bin', big.length]]);
    const got = Buffer.from(await (await fetch(`${srv.url}/api/v1/download/${bundle.files[1]!.id}`)).arrayBuffer());
    assert.equal(sha(got), sha(big), 'the tus upload is byte-identical');

    // The manage page appends a large file through tus with the bundle's upload token.
    const manage = new URL(await page.inputValue('#upload-link'));
    await page.unroute('**/api/v1/tus/**');
    await page.goto(`${manage.href}?tus_threshold=0&tus_chunk=${MiB}`);
    const more = randomBytes(2 * MiB + 5);
    await page.setInputFiles('#pick', [{ name: 'more.bin', mimeType: 'application/octet-stream', buffer: more }]);
    await page.click('#send');
    await page.locator('#files li', { hasText: 'more.bin' }).waitFor({ timeout: 60_000 });
    const after = (await (await fetch(`${srv.url}/api/v1/bundle/${code}`)).json()) as { files: Array<{ id: number; name: string }> };
    assert.deepEqual(after.files.map((f) => f.name), ['small.txt', 'big.bin', 'more.bin']);
    const got2 = Buffer.from(await (await fetch(`${srv.url}/api/v1/download/${after.files[2]!.id}`)).arrayBuffer());
    assert.equal(sha(got2), sha(more));
    await page.close();
    assert.deepEqual(problems, []);
  });
});

/**
 * The page opened on another address than localhost, with BASE_URL unset: a large file goes through
 * tus to that same origin (the page's CSP allows only its own), and the share link it shows names
 * that origin. The README's screenshots are taken here (`npm run screenshots`), so they show the current pages.
 */
describe(`the page from a non-localhost address (${backends()[0]})`, { skip }, () => {
  let srv: TestServer;
  let browser: Browser;
  let dir: string;

  before(async () => {
    srv = await startServer(backends()[0]!, { HOST: '0.0.0.0' });
    browser = await launchChromium();
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sl-browser-'));
  });
  after(async () => {
    await browser?.close();
    await srv?.close();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  test('70 MB through the page opened as http://127.0.0.2:PORT/, then its share link', { timeout: 240_000 }, async () => {
    const problems: string[] = [];
    const page = await browser.newPage({ viewport: { width: 1280, height: 860 } });
    page.on('console', (m) => {
      if (m.type() === 'error') problems.push(m.text());
    });
    page.on('pageerror', (e) => problems.push(e.message));
    const origin = `http://127.0.0.2:${srv.port}`;
    const big = path.join(dir, 'holiday-video.mp4');
    const size = 70 * 1000 * 1000;
    const fd = fs.openSync(big, 'w');
    const block = randomBytes(1 << 20);
    for (let at = 0; at < size; at += block.length) fs.writeSync(fd, block, 0, Math.min(block.length, size - at));
    fs.closeSync(fd);
    const tusOrigins = new Set<string>();
    page.on('request', (r) => {
      if (r.url().includes('/api/v1/tus/')) tusOrigins.add(new URL(r.url()).origin);
    });

    await page.goto(`${origin}/`);
    await page.setInputFiles('#pick', [big]);
    await page.locator('details.options summary').click();
    await page.fill('textarea[name=description]', 'Holiday video and notes');
    await page.locator('textarea[name=description]').blur();
    await page.screenshot({ path: path.join(DOC_SHOTS, 'upload-page.png') });
    await page.click('#send');
    await page.locator('#result').waitFor({ state: 'visible', timeout: 200_000 });
    assert.deepEqual([...tusOrigins], [origin], 'tus requests go to the origin the page was opened on');
    const link = await page.inputValue('#share-link');
    assert.match(link, new RegExp(`^${origin.replace(/\./g, '\\.')}/[A-Za-z0-9]{5}$`));

    await page.goto(link);
    assert.deepEqual(await page.locator('#files .name').allTextContents(), ['holiday-video.mp4']);
    assert.equal(await page.locator('.desc').textContent(), 'Holiday video and notes');
    await page.screenshot({ path: path.join(DOC_SHOTS, 'share-page.png'), clip: { x: 0, y: 0, width: 1280, height: 480 } });
    const code = new URL(link).pathname.slice(1);
    const info = (await (await fetch(`${origin}/api/v1/bundle/${code}`)).json()) as { files: Array<{ id: number; size: number }> };
    assert.equal(info.files[0]!.size, size);
    const head = await fetch(`${origin}/d/${info.files[0]!.id}`, { method: 'HEAD' });
    assert.equal(head.status, 200);
    assert.equal(head.headers.get('content-length'), String(size));
    await page.close();
    assert.deepEqual(problems, []);
  });
});
