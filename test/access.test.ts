import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { backends, startServer, type TestServer } from './helpers/server.ts';
import { assertError, DAY_MS, from, fromSqlUtc, isolateIds, mintKey, randomLoopback, SQL_TS, verifyAccess } from './access-util.ts';
import { bearer, call, uploaded, type Json, type NewFile, type Opts, type Res } from './helpers/http.ts';
import { multipart } from './helpers/multipart.ts';
import { waitFor } from './helpers/wait.ts';

const PW_KEYED = 'correct horse battery';
const PW_ANON = 'open sesame 42';
// The smallest valid PNG header is enough: the server types pic.png by its extension.
const PNG = Buffer.from('89504e470d0a1a0a0000000d49484452', 'hex');

for (const backend of backends()) {
  describe(`access: password gate, verify-access, /my/bundles (${backend})`, () => {
    let srv: TestServer;
    let owner: string;
    let other: string;
    let pub: Json;
    let keyedPw: Json;
    let anonPw: Json;
    const contents = new Map<number, string>();

    async function make(files: NewFile[], o: Parameters<typeof uploaded>[2] = {}): Promise<Json> {
      const b = await uploaded(srv, files, o);
      b.files.forEach((f: Json, i: number) => contents.set(f.id, String(files[i]!.data)));
      return b;
    }

    /** What the caller sees of a bundle: 'full' (files listed and downloadable) or 'hidden' ([] and 404). */
    async function gate(b: Json, o: Opts = {}, query = ''): Promise<'full' | 'hidden'> {
      const info = await call(srv, 'GET', `/api/v1/bundle/${b.short_code}${query}`, o);
      assert.equal(info.status, 200, info.text);
      assert.equal(info.json.success, true);
      // What it lists depends on the credential: no cache on the way may keep it for somebody else.
      assert.equal(info.headers['cache-control'], 'no-store');
      assert.equal(info.json.file_count, b.files.length);
      const downloads = await Promise.all(b.files.map((f: Json) => call(srv, 'GET', `${f.download_url}${query}`, o)));
      if (info.json.files.length === 0) {
        for (const d of downloads) assertError(d, 404, 'download of a hidden file');
        return 'hidden';
      }
      const listed = b.files.map(({ id, name, size, mime_type, download_url }: Json) => ({ id, name, size, mime_type, download_url }));
      assert.deepEqual(info.json.files, listed);
      downloads.forEach((d, i) => {
        assert.equal(d.status, 200, d.text);
        assert.equal(d.text, contents.get(b.files[i].id));
      });
      return 'full';
    }
    const token = (t: string): Opts => ({ headers: { 'x-access-token': t } });
    const q = (t: string): string => `?t=${encodeURIComponent(t)}`;
    async function tokenFor(b: Json, password: string, agent?: ReturnType<typeof from>): Promise<string> {
      const r = await verifyAccess(srv, b.short_code, password, { agent });
      assert.equal(r.status, 200, r.text);
      return r.json.access_token;
    }

    before(async () => {
      srv = await startServer(backend, { HOST: '0.0.0.0' });
      await isolateIds(srv);
      owner = await mintKey(srv);
      other = await mintKey(srv);
      pub = await make([{ name: 'pub.txt', data: 'public bytes' }]);
      keyedPw = await make([{ name: 'k1.txt', data: 'keyed one' }, { name: 'k2.txt', data: 'keyed two' }], {
        key: owner,
        fields: { access_password: PW_KEYED },
      });
      anonPw = await make([{ name: 'a.txt', data: 'anonymous secret' }], { fields: { access_password: PW_ANON } });
    });
    after(() => srv?.close());

    test('public bundle: anonymous, owner key, another key and an access token all get the files', async () => {
      assert.equal(await gate(pub), 'full');
      assert.equal(await gate(pub, { headers: bearer(owner) }), 'full');
      assert.equal(await gate(pub, { headers: bearer(other) }), 'full');
      // A token (valid, but for another bundle) does not take anything away from a public bundle.
      const t = await tokenFor(keyedPw, PW_KEYED);
      assert.equal(await gate(pub, token(t)), 'full');
      assert.equal(await gate(pub, {}, q(t)), 'full');
    });

    test('password bundle uploaded with a key: only the owner key or an access token opens it', async () => {
      assert.equal(await gate(keyedPw), 'hidden');
      assert.equal(await gate(keyedPw, { headers: bearer(other) }), 'hidden');
      assert.equal(await gate(keyedPw, { headers: bearer(owner) }), 'full');
      const t = await tokenFor(keyedPw, PW_KEYED);
      assert.equal(await gate(keyedPw, token(t)), 'full');
      assert.equal(await gate(keyedPw, {}, q(t)), 'full');
    });

    test('password bundle uploaded without a key: only an access token opens it', async () => {
      assert.equal(await gate(anonPw), 'hidden');
      assert.equal(await gate(anonPw, { headers: bearer(owner) }), 'hidden');
      const t = await tokenFor(anonPw, PW_ANON);
      assert.equal(await gate(anonPw, token(t)), 'full');
      assert.equal(await gate(anonPw, {}, q(t)), 'full');
    });

    test('verify-access takes a JSON, an urlencoded or a multipart form body', async () => {
      for (const as of ['json', 'form', 'multipart'] as const) {
        const r = await verifyAccess(srv, anonPw.short_code, PW_ANON, { as });
        assert.equal(r.status, 200, r.text);
        assert.equal(r.json.success, true);
        assert.equal(typeof r.json.access_token, 'string');
        assert.ok(r.json.access_token.length >= 16);
        assert.ok(!r.text.includes(PW_ANON));
        assert.equal(await gate(anonPw, token(r.json.access_token)), 'full');
      }
    });

    test('verify-access errors: wrong password 403, unknown code 404, missing fields and bad codes 400', async () => {
      const agent = from(randomLoopback()); // its own password-attempt bucket
      assertError(await verifyAccess(srv, anonPw.short_code, 'wrong', { agent }), 403, 'wrong password');
      assertError(await verifyAccess(srv, anonPw.short_code, 'wrong', { agent, form: true }), 403, 'wrong password (form)');
      assertError(await verifyAccess(srv, anonPw.short_code, 'wrong', { agent, as: 'multipart' }), 403, 'wrong password (multipart)');
      assertError(await verifyAccess(srv, 'Zz9Q0', PW_ANON), 404, 'unknown code');
      const gone = await make([{ name: 'e.txt', data: 'e' }], { fields: { access_password: PW_ANON } });
      await srv.sql`update bundles set expires_at = now() - interval '1 second' where short_code = ${gone.short_code}`;
      assertError(await verifyAccess(srv, gone.short_code, PW_ANON), 404, 'expired code');
      const post = (body: string, type = 'application/json') =>
        call(srv, 'POST', '/api/verify-access', { headers: { 'content-type': type }, body });
      for (const body of ['{}', JSON.stringify({ short_code: anonPw.short_code }), JSON.stringify({ password: PW_ANON }), '{', '[]']) {
        assertError(await post(body), 400, `body ${body}`);
      }
      assertError(await post(`short_code=${anonPw.short_code}`, 'application/x-www-form-urlencoded'), 400, 'form without password');
      const mp = 'multipart/form-data; boundary=b';
      const part = (name: string, value: string): string => `--b\r\nContent-Disposition: form-data; name="${name}"\r\n\r\n${value}\r\n`;
      assertError(await post(`${part('short_code', anonPw.short_code)}--b--\r\n`, mp), 400, 'multipart without password');
      assertError(await post(part('short_code', anonPw.short_code), mp), 400, 'multipart without its closing boundary');
      assertError(await post('x', 'multipart/form-data'), 400, 'multipart without a boundary');
      assertError(await post('<a/>', 'text/xml'), 400, 'another type');
      for (const code of ['abcd', 'abcdef', 'ab-de', 'ab de']) assertError(await verifyAccess(srv, code, PW_ANON), 400, `code ${code}`);
      await agent.close();
    });

    test('verify-access refuses a browser form post from another site, before it counts as an attempt', async () => {
      const agent = from(randomLoopback());
      const form = new URLSearchParams({ short_code: anonPw.short_code, password: 'wrong' }).toString();
      const post = (headers: Record<string, string>, body = form) =>
        call(srv, 'POST', '/api/verify-access', { headers: { 'content-type': 'application/x-www-form-urlencoded', ...headers }, body, agent });
      for (const headers of [
        { 'sec-fetch-site': 'cross-site' } as Record<string, string>,
        { 'sec-fetch-site': 'same-site' },
        { origin: 'https://evil.example' },
        { origin: 'null' },
      ]) {
        for (let i = 0; i < 11; i++) {
          const r = await post(headers);
          assertError(r, 403, JSON.stringify(headers));
          assert.equal(r.json.code, 'CROSS_SITE');
        }
      }
      // None of those 44 counted: the attempt window is empty, and our own pages' posts go through.
      const own = new URLSearchParams({ short_code: anonPw.short_code, password: PW_ANON }).toString();
      assert.equal((await post({ 'sec-fetch-site': 'same-origin' }, own)).status, 200);
      assert.equal((await post({ origin: srv.url }, own)).status, 200);
      assert.equal((await post({}, own)).status, 200, 'a script or curl sends neither header');
      await agent.close();
    });

    test('uploads, appends and tus creations refuse a browser post from another site; scripts and our pages go through', async () => {
      const b = await uploaded(srv, [{ name: 'base.txt', data: 'base' }]);
      const { body, contentType } = multipart([{ name: 'files[]', filename: 'x.txt', data: Buffer.from('from elsewhere') }]);
      const count = async (): Promise<number[]> => [
        (await srv.sql<{ n: number }[]>`select count(*)::int as n from bundles`)[0]!.n,
        (await srv.sql<{ n: number }[]>`select count(*)::int as n from files`)[0]!.n,
        (await srv.sql<{ n: number }[]>`select count(*)::int as n from tus_uploads`)[0]!.n,
      ];
      const before = await count();
      const attempts = (headers: Record<string, string>): Array<Promise<Res>> => [
        call(srv, 'POST', '/api/v1/upload', { headers: { 'content-type': contentType, ...headers }, body }),
        call(srv, 'POST', `/api/v1/upload/${b.upload_token}`, { headers: { 'content-type': contentType, ...headers }, body }),
        call(srv, 'POST', '/api/v1/tus/', { headers: { 'tus-resumable': '1.0.0', 'upload-length': '5', ...headers } }),
      ];
      for (const headers of [
        { 'sec-fetch-site': 'cross-site' } as Record<string, string>,
        { 'sec-fetch-site': 'same-site' },
        { origin: 'https://evil.example' },
        { origin: 'null' },
      ]) {
        for (const r of await Promise.all(attempts(headers))) {
          assertError(r, 403, JSON.stringify(headers));
          assert.equal(r.json.code, 'CROSS_SITE');
        }
      }
      assert.deepEqual(await count(), before, 'nothing of the refused posts was kept');
      for (const headers of [{ 'sec-fetch-site': 'same-origin' } as Record<string, string>, { origin: srv.url }, {}]) {
        const [up, append, tus] = await Promise.all(attempts(headers));
        assert.equal(up!.status, 201, `${JSON.stringify(headers)}: ${up!.text}`);
        assert.equal(append!.status, 200, `${JSON.stringify(headers)}: ${append!.text}`);
        assert.equal(tus!.status, 201, `${JSON.stringify(headers)}: ${tus!.text}`);
      }
    });

    test('10 wrong passwords for one bundle from one IP: 429 there; other IPs and bundles are unaffected', async () => {
      const [a, b] = [from(randomLoopback()), from(randomLoopback())];
      for (let i = 1; i <= 10; i++) assertError(await verifyAccess(srv, keyedPw.short_code, `guess ${i}`, { agent: a }), 403, `attempt ${i}`);
      const locked = await verifyAccess(srv, keyedPw.short_code, 'guess 11', { agent: a });
      assertError(locked, 429, 'attempt 11');
      assertError(await verifyAccess(srv, keyedPw.short_code, PW_KEYED, { agent: a }), 429, 'right password while locked');
      assertError(await verifyAccess(srv, keyedPw.short_code, 'wrong', { agent: b }), 403, 'another IP, wrong');
      assert.equal((await verifyAccess(srv, keyedPw.short_code, PW_KEYED, { agent: b })).status, 200);
      assert.equal((await verifyAccess(srv, anonPw.short_code, PW_ANON, { agent: a })).status, 200, 'another bundle');
      await Promise.all([a.close(), b.close()]);
      // CONTRACT: "A 429 also carries Retry-After (seconds)".
      assert.ok(Number(locked.headers['retry-after']) > 0, `Retry-After on the lockout 429: ${locked.headers['retry-after']}`);
    });

    test('wrong passwords sent all at once are still only 10 tries; right ones do not fill the window', async () => {
      const [a, b] = [from(randomLoopback()), from(randomLoopback())];
      const all = await Promise.all(Array.from({ length: 30 }, (_, i) => verifyAccess(srv, anonPw.short_code, `burst ${i}`, { agent: a })));
      const statuses = all.map((r) => r.status).sort();
      assert.deepEqual(statuses, [...Array(10).fill(403), ...Array(20).fill(429)], `statuses: ${statuses.join(',')}`);
      // From another IP: twelve right passwords, then still ten wrong ones before the lockout.
      for (let i = 0; i < 12; i++) assert.equal((await verifyAccess(srv, anonPw.short_code, PW_ANON, { agent: b })).status, 200, `right ${i}`);
      for (let i = 1; i <= 10; i++) assertError(await verifyAccess(srv, anonPw.short_code, `guess ${i}`, { agent: b }), 403, `wrong ${i}`);
      assertError(await verifyAccess(srv, anonPw.short_code, 'guess 11', { agent: b }), 429, 'wrong 11');
      await Promise.all([a.close(), b.close()]);
    });

    test('an access token opens only its bundle, only from its IP, only unaltered', async () => {
      const agent = from(randomLoopback());
      const local = await tokenFor(keyedPw, PW_KEYED); // requested from 127.0.0.1
      assert.equal(await gate(keyedPw, { ...token(local), agent }), 'hidden');
      assert.equal(await gate(keyedPw, { agent }, q(local)), 'hidden');
      const remote = await tokenFor(keyedPw, PW_KEYED, agent);
      assert.equal(await gate(keyedPw, { ...token(remote), agent }), 'full');
      assert.equal(await gate(keyedPw, token(remote)), 'hidden');
      assert.equal(await gate(anonPw, token(local)), 'hidden', 'token of another bundle');

      // Tampering anywhere: first, middle and both ends of the token, and a lengthened one.
      const flip = (s: string, i: number): string => s.slice(0, i) + (s[i] === 'A' ? 'B' : 'A') + s.slice(i + 1);
      for (const bad of [flip(local, 0), flip(local, local.length >> 1), flip(local, local.length - 8), `${local}A`, `x${local}`, '']) {
        assert.equal(await gate(keyedPw, token(bad)), 'hidden', `tampered ${bad}`);
      }
      // `<expiry>.<mac>`: the bundle's (sequential) id is not shown, and a moved expiry fails.
      const [keyed] = await srv.sql<{ id: string }[]>`select id::text from bundles where short_code = ${keyedPw.short_code}`;
      const parts = local.split('.');
      assert.equal(parts.length, 2, local);
      const [exp, mac] = parts as [string, string];
      assert.ok(Number(exp) * 1000 > Date.now() && Number(exp) * 1000 <= Date.now() + 3600_000, exp);
      assert.notEqual(exp, keyed!.id);
      assert.equal(await gate(keyedPw, token(`${Number(exp) + 3600}.${mac}`)), 'hidden');
      assert.equal(await gate(keyedPw, token(`${keyed!.id}.${local}`)), 'hidden', 'the old layout, id first');
      await agent.close();
    });

    test('the password is never returned and is stored only hashed', async () => {
      const seen = [
        (await call(srv, 'GET', `/api/v1/bundle/${keyedPw.short_code}`, { headers: bearer(owner) })).text,
        (await call(srv, 'GET', `/api/v1/bundle/${keyedPw.short_code}/status`)).text,
        (await call(srv, 'GET', '/api/v1/my/bundles', { headers: bearer(owner) })).text,
        (await verifyAccess(srv, keyedPw.short_code, PW_KEYED)).text,
        JSON.stringify(keyedPw),
      ];
      for (const text of seen) {
        assert.ok(!text.includes(PW_KEYED), text);
        assert.ok(!/access_password"/.test(text), text);
      }
      const [row] = await srv.sql`select * from bundles where short_code = ${keyedPw.short_code}`;
      assert.ok(!JSON.stringify(row).includes(PW_KEYED));
    });

    test('/my/bundles: the key\'s own bundles, newest first, every field', async () => {
      const key = await mintKey(srv, 'power');
      const b1 = await make([{ name: 'pic.png', data: PNG }, { name: 'notes.txt', data: 'hello', type: 'text/plain' }], {
        key,
        fields: { description: 'first bundle' },
      });
      const b2 = await make([{ name: 'pic.png', data: PNG }], { key, fields: { access_password: 'pw2' } });
      await make([{ name: 'x.txt', data: 'not mine' }], { key: other });
      const list = async (agent?: ReturnType<typeof from>): Promise<Json[]> => {
        const r = await call(srv, 'GET', '/api/v1/my/bundles', { headers: bearer(key), agent });
        assert.equal(r.status, 200, r.text);
        assert.equal(r.json.success, true);
        return r.json.bundles;
      };
      const bundles = await list();
      assert.deepEqual(bundles.map((b) => b.short_code), [b2.short_code, b1.short_code]);
      const agent = from(randomLoopback());
      // A signed thumbnail_url carries its own expiry (now + one hour, to the second): the two listings
      // may straddle a second, so the signature is compared apart from the rest.
      const unsigned = (bs: Json[]): Json[] =>
        JSON.parse(JSON.stringify(bs).replace(/([?&])exp=\d+&sig=[A-Za-z0-9_-]{43}/g, '$1exp=&sig='));
      assert.deepEqual(unsigned(await list(agent)), unsigned(bundles), 'every holder of the key sees the same list');
      await agent.close();

      const fields = ['created_at', 'description', 'expires_at', 'file_count', 'files', 'is_encrypted', 'password_protected', 'share_url',
        'short_code', 'total_size_bytes', 'view_count'];
      const [m2, m1] = bundles as [Json, Json];
      for (const [m, b] of [[m1, b1], [m2, b2]] as const) {
        assert.deepEqual(Object.keys(m).sort(), fields);
        assert.equal(m.share_url, `/${b.short_code}`);
        assert.match(m.created_at, SQL_TS);
        assert.ok(Math.abs(fromSqlUtc(m.created_at) - Date.now()) < 60_000);
        assert.match(m.expires_at, SQL_TS);
        assert.ok(Math.abs(fromSqlUtc(m.expires_at) - fromSqlUtc(m.created_at) - 21 * DAY_MS) <= 2000, 'power: 21 days');
        assert.equal(m.file_count, b.files.length);
        assert.equal(m.total_size_bytes, b.files.reduce((n: number, f: Json) => n + f.size, 0));
        assert.equal(m.view_count, 0);
      }
      assert.deepEqual([m1.is_encrypted, m1.password_protected, m1.description], [false, false, 'first bundle']);
      assert.deepEqual([m2.is_encrypted, m2.password_protected, m2.description ?? ''], [false, true, '']);

      const [pic1, notes] = m1.files as [Json, Json];
      assert.deepEqual(notes, { id: b1.files[1].id, name: 'notes.txt', size: 5, mime_type: 'text/plain', download_count: 0, download_url: `/api/v1/download/${b1.files[1].id}` });
      assert.deepEqual(pic1, { id: b1.files[0].id, name: 'pic.png', size: PNG.length, mime_type: 'image/png', download_count: 0,
        download_url: `/api/v1/download/${b1.files[0].id}`, thumbnail_url: `/d/${b1.files[0].id}?preview=1` });
      const pic2 = m2.files[0];
      const thumb = new URL(pic2.thumbnail_url, 'http://x');
      assert.equal(thumb.pathname, `/d/${pic2.id}`);
      assert.deepEqual([...thumb.searchParams.keys()].sort(), ['exp', 'preview', 'sig']);
      assert.equal(thumb.searchParams.get('preview'), '1');
      const exp = Number(thumb.searchParams.get('exp')) * 1000;
      assert.ok(Math.abs(exp - (Date.now() + 3_600_000)) < 60_000, `exp ${exp} is one hour from now`);
      assert.match(thumb.searchParams.get('sig')!, /^[A-Za-z0-9_-]{16,}$/);

      // download_count counts complete downloads.
      const d = await call(srv, 'GET', notes.download_url);
      assert.equal(d.text, 'hello');
      await call(srv, 'GET', pic2.download_url, { headers: bearer(key) });
      await waitFor('download counts', async () => {
        const [n2, n1] = await list();
        return n1.files[1].download_count === 1 && n2.files[0].download_count === 1;
      });
      const after = await list();
      assert.equal(after[1].files[0].download_count, 0, 'pic.png of b1 was not downloaded');

      // An end-to-end encrypted bundle's files are ciphertext to the server: flagged, and no thumbnail.
      const b3 = await make([{ name: 'pic.png', data: PNG }], { key, fields: { encrypted: '1' } });
      const [m3] = await list();
      assert.equal(m3.short_code, b3.short_code);
      assert.equal(m3.is_encrypted, true);
      assert.equal(m3.files[0].thumbnail_url, undefined);
    });

    test('/my/bundles lists at most 100 bundles', { timeout: 120_000 }, async () => {
      const key = await mintKey(srv, 'power');
      const codes: string[] = [];
      // 101 tiny uploads one after another (a few seconds); concurrency is keys.test.ts's business.
      for (let i = 0; i < 101; i++) codes.push((await uploaded(srv, [{ name: `${i}.txt`, data: 'x' }], { key })).short_code);
      const r = await call(srv, 'GET', '/api/v1/my/bundles', { headers: bearer(key) });
      assert.equal(r.status, 200);
      assert.equal(r.json.bundles.length, 100);
      const listed = new Set(r.json.bundles.map((b: Json) => b.short_code));
      const missing = codes.filter((c) => !listed.has(c));
      assert.equal(missing.length, 1);
      assert.equal(missing[0], codes[0], 'the oldest is left out');
      const times = r.json.bundles.map((b: Json) => fromSqlUtc(b.created_at));
      assert.deepEqual(times, [...times].sort((x, y) => y - x), 'newest first');
    });
  });
}
