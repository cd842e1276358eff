import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import type { Browser, Page } from 'playwright-core';
import { backends, startServer, type TestServer } from './helpers/server.ts';
import { chromiumSkip, launchChromium } from './helpers/browser.ts';
import { mintKey } from './access-util.ts';
import { bearer, call, file, uploaded, type Json } from './helpers/http.ts';

const skip = chromiumSkip('the sharing pages in a browser (test/sharing-browser.test.ts)');

describe(`sharing pages in Chromium (${backends()[0]})`, { skip }, () => {
  let srv: TestServer;
  let browser: Browser;
  const problems: string[] = [];
  before(async () => {
    // A small anonymous cap, so the upload page's check at pick time costs little to cross.
    srv = await startServer(backends()[0]!, { ANON_MAX_BUNDLE_BYTES: String(1024 * 1024) });
    browser = await launchChromium();
  });
  after(async () => {
    await browser?.close();
    await srv?.close();
  });
  async function newPage(): Promise<Page> {
    const page = await browser.newPage({ viewport: { width: 1280, height: 860 } });
    // CSP violations and script errors surface as console errors: none may happen.
    page.on('console', (m) => {
      if (m.type() === 'error' && !/Failed to load resource/.test(m.text())) problems.push(m.text());
    });
    page.on('pageerror', (e) => problems.push(e.message));
    return page;
  }

  test('upload page: a Premium key pasted once is kept, unlocks the vanity field, names the bundle; a download limit', async () => {
    const key = await mintKey(srv, 'premium');
    const page = await newPage();
    await page.goto(`${srv.url}/`);
    await page.locator('details.options summary').click();
    assert.equal(await page.locator('#vanity-row').isVisible(), false, 'no key: no vanity field');
    const offered = (): Promise<string[]> => page.$eval('#expiry', (s) => [...(s as HTMLSelectElement).options].filter((o) => !o.disabled).map((o) => o.value));
    assert.deepEqual(await offered(), ['', '1', '2', '3'], 'no key: up to the anonymous expiry');
    await page.fill('#api-key', key);
    await page.locator('#api-key').dispatchEvent('change');
    await page.locator('#vanity-row').waitFor({ state: 'visible' });
    await page.reload();
    await page.locator('details.options summary').click();
    assert.equal(await page.inputValue('#api-key'), key, 'kept in the browser');
    assert.ok(!page.url().includes(key));
    await page.locator('#vanity-row').waitFor({ state: 'visible' });
    await page.fill('input[name=vanity]', 'browser-named');
    await page.fill('input[name=max_downloads]', '3');
    assert.deepEqual(await offered(), ['', '1', '2', '3', '7', '14', '30', '90', '365', '3650'], 'Premium: up to ten years');
    assert.equal(await page.locator('#expiry option[value=""]').innerText(), 'Default (never expires)');
    await page.selectOption('#expiry', '14');
    await page.setInputFiles('#pick', [{ name: 'a.txt', mimeType: 'text/plain', buffer: Buffer.from('page upload') }]);
    await page.click('#send');
    await page.locator('#result').waitFor({ state: 'visible' });
    assert.match(await page.inputValue('#share-link'), /\/browser-named$/);
    const mine = (await call(srv, 'GET', '/api/v1/my/bundles', { headers: bearer(key) })).json.bundles as Json[];
    assert.equal(mine[0].vanity_url, '/browser-named');
    assert.equal(mine[0].max_downloads, 3);
    const days = (Date.parse(`${mine[0].expires_at.replace(' ', 'T')}Z`) - Date.now()) / 86_400_000;
    assert.ok(days > 13.99 && days <= 14, mine[0].expires_at);
    const share = await newPage();
    await share.goto(`${srv.url}/browser-named`);
    assert.match(await share.locator('#files').innerText(), /3 downloads left/);
    assert.deepEqual(problems, []);
  });

  test('a password-protected, limited bundle shows the downloads left once unlocked; the report form has one field per line', async () => {
    const b = await uploaded(srv, [file('a.txt', 'limited and locked')], { fields: { access_password: 'pw-7', max_downloads: '3' } });
    const page = await newPage();
    await page.goto(`${srv.url}/${b.short_code}`);
    await page.fill('#pw', 'pw-7');
    await page.click('#unlock button');
    await page.locator('#unlocked').waitFor({ state: 'visible' });
    assert.match(await page.locator('#files').innerText(), /3 downloads left/);

    await page.goto(`${srv.url}/report/${b.short_code}`);
    const box = async (sel: string): Promise<{ x: number; y: number; height: number }> => (await page.locator(sel).boundingBox())!;
    const [reason, details, contact] = [await box('select[name=reason]'), await box('textarea[name=details]'), await box('input[name=contact]')];
    assert.equal(reason.x, details.x, 'the reason and the details start at the same left edge');
    assert.ok(reason.y + reason.height <= details.y && details.y + details.height <= contact.y, 'reason, details and contact each on a line of its own');
    assert.deepEqual(problems, []);
  });

  test('upload page: files over the cap are named when picked, with the cap and how to get more, and are not sent', async () => {
    const page = await newPage();
    await page.goto(`${srv.url}/`);
    await page.setInputFiles('#pick', [{ name: 'big.bin', mimeType: 'application/octet-stream', buffer: Buffer.alloc(1536 * 1024) }]);
    await page.locator('#error').waitFor({ state: 'visible' });
    assert.equal(await page.locator('#error').innerText(), 'These files total 1.5 MB; a bundle without an API key holds at most 1 MB. An API key\u2019s plan holds more (see /api-keys).');
    assert.equal(await page.isDisabled('#send'), true);
    await page.locator('#queue button.x').click();
    assert.equal(await page.locator('#error').isVisible(), false, 'removing the file clears it');
    assert.deepEqual(problems, []);
  });

  test('drop page: files by multipart and by tus, progress, a thank-you that names only what was sent', async () => {
    const key = await mintKey(srv, 'starter');
    const r = await call(srv, 'POST', '/api/v1/my/requests', {
      headers: { 'content-type': 'application/json', ...bearer(key) },
      body: JSON.stringify({ label: 'Send me the scans', max_files: 5 }),
    });
    const page = await newPage();
    // A low threshold sends the larger file through tus in several chunks.
    await page.goto(`${srv.url}${r.json.request_url}?tus_threshold=300000&tus_chunk=262144`);
    assert.match(await page.locator('h1').innerText(), /Send me the scans/);
    const big = randomBytes(700_000);
    await page.setInputFiles('#pick', [
      { name: 'small.txt', mimeType: 'text/plain', buffer: Buffer.from('small') },
      { name: 'big.bin', mimeType: 'application/octet-stream', buffer: big },
    ]);
    await page.click('#send');
    await page.locator('#thanks').waitFor({ state: 'visible' });
    const text = await page.locator('#thanks').innerText();
    assert.match(text, /small\.txt/);
    assert.match(text, /big\.bin/);
    const html = await page.content();
    const list = (await call(srv, 'GET', '/api/v1/my/requests', { headers: bearer(key) })).json.requests as Json[];
    assert.ok(!html.includes(list[0].short_code), 'the bundle\'s code is not on the page');
    const mine = (await call(srv, 'GET', '/api/v1/my/bundles', { headers: bearer(key) })).json.bundles as Json[];
    const b = mine.find((x) => x.short_code === list[0].short_code);
    assert.deepEqual(b.files.map((f: Json) => f.name).sort(), ['big.bin', 'small.txt']);
    const got = await call(srv, 'GET', b.files.find((f: Json) => f.name === 'big.bin').download_url, { headers: bearer(key) });
    assert.equal(got.status, 200);
    assert.deepEqual(problems, []);
  });
});
