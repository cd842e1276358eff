import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { createRequire } from 'node:module';
import type { Browser, Page } from 'playwright-core';
import type * as UppyBundle from 'uppy';
import { backends, startServer, type TestServer } from './helpers/server.ts';
import { chromiumSkip, launchChromium } from './helpers/browser.ts';

/**
 * Uppy's own browser bundle (Core and its Tus plugin, as a site would load it) uploads into Sluice
 * from Sluice's page in Chromium, with the anonymous hourly budget as shipped: a whole file, however
 * many pieces and retries it takes, spends one request of it.
 */
const skip = chromiumSkip("Uppy's tus plugin in a browser (test/uppy.test.ts)");
const UPPY_BUNDLE = createRequire(import.meta.url).resolve('uppy/dist/uppy.min.js');
const MiB = 1 << 20;
const ANON_PER_HOUR = 60;

interface PageUpload {
  successful: number;
  failed: string[];
  uploadURL: string;
  shortCode: string | null;
  fileId: string | null;
  uploadToken: string | null;
  sha256: string;
}

/** Makes `size` deterministic bytes in the page, hashes them there, and sends them with Uppy's Tus plugin. */
function uppyUpload(page: Page, o: { size: number; chunkSize: number; retryDelays?: number[] }): Promise<PageUpload> {
  return page.evaluate(async ({ size, chunkSize, retryDelays }) => {
    const bytes = new Uint8Array(size);
    let x = 0x2545f491;
    for (let i = 0; i < size; i++) {
      x ^= x << 13;
      x ^= x >>> 17;
      x ^= x << 5;
      bytes[i] = x & 0xff;
    }
    const digest = new Uint8Array(await crypto.subtle.digest('SHA-256', bytes));
    const sha256 = [...digest].map((b) => b.toString(16).padStart(2, '0')).join('');
    const { Uppy, Tus } = (globalThis as unknown as { Uppy: typeof UppyBundle }).Uppy;
    const uppy = new Uppy();
    uppy.use(Tus, { endpoint: `${location.origin}/api/v1/tus/`, chunkSize, ...(retryDelays ? { retryDelays } : {}) });
    uppy.addFile({ name: 'data.bin', type: 'application/octet-stream', data: new Blob([bytes]) });
    // The last tus answer (the PATCH that carried the final byte) names the bundle and the file. Its
    // headers are read as Uppy reports the success, before it lets go of the request.
    const named: Record<string, string | null> = {};
    uppy.on('upload-success', (_file, res) => {
      for (const h of ['Sluice-Short-Code', 'Sluice-File-Id', 'Sluice-Upload-Token']) named[h] = (res?.body?.xhr as XMLHttpRequest | undefined)?.getResponseHeader(h) ?? null;
    });
    const result = await uppy.upload();
    const ok = result?.successful ?? [];
    return {
      successful: ok.length,
      failed: (result?.failed ?? []).map((f) => String(f.error)),
      uploadURL: ok[0]?.response?.uploadURL ?? '',
      shortCode: named['Sluice-Short-Code'] ?? null,
      fileId: named['Sluice-File-Id'] ?? null,
      uploadToken: named['Sluice-Upload-Token'] ?? null,
      sha256,
    };
  }, o);
}

describe(`Uppy's tus plugin in Chromium (${backends()[0]})`, { skip }, () => {
  let browser: Browser;

  before(async () => {
    browser = await launchChromium();
  });
  after(async () => {
    await browser?.close();
  });

  /** A fresh server per case, so each starts with the whole hourly budget. */
  async function withServer(fn: (srv: TestServer, page: Page, problems: string[], tus: string[], trace: string[]) => Promise<void>): Promise<void> {
    const srv = await startServer(backends()[0]!, { RATE_LIMIT_ANON_PER_HOUR: String(ANON_PER_HOUR) });
    // The page's CSP allows only its own scripts: Uppy's bundle is injected as a site would include it.
    const context = await browser.newContext({ bypassCSP: true });
    try {
      const page = await context.newPage();
      const problems: string[] = [];
      page.on('console', (m) => {
        if (m.type() === 'error' && !/Failed to load resource/.test(m.text())) problems.push(m.text());
      });
      page.on('pageerror', (e) => problems.push(e.message));
      const tus: string[] = [];
      page.on('request', (r) => {
        if (r.url().includes('/api/v1/tus/')) tus.push(r.method());
      });
      // Every tus answer and failure, for the failure messages.
      const trace: string[] = [];
      page.on('response', (r) => {
        if (r.url().includes('/api/v1/tus/')) trace.push(`${r.request().method()} ${r.status()}`);
      });
      page.on('requestfailed', (r) => {
        if (r.url().includes('/api/v1/tus/')) trace.push(`${r.method()} failed: ${r.failure()?.errorText}`);
      });
      await page.goto(`${srv.url}/`);
      await page.addScriptTag({ path: UPPY_BUNDLE });
      await fn(srv, page, problems, tus, trace);
    } finally {
      await context.close();
      await srv.close();
    }
  }

  /** The upload left a file with the page's bytes, and spent one request of the hourly budget. */
  async function checkLanded(srv: TestServer, got: PageUpload, size: number, trace: string[]): Promise<void> {
    assert.deepEqual(got.failed, [], trace.join(', '));
    assert.equal(got.successful, 1);
    assert.match(got.uploadURL, new RegExp(`^${srv.url}/api/v1/tus/[0-9a-f]{32}$`));
    assert.match(got.shortCode ?? '', /^[A-Za-z0-9]{5}$/, 'the final PATCH names the bundle');
    assert.match(got.fileId ?? '', /^\d+$/);
    assert.ok(got.uploadToken, 'a new bundle shows its upload token once');
    // This request spends one more: after the upload, exactly two of the budget are gone.
    const res = await fetch(`${srv.url}/api/v1/bundle/${got.shortCode}`);
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('x-ratelimit-limit'), String(ANON_PER_HOUR));
    assert.equal(res.headers.get('x-ratelimit-remaining'), String(ANON_PER_HOUR - 2), 'the whole upload cost one request');
    const bundle = (await res.json()) as { files: Array<{ id: number; name: string; size: number }> };
    assert.deepEqual(bundle.files.map((f) => [String(f.id), f.name, f.size]), [[got.fileId, 'data.bin', size]]);
    const body = Buffer.from(await (await fetch(`${srv.url}/api/v1/download/${got.fileId}`)).arrayBuffer());
    assert.equal(body.length, size);
    assert.equal(createHash('sha256').update(body).digest('hex'), got.sha256, 'the download is the page\'s bytes');
  }

  test('a 32 MiB file in 1 MiB pieces', { timeout: 180_000 }, async () => {
    await withServer(async (srv, page, problems, tus, trace) => {
      const size = 32 * MiB + 123;
      const got = await uppyUpload(page, { size, chunkSize: MiB });
      assert.equal(tus.filter((m) => m === 'POST').length, 1, `${tus.join(', ')} / ${trace.join(', ')}`);
      assert.equal(tus.filter((m) => m === 'PATCH').length, 33, `${tus.join(', ')} / ${trace.join(', ')}`);
      await checkLanded(srv, got, size, trace);
      assert.deepEqual(problems, [], trace.join(', '));
    });
  });

  test('a 64 MiB file in 8 MiB pieces, one of them dropped and retried', { timeout: 180_000 }, async () => {
    await withServer(async (srv, page, problems, tus, trace) => {
      const size = 64 * MiB + 7;
      let patches = 0;
      // The third PATCH never reaches the server, as if the network went away: Uppy asks the offset and resumes.
      await page.route('**/api/v1/tus/**', (route) => {
        if (route.request().method() === 'PATCH' && ++patches === 3) return route.abort('connectionreset');
        return route.continue();
      });
      const got = await uppyUpload(page, { size, chunkSize: 8 * MiB, retryDelays: [0, 200, 1000] });
      assert.ok(tus.includes('HEAD'), `resumed after asking the offset: ${trace.join(', ')}`);
      assert.equal(tus.filter((m) => m === 'PATCH').length, 10, `${tus.join(', ')} / ${trace.join(', ')}`);
      await checkLanded(srv, got, size, trace);
      assert.deepEqual(problems, [], trace.join(', '));
    });
  });
});
