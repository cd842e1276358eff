import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { backends, startServer, storedPaths, type TestServer } from './helpers/server.ts';
import { assertError, GIB, isolateIds, mintKey } from './access-util.ts';
import { bearer, call, upload, type Json, type Res } from './helpers/http.ts';
import { waitFor } from './helpers/wait.ts';
import { serverWithMailSink, type MailSink } from './helpers/smtp.ts';
import { tusCall, tusMeta, tusPatch, uploadPath } from './helpers/tus.ts';

for (const backend of backends()) {
  describe(`upload requests (${backend})`, () => {
    let srv: TestServer;
    let key: string;
    before(async () => {
      srv = await startServer(backend);
      await isolateIds(srv);
      key = await mintKey(srv, 'starter');
    });
    after(() => srv?.close());

    const create = (body: unknown, k: string | null = key): Promise<Res> =>
      call(srv, 'POST', '/api/v1/my/requests', {
        headers: { 'content-type': 'application/json', ...(k ? bearer(k) : {}) },
        body: typeof body === 'string' ? body : JSON.stringify(body),
      });
    const send = (token: string, files: Array<{ name: string; data: string | Buffer }>): Promise<Res> =>
      upload(srv, files, { path: `/api/v1/requests/${token}/upload` });
    const requestCount = async (): Promise<number> => Number((await srv.sql`select count(*)::int as n from upload_requests`)[0]!.n);
    const fileCount = async (): Promise<number> => Number((await srv.sql`select count(*)::int as n from files`)[0]!.n);

    test('create under a key: token, link, expiry; anonymous 401', async () => {
      assertError(await create({}, null), 401, 'anonymous');
      const r = await create({ label: 'Tax documents', max_files: 3, max_bytes: 1000, expires_in_days: 2 });
      assert.equal(r.status, 201, r.text);
      assert.match(r.json.request_token, /^[A-Za-z0-9_-]{43}$/);
      assert.equal(r.json.request_url, `/r/${r.json.request_token}`);
      assert.ok(Math.abs(Date.parse(r.json.expires_at) - Date.now() - 2 * 86_400_000) < 60_000);
      const stored = await srv.sql`select token_hash from upload_requests`;
      assert.ok(stored.every((row) => !Buffer.from(row.token_hash as Uint8Array).toString('latin1').includes(r.json.request_token)));
      const d = await create({});
      assert.equal(d.status, 201, 'every field is optional');
      assert.equal(d.json.max_bytes, 5 * GIB, 'the plan cap by default');
    });

    test('bad limits: 400 naming the field, nothing created', async () => {
      const before = await requestCount();
      const cases: Array<[unknown, string]> = [
        [{ max_bytes: -1 }, 'max_bytes'], [{ max_bytes: 0 }, 'max_bytes'], [{ max_bytes: 5 * GIB + 1 }, 'max_bytes'],
        [{ max_bytes: '100' }, 'max_bytes'], [{ max_files: 0 }, 'max_files'], [{ max_files: 10_001 }, 'max_files'],
        [{ max_files: 1.5 }, 'max_files'], [{ expires_in_days: 0 }, 'expires_in_days'], [{ expires_in_days: 8 }, 'expires_in_days'],
        [{ expires_in_days: -3 }, 'expires_in_days'], [{ label: 'x'.repeat(201) }, 'label'], [{ label: 7 }, 'label'],
        ['not json', 'JSON'], ['[1]', 'JSON'],
      ];
      for (const [body, field] of cases) {
        const r = await create(body);
        assertError(r, 400, JSON.stringify(body));
        assert.ok(r.json.error.includes(field), `${r.json.error} names ${field}`);
      }
      assert.equal(await requestCount(), before);
    });

    test('an upload through the link lands in the key\'s locked bundle; the uploader sees only what it sent', async () => {
      const { request_token: token } = (await create({ label: 'Photos please', max_files: 5, max_bytes: 10_000 })).json;
      const page = await call(srv, 'GET', `/r/${token}`);
      assert.equal(page.status, 200);
      assert.ok(page.text.includes('Photos please'));
      assert.match(String(page.headers['cache-control']), /no-store/);
      const r = await send(token, [{ name: 'a.txt', data: 'alpha' }, { name: 'b.txt', data: 'bravo!' }]);
      assert.equal(r.status, 200, r.text);
      assert.deepEqual(r.json, { success: true, files: [{ name: 'a.txt', size: 5 }, { name: 'b.txt', size: 6 }] });
      const again = await send(token, [{ name: 'c.txt', data: 'charlie' }]);
      assert.equal(again.status, 200);
      // The owner lists its requests and finds the files in /my/bundles.
      const list = await call(srv, 'GET', '/api/v1/my/requests', { headers: bearer(key) });
      const mine = list.json.requests.find((q: Json) => q.token_prefix === token.slice(0, 8));
      assert.equal(mine.label, 'Photos please');
      assert.equal(mine.file_count, 3);
      assert.equal(mine.is_open, true);
      const bundles = (await call(srv, 'GET', '/api/v1/my/bundles', { headers: bearer(key) })).json.bundles;
      const b = bundles.find((x: Json) => x.short_code === mine.short_code);
      assert.deepEqual(b.files.map((f: Json) => f.name), ['a.txt', 'b.txt', 'c.txt']);
      assert.equal(b.password_protected, true);
      // Anyone else, the uploader included, can open none of them.
      for (const f of b.files) {
        assert.equal((await call(srv, 'GET', `/api/v1/download/${f.id}`)).status, 404);
        assert.equal((await call(srv, 'GET', `/d/${f.id}`)).status, 404);
        const own = await call(srv, 'GET', `/api/v1/download/${f.id}`, { headers: bearer(key) });
        assert.equal(own.status, 200);
      }
      assert.deepEqual((await call(srv, 'GET', `/api/v1/bundle/${mine.short_code}`)).json.files, []);
      assert.equal((await call(srv, 'GET', `/zip/${mine.short_code}`)).status, 404);
    });

    test('past the request\'s byte and file limits: 400, nothing kept', async () => {
      const { request_token: token } = (await create({ max_files: 2, max_bytes: 100 })).json;
      const files = await fileCount();
      const stored = storedPaths(srv.dataDir).files.length;
      assertError(await send(token, [{ name: 'big.bin', data: Buffer.alloc(101) }]), 400, 'bytes');
      assertError(await send(token, [{ name: '1', data: '1' }, { name: '2', data: '2' }, { name: '3', data: '3' }]), 400, 'files');
      assert.equal((await send(token, [{ name: '1', data: 'x'.repeat(60) }])).status, 200);
      assertError(await send(token, [{ name: '2', data: 'x'.repeat(41) }]), 400, 'bytes over what is left');
      assert.equal((await send(token, [{ name: '2', data: 'x'.repeat(40) }])).status, 200);
      const r = await send(token, [{ name: '3', data: '' }]);
      assertError(r, 400, 'a third file');
      assert.match(r.json.error, /at most 2 files/);
      assert.equal(await fileCount(), files + 2);
      assert.equal(storedPaths(srv.dataDir).files.length, stored + 2);
      assert.equal(storedPaths(srv.dataDir).parts.length, 0);
    });

    test('an expired, closed or unknown request: 404 on the upload and the page', async () => {
      const expired = (await create({})).json.request_token;
      await srv.sql`update upload_requests set expires_at = now() - interval '1 second' where prefix = ${expired.slice(0, 8)}`;
      const closed = (await create({})).json.request_token;
      assertError(await call(srv, 'DELETE', `/api/v1/my/requests/${closed}`, { headers: bearer(await mintKey(srv)) }), 404, 'another key');
      const del = await call(srv, 'DELETE', `/api/v1/my/requests/${closed}`, { headers: bearer(key) });
      assert.equal(del.status, 200, del.text);
      assertError(await call(srv, 'DELETE', `/api/v1/my/requests/${closed}`, { headers: bearer(key) }), 404, 'closed twice');
      const unknown = 'A'.repeat(43);
      for (const t of [expired, closed, unknown, 'short', '..%2F..']) {
        assertError(await send(t, [{ name: 'a', data: 'a' }]), 404, t);
        assert.equal((await call(srv, 'GET', `/r/${t}`)).status, 404, t);
      }
      const list = (await call(srv, 'GET', '/api/v1/my/requests', { headers: bearer(key) })).json.requests;
      assert.equal(list.find((q: Json) => q.token_prefix === closed.slice(0, 8)).is_open, false);
    });

    test('tus with metadata request_token: into the request, within its limits, telling nothing of the bundle', async () => {
      const { request_token: token } = (await create({ max_files: 2, max_bytes: 100 })).json;
      const meta = (name: string): string => tusMeta({ filename: name, request_token: token });
      assert.equal((await tusCall(srv, 'POST', '/api/v1/tus/', { 'upload-length': '101', 'upload-metadata': meta('big') })).status, 413);
      assert.equal((await tusCall(srv, 'POST', '/api/v1/tus/', { 'upload-length': '1', 'upload-metadata': tusMeta({ filename: 'x', request_token: 'A'.repeat(43) }) })).status, 404);
      const created = await tusCall(srv, 'POST', '/api/v1/tus/', { 'upload-length': '5', 'upload-metadata': meta('t1.txt') });
      assert.equal(created.status, 201, created.body);
      const loc = uploadPath(created.headers.location!);
      const head = await tusCall(srv, 'HEAD', loc);
      assert.ok(!(head.headers['upload-metadata'] ?? '').includes(Buffer.from(token).toString('base64')), 'the token is not echoed');
      const done = await tusPatch(srv, loc, 0, Buffer.from('hello'));
      assert.equal(done.status, 204, done.body);
      for (const h of ['sluice-short-code', 'sluice-share-url', 'sluice-file-id', 'sluice-upload-token']) assert.equal(done.headers[h], undefined, h);
      assert.equal((await send(token, [{ name: 't2.txt', data: 'x' }])).status, 200);
      const third = await tusCall(srv, 'POST', '/api/v1/tus/', { 'upload-length': '1', 'upload-metadata': meta('t3.txt') });
      assert.equal(third.status, 400, 'the request has its two files');
      const list = (await call(srv, 'GET', '/api/v1/my/requests', { headers: bearer(key) })).json.requests;
      assert.equal(list.find((q: Json) => q.token_prefix === token.slice(0, 8)).file_count, 2);
    });

    test('a revoked key\'s requests take nothing', async () => {
      const k = await mintKey(srv);
      const { request_token: token } = (await create({}, k)).json;
      assert.equal((await srv.cli(['keys', 'revoke', k.slice(0, 12)])).code, 0);
      assertError(await send(token, [{ name: 'a', data: 'a' }]), 404);
    });
  });
}

for (const backend of backends()) {
  describe(`upload requests: the key's e-mail hears of arrivals (${backend})`, () => {
    let srv: TestServer;
    let smtp: MailSink;
    serverWithMailSink(backend, (s, m) => ([srv, smtp] = [s, m]));

    test('one mail for what arrived, naming the files and nothing of the sender; later arrivals wait for the window', async () => {
      const key = await mintKey(srv, 'starter', ['--email', 'owner@example.com']);
      const r = await call(srv, 'POST', '/api/v1/my/requests', {
        headers: { 'content-type': 'application/json', ...bearer(key) },
        body: JSON.stringify({ label: 'Invoices' }),
      });
      const token = r.json.request_token as string;
      const sent = await upload(srv, [{ name: 'inv-1.pdf', data: 'one' }, { name: 'inv-2.pdf', data: 'two' }], { path: `/api/v1/requests/${token}/upload` });
      assert.equal(sent.status, 200, sent.text);
      const [m] = await smtp.waitFor((x) => /owner@example\.com/.test(JSON.stringify(x.to)));
      assert.match(m!.subject ?? '', /2 files arrived through "Invoices"/);
      assert.match(m!.text ?? '', /inv-1\.pdf[\s\S]*inv-2\.pdf/);
      assert.ok(!(m!.text ?? '').includes(token), 'the link is not in the mail');
      assert.ok(!/127\.0\.0\.1/.test(`${m!.text}${m!.html}`), 'no sender address');
      assert.equal((await upload(srv, [{ name: 'inv-3.pdf', data: '3' }], { path: `/api/v1/requests/${token}/upload` })).status, 200);
      await waitFor('recorded', async () => (await srv.sql`select count(*)::int as n from request_events`)[0]!.n === 1);
      assert.equal(smtp.mails.filter((x) => /owner@example\.com/.test(JSON.stringify(x.to))).length, 1, 'within the window: waiting');
    });
  });
}
