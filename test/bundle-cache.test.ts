import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { backends, startServer, type TestServer } from './helpers/server.ts';
import { createBundleCache, type BundleInfo } from '../src/state/bundle-cache.ts';
import { waitFor } from './helpers/wait.ts';
import { call, uploaded, type Json } from './helpers/http.ts';

const bundle = (id: number, files = 1, expiresAt: Date | null = null): BundleInfo =>
  ({
    id,
    short_code: `c${id}`,
    expires_at: expiresAt,
    max_downloads: null,
    files: Array.from({ length: files }, (_, i) => ({ id: i + 1, name: `f${i}`, size: 1, mime_type: 'text/plain' })),
  }) as unknown as BundleInfo;

describe('bundle cache (unit)', () => {
  test('a bundle with a download limit is read through, never kept', async () => {
    let loads = 0;
    const cache = createBundleCache({ load: async (code) => (loads++, { ...bundle(Number(code.slice(1))), max_downloads: 2 }), ttlMs: 60_000, maxWeight: 100 });
    await cache.get('c1');
    await cache.get('c1');
    assert.equal(loads, 2);
  });

  test('serves from memory until the bundle is announced changed', async () => {
    let loads = 0;
    const cache = createBundleCache({ load: async (code) => (loads++, bundle(Number(code.slice(1)))), ttlMs: 60_000, maxWeight: 100 });
    await cache.get('c1');
    await cache.get('c1');
    assert.equal(loads, 1);
    cache.invalidate(2); // another bundle
    await cache.get('c1');
    assert.equal(loads, 1);
    cache.invalidate(1);
    await cache.get('c1');
    assert.equal(loads, 2);
    cache.invalidate(null);
    await cache.get('c1');
    assert.equal(loads, 3);
  });

  test('a read that raced a change is returned but never stored', async () => {
    let loads = 0;
    let release: () => void = () => {};
    const cache = createBundleCache({
      load: async () => {
        loads++;
        if (loads === 1) await new Promise<void>((r) => (release = r));
        return bundle(1);
      },
      ttlMs: 60_000,
      maxWeight: 100,
    });
    const first = cache.get('c1');
    await new Promise((r) => setImmediate(r));
    cache.invalidate(1); // committed while the first read was on its way
    // A miss after the change does not join the read that predates it.
    await cache.get('c1');
    assert.equal(loads, 2);
    release();
    await first;
    await cache.get('c1');
    assert.equal(loads, 2, 'the later read is the one kept');
  });

  test('concurrent misses share one read', async () => {
    let loads = 0;
    const cache = createBundleCache({ load: async () => (loads++, bundle(1)), ttlMs: 60_000, maxWeight: 100 });
    await Promise.all([cache.get('c1'), cache.get('c1'), cache.get('c1')]);
    assert.equal(loads, 1);
  });

  test('unknown codes are not cached; expired bundles and old entries are read again', async () => {
    let t = 1_000_000;
    let loads = 0;
    let result: BundleInfo | undefined;
    const cache = createBundleCache({ load: async () => (loads++, result), ttlMs: 2_000, maxWeight: 100, now: () => t });
    assert.equal(await cache.get('c1'), undefined);
    assert.equal(await cache.get('c1'), undefined);
    assert.equal(loads, 2);
    result = bundle(1, 1, new Date(t + 500));
    await cache.get('c1');
    await cache.get('c1');
    assert.equal(loads, 3);
    t += 500; // now expired: never served from memory
    result = undefined;
    assert.equal(await cache.get('c1'), undefined);
    assert.equal(loads, 4);
    result = bundle(1);
    await cache.get('c1');
    t += 1_999;
    await cache.get('c1');
    assert.equal(loads, 5);
    t += 1;
    await cache.get('c1');
    assert.equal(loads, 6, 'read again after the TTL');
  });

  test('holds at most maxWeight (a bundle weighs 1 + its files), oldest out first', async () => {
    const cache = createBundleCache({ load: async (code) => bundle(Number(code.slice(1)), 4), ttlMs: 60_000, maxWeight: 40 });
    for (let i = 1; i <= 10; i++) await cache.get(`c${i}`);
    assert.equal(cache.size, 8);
    const big = createBundleCache({ load: async () => bundle(1, 20), ttlMs: 60_000, maxWeight: 40 });
    await big.get('c1');
    assert.equal(big.size, 0, 'a bundle heavier than a quarter of the bound is not kept');
  });

  test('ttlMs 0 reads through', async () => {
    let loads = 0;
    const cache = createBundleCache({ load: async () => (loads++, bundle(1)), ttlMs: 0, maxWeight: 0 });
    await cache.get('c1');
    await cache.get('c1');
    assert.equal(loads, 2);
  });
});

/** A bundle of small random files, or files added to one with its upload token. */
const bundleOf = (srv: TestServer, names: string[], token?: string): Promise<Json> =>
  uploaded(srv, names.map((name) => ({ name, data: randomBytes(100) })), { path: token ? `/api/v1/upload/${token}` : undefined });

const info = (srv: TestServer, code: string) => call(srv, 'GET', `/api/v1/bundle/${code}`);

/** Well under the 2 s TTL: a change seen within it proves the announcement, not the TTL. */
const SOON_MS = 1_000;

for (const backend of backends()) {
  describe(`bundle info cache (${backend})`, () => {
    let srv: TestServer;
    before(async () => {
      srv = await startServer(backend);
    });
    after(async () => {
      await srv?.close();
    });

    test('changes through the API show at once: append, file delete, bundle delete', async () => {
      const up = await bundleOf(srv, ['a.txt']);
      for (let i = 0; i < 3; i++) assert.equal(((await info(srv, up.short_code)).json.files as unknown[]).length, 1);
      await bundleOf(srv, ['b.txt'], up.upload_token);
      assert.equal(((await info(srv, up.short_code)).json.files as unknown[]).length, 2);
      const st = await call(srv, 'GET', `/api/v1/bundle/${up.short_code}/status`);
      assert.equal(st.json.total_size_bytes, 200);
      const del = await call(srv, 'DELETE', `/api/v1/file/${up.files[0]!.id}`, { headers: { authorization: `Bearer ${up.upload_token}` } });
      assert.equal(del.status, 200, JSON.stringify(del.json));
      const after = await info(srv, up.short_code);
      assert.equal(after.json.file_count, 1);
      assert.equal((await call(srv, 'GET', `/api/v1/bundle/${up.short_code}/status`)).json.total_size_bytes, 100);
      const gone = await call(srv, 'DELETE', `/api/v1/bundle/${up.short_code}`, { headers: { 'x-upload-token': up.upload_token } });
      assert.equal(gone.status, 200);
      assert.equal((await info(srv, up.short_code)).status, 404);
      assert.equal((await call(srv, 'GET', `/api/v1/bundle/${up.short_code}/status`)).status, 404);
    });

    test('a change made by another process (the CLI) drops the cached info', async () => {
      const up = await bundleOf(srv, ['a.txt']);
      for (let i = 0; i < 3; i++) assert.equal((await info(srv, up.short_code)).status, 200);
      const r = await srv.cli(['bundles', 'expire', up.short_code]);
      assert.equal(r.code, 0, r.stderr);
      await waitFor('bundle info 404 after the CLI expired the bundle', async () => (await info(srv, up.short_code)).status === 404, SOON_MS);
      const st = await call(srv, 'GET', `/api/v1/bundle/${up.short_code}/status`);
      assert.equal(st.json.is_expired, true);
    });

    test('a change made in SQL by hand drops the cached info', async () => {
      const up = await bundleOf(srv, ['a.txt']);
      for (let i = 0; i < 3; i++) assert.equal((await info(srv, up.short_code)).status, 200);
      await srv.sql`update bundles set max_size_bytes = 12345 where short_code = ${up.short_code}`;
      await waitFor('the new max_size_bytes', async () => (await info(srv, up.short_code)).json.max_size_bytes === 12345, SOON_MS);
      await srv.sql`delete from bundles where short_code = ${up.short_code}`;
      await waitFor('bundle info 404 after the row was deleted', async () => (await info(srv, up.short_code)).status === 404, SOON_MS);
    });
  });
}
