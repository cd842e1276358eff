import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { backends, startServer, storedPaths, type TestServer } from './helpers/server.ts';
import { assertError, DAY_MS, from, fromSqlUtc, GIB, ISO_TS, isolateIds, KEY_RE, mintKey, randomLoopback, SQL_TS } from './access-util.ts';
import { bearer, call, upload, uploaded, type Json, type Opts } from './helpers/http.ts';

/** This server's anonymous cap, small so that a keyed upload can go past it. */
const ANON_MAX = 1000;
// The interface writes "5 GB" for 5368709120 bytes, so its GB is 2^30 bytes on every plan row.
const PLAN = {
  starter: { days: 7, bytes: 5 * GIB, perHour: 300 },
  power: { days: 21, bytes: 50 * GIB, perHour: 1200 },
  max: { days: 30, bytes: 100 * GIB, perHour: 1200 },
  premium: { days: null, bytes: 10 * GIB, perHour: 1200 },
} as const;
const UNKNOWN_KEY = `sk_${'A'.repeat(43)}`;

for (const backend of backends()) {
  describe(`API keys: CLI, plans, states, keyed rate limit, /my/usage, /my delete (${backend})`, () => {
    let srv: TestServer;
    let pub: Json;
    before(async () => {
      srv = await startServer(backend, { HOST: '0.0.0.0', ANON_MAX_BUNDLE_BYTES: String(ANON_MAX) });
      await isolateIds(srv);
      pub = await uploaded(srv, [{ name: 'pub.txt', data: 'public' }]);
    });
    after(() => srv?.close());

    const get = (p: string, o: Opts = {}) => call(srv, 'GET', p, o);
    const lastKeyId = async (): Promise<string> => String((await srv.sql`select max(id) as id from api_keys`)[0]!.id);
    /** The /my/* endpoints and an upload all refuse `headers` with 401. */
    async function refusedEverywhere(headers: Record<string, string>, what: string): Promise<void> {
      assertError(await upload(srv, [{ name: 'a.txt', data: 'a' }], { key: headers.authorization?.slice(7) }), 401, `${what}: upload`);
      assertError(await get('/api/v1/my/bundles', { headers }), 401, `${what}: /my/bundles`);
      assertError(await get('/api/v1/my/usage', { headers }), 401, `${what}: /my/usage`);
      assertError(await call(srv, 'DELETE', `/api/v1/my/bundles/${pub.short_code}`, { headers }), 401, `${what}: DELETE /my/bundles`);
    }
    async function listRow(key: string): Promise<string> {
      const r = await srv.cli(['keys', 'list']);
      assert.equal(r.code, 0, r.stderr);
      assert.ok(!r.stdout.includes(key), 'list never shows a whole key');
      const rows = r.stdout.split('\n').filter((l) => l.includes(key.slice(0, 12)));
      assert.equal(rows.length, 1, r.stdout);
      return rows[0]!;
    }

    test('keys create prints only the key; keys list shows it; the database keeps only a hash', async () => {
      const r = await srv.cli(['keys', 'create', '--plan', 'starter', '--label', 'ci key', '--email', 'ops@example.com', '--days', '3']);
      assert.equal(r.code, 0, r.stderr);
      const key = r.stdout.trim();
      assert.equal(r.stdout, `${key}\n`);
      assert.match(key, KEY_RE);
      assert.doesNotMatch(key, /^[0-9a-f]{64}$/);
      const second = await mintKey(srv, 'power', ['--label=other']);
      assert.notEqual(second, key);
      const row = await listRow(key);
      for (const word of ['ci key', 'starter', 'active']) assert.ok(row.includes(word), `${word} in ${row}`);
      assert.match(row, /\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}/);
      assert.ok((await listRow(second)).includes('power'));

      const rows = await srv.sql`select * from api_keys`;
      for (const k of [key, second]) {
        const secret = k.slice(12); // everything after the published prefix
        for (const row of rows) {
          for (const [col, v] of Object.entries(row)) {
            const text = Buffer.isBuffer(v) ? `${v.toString('latin1')} ${v.toString('hex')} ${v.toString('base64')}` : String(v);
            assert.ok(!text.includes(secret), `api_keys.${col} holds the key`);
          }
        }
      }
    });

    test('keys CLI: bad input exits 1 with one line on stderr', async () => {
      const cases = [
        ['keys', 'revoke', 'sk_nothing_0'],
        ['keys', 'create', '--plan', 'gold'],
        ['keys', 'create'],
        ['keys', 'create', '--plan', 'starter', '--color', 'red'],
        ['keys', 'create', '--plan', 'starter', '--days', '0'],
        ['keys', 'create', '--plan', 'starter', '--email', 'not-an-address'],
        ['keys', 'create', '--plan', 'starter', '--plan', 'power'],
        ['keys', 'create', '--plan', 'starter', '--label', 'two\nlines'],
        ['keys', 'create', '--plan', 'starter', '--label', 'a\ttab'],
      ];
      for (const args of cases) {
        const r = await srv.cli(args);
        assert.equal(r.code, 1, `${args.join(' ')}: ${r.stdout}`);
        assert.equal(r.stdout, '', args.join(' '));
        assert.match(r.stderr, /^[^\n]+\n$/, `${args.join(' ')}: ${JSON.stringify(r.stderr)}`);
      }
      const [{ n }] = (await srv.sql`select count(*)::int as n from api_keys where plan in ('starter', 'power') and (label is null or label ~ '[\t\n]')`) as unknown as [{ n: number }];
      assert.equal(n, 0, 'no key was minted by a refused command');
      // Piped (as here), keys list prints the key rows alone: every line is a key.
      const list = await srv.cli(['keys', 'list']);
      assert.equal(list.code, 0, list.stderr);
      for (const line of list.stdout.trimEnd().split('\n')) assert.match(line, /^sk_[A-Za-z0-9]{9}\t/, line);
    });

    test('each plan: size cap, expiry and rate in upload, bundle info, status and /my/usage', async () => {
      const anon = await uploaded(srv, [{ name: 'anon.txt', data: 'anon' }]);
      assert.equal((await get(`/api/v1/bundle/${anon.short_code}/status`)).json.max_size_bytes, ANON_MAX);
      assert.ok(Math.abs(Date.parse(anon.expires_at) - Date.now() - 3 * DAY_MS) < 5000);
      const got: Record<string, unknown> = {};
      for (const plan of Object.keys(PLAN)) {
        const key = await mintKey(srv, plan);
        const t0 = Date.now();
        const up = await uploaded(srv, [{ name: 'p.txt', data: plan }], { key });
        const info = (await get(`/api/v1/bundle/${up.short_code}`)).json;
        const status = (await get(`/api/v1/bundle/${up.short_code}/status`)).json;
        const usage = (await get('/api/v1/my/usage', { headers: bearer(key) })).json.key;
        assert.equal(info.max_size_bytes, status.max_size_bytes, `${plan}: info and status agree`);
        assert.equal(status.space_remaining, status.max_size_bytes - plan.length);
        assert.equal(usage.max_bundle_size_bytes, status.max_size_bytes, `${plan}: /my/usage and the bundle agree`);
        if (up.expires_at === null) {
          assert.deepEqual([info.expires_at, status.expires_at, status.is_expired], [null, null, false], plan);
        } else {
          assert.match(up.expires_at, ISO_TS);
          assert.equal(fromSqlUtc(info.expires_at), Date.parse(up.expires_at), `${plan}: bundle info agrees`);
          assert.equal(status.expires_at, info.expires_at);
        }
        const days = up.expires_at === null ? null : Math.round((Date.parse(up.expires_at) - t0) / 60_000) / 1440;
        got[plan] = { days, bytes: status.max_size_bytes, perHour: usage.rate_limit_per_hour, usageDays: usage.default_expiry_days };
      }
      const want = Object.fromEntries(Object.entries(PLAN).map(([p, w]) => [p, { ...w, usageDays: w.days }]));
      assert.deepEqual(got, want);
    });

    test('a keyed upload follows the keyed tier: past the anonymous cap, and its appends too', async () => {
      const key = await mintKey(srv);
      const big = [{ name: 'big.bin', data: Buffer.alloc(ANON_MAX * 2, 7) }];
      assertError(await upload(srv, big), 400, 'anonymous over its cap');
      const up = await uploaded(srv, big, { key });
      const more = await upload(srv, big, { path: `/api/v1/upload/${up.upload_token}` });
      assert.equal(more.status, 200, more.text);
      assert.equal((await get(`/api/v1/bundle/${up.short_code}/status`)).json.total_size_bytes, ANON_MAX * 4);
    });

    test('an expired key: 401 on uploads and /my/*, ignored elsewhere; its bundles stay reachable', async () => {
      const key = await mintKey(srv, 'starter', ['--days', '1']);
      const id = await lastKeyId();
      const mine = await uploaded(srv, [{ name: 'm.txt', data: 'mine' }], { key });
      assert.equal((await get('/api/v1/my/usage', { headers: bearer(key) })).status, 200);
      await srv.sql`update api_keys set expires_at = now() - interval '1 second' where id = ${id}`;
      await refusedEverywhere(bearer(key), 'expired key');
      const info = await get(`/api/v1/bundle/${pub.short_code}`, { headers: bearer(key) });
      assert.equal(info.status, 200);
      assert.equal(info.json.files.length, 1);
      assert.equal((await get(`/api/v1/bundle/${mine.short_code}`)).json.files.length, 1);
      assert.ok((await listRow(key)).includes('expired'));
    });

    test('a revoked key: 401 on uploads and /my/*; other keys keep working', async () => {
      const key = await mintKey(srv);
      const keep = await mintKey(srv);
      assert.equal((await get('/api/v1/my/usage', { headers: bearer(key) })).status, 200);
      const r = await srv.cli(['keys', 'revoke', key.slice(0, 12)]);
      assert.equal(r.code, 0, r.stderr);
      await refusedEverywhere(bearer(key), 'revoked key');
      assert.equal((await get(`/api/v1/bundle/${pub.short_code}`, { headers: bearer(key) })).status, 200);
      assert.ok((await listRow(key)).includes('revoked'));
      assert.equal((await get('/api/v1/my/usage', { headers: bearer(keep) })).status, 200);
    });

    test('key prefixes are unique, so revoking one prefix revokes exactly one key', async () => {
      // 9 of the 12 prefix characters are random, and the database refuses a duplicate outright.
      const a = await mintKey(srv);
      const b = await mintKey(srv);
      assert.notEqual(a.slice(0, 12), b.slice(0, 12));
      await assert.rejects(srv.sql`update api_keys set prefix = ${a.slice(0, 12)} where id = ${await lastKeyId()}`);
      await srv.cli(['keys', 'revoke', a.slice(0, 12)]);
      const alive = await Promise.all([a, b].map(async (k) => (await get('/api/v1/my/usage', { headers: bearer(k) })).status === 200));
      assert.deepEqual(alive, [false, true]);
    });

    test('an invalid Bearer: 401 on uploads and /my/*, ignored on bundle info and downloads', async () => {
      for (const bad of [UNKNOWN_KEY, 'not-a-key', 'sk_short', 'a'.repeat(64)]) {
        await refusedEverywhere(bearer(bad), bad);
        const info = await get(`/api/v1/bundle/${pub.short_code}`, { headers: bearer(bad) });
        assert.equal(info.status, 200, info.text);
        assert.equal(info.json.files.length, 1);
        assert.equal((await get(pub.files[0].download_url, { headers: bearer(bad) })).text, 'public');
      }
      for (const p of ['/api/v1/my/bundles', '/api/v1/my/usage']) assertError(await get(p), 401, `${p} without a key`);
    });

    test('a 64-hex Bearer on DELETE /api/v1/file is the upload token', async () => {
      const b = await uploaded(srv, [{ name: 'a.txt', data: 'a' }, { name: 'b.txt', data: 'b' }]);
      const [fa, fb] = b.files as [Json, Json];
      const key = await mintKey(srv);
      assertError(await call(srv, 'DELETE', `/api/v1/file/${fa.id}`, { headers: bearer('0'.repeat(64)) }), 403, 'wrong token');
      assertError(await call(srv, 'DELETE', `/api/v1/file/${fa.id}`, { headers: bearer(key) }), 403, 'an API key is no upload token');
      const r = await call(srv, 'DELETE', `/api/v1/file/${fa.id}`, { headers: bearer(b.upload_token) });
      assert.equal(r.status, 200, r.text);
      assert.deepEqual(r.json, { success: true, deleted_file_id: fa.id });
      assertError(await get(fa.download_url), 404, 'deleted file');
      assert.deepEqual((await get(`/api/v1/bundle/${b.short_code}`)).json.files.map((f: Json) => f.id), [fb.id]);
    });

    test('keyed rate limit: the plan\'s budget, one bucket per key across source addresses', async () => {
      const [starter, power] = [await mintKey(srv, 'starter'), await mintKey(srv, 'power')];
      const [a, b] = [from(randomLoopback()), from(randomLoopback())];
      const hit = async (key: string | null, agent = a): Promise<[string, string, number]> => {
        const r = await get(`/api/v1/bundle/${pub.short_code}`, { headers: key ? bearer(key) : {}, agent });
        return [String(r.headers['x-ratelimit-limit']), String(r.headers['x-ratelimit-remaining']), r.status];
      };
      assert.deepEqual(await hit(starter, a), ['300', '299', 200]);
      assert.deepEqual(await hit(starter, b), ['300', '298', 200], 'the other address spends the same bucket');
      assert.deepEqual(await hit(power, b), ['1200', '1199', 200]);
      assert.equal((await hit(UNKNOWN_KEY, b))[0], '1000000', 'an invalid key counts as anonymous');
      const up = await upload(srv, [{ name: 'r.txt', data: 'r' }], { key: starter, agent: b });
      assert.deepEqual([up.headers['x-ratelimit-limit'], up.headers['x-ratelimit-remaining']], ['300', '297']);
      for (let i = 296; i >= 0; i--) assert.deepEqual(await hit(starter, i % 2 ? a : b), ['300', String(i), 200]);
      const over = await get('/api/v1/my/usage', { headers: bearer(starter), agent: from(randomLoopback()) });
      assertError(over, 429, 'a third address once the key is spent');
      assert.ok(Number(over.headers['retry-after']) > 0);
      assertError(await upload(srv, [{ name: 'r.txt', data: 'r' }], { key: starter }), 429, 'upload with the spent key');
      assert.equal((await hit(null, a))[2], 200, 'the address itself is not limited');
      await Promise.all([a.close(), b.close()]);
    });

    test('/my/usage: the key record and totals of its live bundles', async () => {
      const key = await mintKey(srv, 'power', ['--label', 'usage label']);
      const b1 = await uploaded(srv, [{ name: 'x', data: 'abc' }], { key });
      await uploaded(srv, [{ name: 'y', data: 'abcd' }, { name: 'z', data: 'abcde' }], { key });
      await uploaded(srv, [{ name: 'o', data: 'other key' }], { key: await mintKey(srv) });
      const usage = async (): Promise<Json> => {
        const r = await get('/api/v1/my/usage', { headers: bearer(key) });
        assert.equal(r.status, 200, r.text);
        assert.equal(r.json.success, true);
        assert.ok(!r.text.includes(key));
        return r.json;
      };
      const u = await usage();
      assert.equal(u.key.label, 'usage label');
      assert.equal(u.key.prefix, key.slice(0, 12));
      for (const f of ['created_at', 'last_used_at']) {
        assert.match(u.key[f], SQL_TS, f);
        assert.ok(Math.abs(fromSqlUtc(u.key[f]) - Date.now()) < 120_000, `${f}: ${u.key[f]}`);
      }
      assert.deepEqual([u.key.rate_limit_per_hour, u.key.max_bundle_size_bytes, u.key.default_expiry_days], [1200, 50 * GIB, 21]);
      assert.deepEqual(u.totals, { bundle_count: 2, total_bytes: 12, total_files: 3 });
      assert.equal((await call(srv, 'DELETE', `/api/v1/my/bundles/${b1.short_code}`, { headers: bearer(key) })).status, 200);
      assert.deepEqual((await usage()).totals, { bundle_count: 1, total_bytes: 9, total_files: 2 });
    });

    test('DELETE /api/v1/my/bundles/{code}: own bundle only; then it is gone everywhere', async () => {
      const [key, otherKey] = [await mintKey(srv), await mintKey(srv)];
      const mine = await uploaded(srv, [{ name: 'a', data: 'a' }, { name: 'b', data: 'b' }], { key });
      const theirs = await uploaded(srv, [{ name: 't', data: 't' }], { key: otherKey });
      const del = (code: string, headers: Record<string, string> = bearer(key)) => call(srv, 'DELETE', `/api/v1/my/bundles/${code}`, { headers });
      assertError(await del(mine.short_code, bearer(otherKey)), 404, 'another key');
      assertError(await del(theirs.short_code), 404, 'another key\'s bundle');
      assertError(await del(pub.short_code), 404, 'an anonymous bundle');
      assertError(await del('Zz9Q0'), 404, 'unknown code');
      assertError(await del(mine.short_code, {}), 401, 'no key');
      assertError(await del(mine.short_code, bearer(UNKNOWN_KEY)), 401, 'invalid key');
      for (const code of [mine.short_code, theirs.short_code, pub.short_code]) assert.equal((await get(`/api/v1/bundle/${code}`)).status, 200);

      const storage = (await srv.sql`select storage_key from files where bundle_id = (select id from bundles where short_code = ${mine.short_code})`).map(
        (r) => r.storage_key as string,
      );
      const r = await del(mine.short_code);
      assert.equal(r.status, 200, r.text);
      assert.deepEqual(r.json, { success: true, deleted_short_code: mine.short_code });
      assertError(await get(`/api/v1/bundle/${mine.short_code}`), 404, 'bundle info after delete');
      assertError(await get(`/api/v1/bundle/${mine.short_code}/status`), 404, 'status after delete');
      for (const f of mine.files) assertError(await get(f.download_url, { headers: bearer(key) }), 404, 'download after delete');
      assert.deepEqual((await get('/api/v1/my/bundles', { headers: bearer(key) })).json.bundles, []);
      assertError(await del(mine.short_code), 404, 'second delete');
      const onDisk = new Set(storedPaths(srv.dataDir).files.map((p) => path.basename(p)));
      assert.deepEqual(storage.filter((k) => onDisk.has(k)), [], 'the files are removed from disk');
    });

    test('16 concurrent keyed uploads all succeed', async () => {
      const key = await mintKey(srv, 'power');
      const results = await Promise.all(Array.from({ length: 16 }, (_, i) => upload(srv, [{ name: `${i}.txt`, data: `${i}` }], { key })));
      assert.deepEqual(results.map((r) => r.status === 201 ? 201 : r.text), Array(16).fill(201));
    });
  });
}
