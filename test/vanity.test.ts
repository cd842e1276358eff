import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { backends, startServer, type TestServer } from './helpers/server.ts';
import { tusCall, tusMeta, tusPatch, uploadPath } from './helpers/tus.ts';
import { assertError, isolateIds, mintKey } from './access-util.ts';
import { bearer, call, upload, uploaded, type Json, type Res } from './helpers/http.ts';

const FILE = [{ name: 'hello.txt', data: 'hello vanity' }];

for (const backend of backends()) {
  describe(`vanity URLs (${backend})`, () => {
    let srv: TestServer;
    let premium: string;
    let other: string;
    let starter: string;
    before(async () => {
      srv = await startServer(backend);
      await isolateIds(srv);
      premium = await mintKey(srv, 'premium');
      other = await mintKey(srv, 'premium');
      starter = await mintKey(srv, 'starter');
    });
    after(() => srv?.close());

    /** Ends a freed name's 30-day hold, as if the days had passed. */
    const endHold = async (name: string): Promise<void> => {
      await srv.sql`update vanity_holds set held_until = now() - interval '1 second' where name = ${name.toLowerCase()}`;
    };
    const bundleCount = async (): Promise<number> => Number((await srv.sql`select count(*)::int as n from bundles`)[0]!.n);
    const put = (code: string, body: unknown, key = premium): Promise<Res> =>
      call(srv, 'PUT', `/api/v1/my/bundles/${code}/vanity`, {
        headers: { 'content-type': 'application/json', ...bearer(key) },
        body: typeof body === 'string' ? body : JSON.stringify(body),
      });
    const named = (vanity: string, key = premium, fields: Record<string, string> = {}): Promise<Res> =>
      upload(srv, FILE, { key, fields: { vanity, ...fields } });

    test('a Premium upload with vanity: /<vanity>, /zip/<vanity>, any case, vanity_url in the answer and /my/bundles', async () => {
      const r = await named('Team-Photos_2026');
      assert.equal(r.status, 201, r.text);
      assert.equal(r.json.vanity_url, '/Team-Photos_2026');
      const code = r.json.short_code as string;
      for (const p of ['/Team-Photos_2026', '/team-photos_2026']) {
        const page = await call(srv, 'GET', p);
        assert.equal(page.status, 200, p);
        assert.ok(page.text.includes(`/og/${code}.png`), 'the link card is the bundle\'s');
        assert.ok(page.text.includes('hello.txt'));
      }
      const zip = await call(srv, 'GET', '/zip/TEAM-photos_2026');
      assert.equal(zip.status, 200);
      assert.equal(zip.headers['content-type'], 'application/zip');
      assert.ok(zip.text.includes('hello vanity'));
      assert.equal((await call(srv, 'HEAD', '/Team-Photos_2026')).status, 200);
      const mine = await call(srv, 'GET', '/api/v1/my/bundles', { headers: bearer(premium) });
      const entry = mine.json.bundles.find((b: Json) => b.short_code === code);
      assert.equal(entry.vanity_url, '/Team-Photos_2026');
      // API paths keep the 5-character code.
      assertError(await call(srv, 'GET', '/api/v1/bundle/Team-Photos_2026'), 400);
      // An unknown name is the ordinary miss.
      assert.equal((await call(srv, 'GET', '/no-such-name')).status, 404);
      assert.equal((await call(srv, 'GET', '/zip/no-such-name')).status, 404);
    });

    test('the password gate applies on the vanity path as on the code', async () => {
      const r = await named('locked-box', premium, { access_password: 'pw123456' });
      assert.equal(r.status, 201, r.text);
      const page = await call(srv, 'GET', '/locked-box');
      assert.equal(page.status, 200);
      assert.ok(!page.text.includes('hello.txt'), 'a locked bundle lists no names');
      assert.equal((await call(srv, 'GET', '/zip/locked-box')).status, 404);
      assert.equal((await call(srv, 'GET', '/zip/locked-box', { headers: bearer(premium) })).status, 200, 'the owner opens it');
    });

    test('the share page names the bundle\'s code in Sluice-Short-Code: vanity and plain links, GET and HEAD, the password gate too', async () => {
      const plain = await uploaded(srv, FILE);
      const named1 = await named('header-name');
      const locked = await named('header-locked', premium, { access_password: 'pw123456' });
      for (const [p, code] of [[`/${plain.short_code}`, plain.short_code], ['/Header-Name', named1.json.short_code],
        [`/${named1.json.short_code}`, named1.json.short_code], ['/header-locked', locked.json.short_code]]) {
        for (const method of ['GET', 'HEAD']) {
          const page = await call(srv, method, p);
          assert.equal(page.status, 200, `${method} ${p}`);
          assert.equal(page.headers['sluice-short-code'], code, `${method} ${p}`);
        }
      }
      assert.ok(!(await call(srv, 'GET', '/header-locked')).text.includes('hello.txt'), 'the gate, not the list');
      // A miss names nothing.
      const miss = await call(srv, 'GET', '/no-such-header');
      assert.equal(miss.status, 404);
      assert.equal(miss.headers['sluice-short-code'], undefined);
    });

    test('names differing only in case collide: 409, nothing kept', async () => {
      assert.equal((await named('CaseName')).status, 201);
      const before = await bundleCount();
      const r = await named('casename', other);
      assertError(r, 409, 'taken');
      assert.match(r.json.error, /vanity/);
      assert.equal(await bundleCount(), before);
    });

    test('two uploads racing for one name: exactly one wins', async () => {
      const before = await bundleCount();
      const rs = await Promise.all(Array.from({ length: 6 }, (_, i) => named(i % 2 ? 'race-name' : 'RACE-name', i % 2 ? premium : other)));
      assert.deepEqual(rs.map((r) => r.status).sort(), [201, 409, 409, 409, 409, 409], rs.map((r) => r.text).join('\n'));
      assert.equal(await bundleCount(), before + 1);
      const files = Number((await srv.sql`select count(*)::int as n from files`)[0]!.n);
      assert.equal(files, before + 1, 'the losers kept no file rows');
    });

    test('anonymous: 401; a key of another plan: 403; a rejected key: 401', async () => {
      assertError(await named('anon-name', ''), 401, 'anonymous');
      assertError(await named('starter-name', starter), 403, 'starter');
      assertError(await named('bad-key-name', `sk_${'A'.repeat(43)}`), 401, 'unknown key');
      const pub = await uploaded(srv, FILE, { key: starter });
      assertError(await put(pub.short_code, { vanity: 'later-name' }, starter), 403, 'starter PUT');
      assertError(await call(srv, 'PUT', `/api/v1/my/bundles/${pub.short_code}/vanity`, { body: '{"vanity":"x-name"}' }), 401, 'anon PUT');
    });

    test('bad names: 400 naming the field, nothing created', async () => {
      const before = await bundleCount();
      const bad = [
        'a/b', '..', '../etc', 'xy', 'a'.repeat(49), 'аdmin' /* Cyrillic а */, 'ｔeam', 'café', '-dash', '_under', 'sp ace', 'dot.name',
        // reserved: fixed words and first segments of served routes, in any case
        'ADMIN', 'Login', 'static', 'api', 'zip', 'ZIP', 'og', 'healthz', 'Metrics', 'readyz', 'unsubscribe', 'api-keys', 'favicon.ico', 'robots.txt',
        // a short code's shape
        'hello', 'AB12c',
      ];
      for (const name of bad) {
        const r = await named(name);
        assertError(r, 400, name);
        assert.match(r.json.error, /vanity/, name);
      }
      assert.equal(await bundleCount(), before);
    });

    test('PUT names a bundle afterwards, renames it, DELETE frees the name; others cannot take or touch it', async () => {
      const a = await uploaded(srv, FILE, { key: premium });
      const b = await uploaded(srv, FILE, { key: other });
      let r = await put(a.short_code, { vanity: 'later-name' });
      assert.equal(r.status, 200, r.text);
      assert.equal(r.json.vanity_url, '/later-name');
      assert.equal((await call(srv, 'GET', '/later-name')).status, 200);
      assert.equal((await put(a.short_code, { vanity: 'later-name' })).status, 200, 'the same name again');
      assertError(await put(b.short_code, { vanity: 'LATER-NAME' }, other), 409, 'taken');
      assertError(await put(a.short_code, { vanity: 'later-name' }, other), 404, 'not the owner');
      assertError(await put(a.short_code, { vanity: 'a/b' }), 400, 'bad name');
      assertError(await put(a.short_code, 'not json'), 400, 'not json');
      assertError(await put(a.short_code, { name: 'x' }), 400, 'no vanity');
      r = await put(a.short_code, { vanity: 'renamed' });
      assert.equal(r.status, 200);
      assert.equal((await call(srv, 'GET', '/later-name')).status, 404, 'the old name serves nothing');
      // A freed name stays its key's for 30 days: another key gets 409, its own key takes it back.
      r = await put(b.short_code, { vanity: 'later-name' }, other);
      assertError(r, 409, 'held');
      assert.match(r.json.error, /30 days/);
      assert.equal((await put(a.short_code, { vanity: 'later-name' })).status, 200, 'its own key takes it back');
      assertError(await call(srv, 'DELETE', `/api/v1/my/bundles/${a.short_code}/vanity`, { headers: bearer(other) }), 404, 'not the owner');
      r = await call(srv, 'DELETE', `/api/v1/my/bundles/${a.short_code}/vanity`, { headers: bearer(premium) });
      assert.equal(r.status, 200, r.text);
      assert.equal((await call(srv, 'GET', '/later-name')).status, 404);
      assertError(await put(b.short_code, { vanity: 'later-name' }, other), 409, 'held after DELETE too');
      await endHold('later-name');
      assert.equal((await put(b.short_code, { vanity: 'later-name' }, other)).status, 200, 'free once the hold is over');
    });

    test('a deleted or expired bundle frees its name: at once for its key, after 30 days for others', async () => {
      const a = (await named('short-lived')).json;
      assert.equal((await call(srv, 'DELETE', `/api/v1/my/bundles/${a.short_code}`, { headers: bearer(premium) })).status, 200);
      assert.equal((await call(srv, 'GET', '/short-lived')).status, 404);
      assertError(await named('short-lived', other), 409, 'held for its key');
      await endHold('short-lived');
      const b = await named('short-lived', other);
      assert.equal(b.status, 201, b.text);
      // Expired but not yet swept: the row still holds the name until someone claims it.
      await srv.sql`update bundles set expires_at = now() - interval '1 minute' where short_code = ${b.json.short_code}`;
      assert.equal((await call(srv, 'GET', '/short-lived')).status, 404);
      assert.equal((await call(srv, 'GET', '/zip/short-lived')).status, 404);
      assertError(await named('Short-Lived'), 409, 'held for the key of the expired bundle');
      const again = await named('Short-Lived', other);
      assert.equal(again.status, 201, again.text);
      assert.equal((await call(srv, 'GET', '/short-lived')).status, 200);
      // The 30 days count from when the name stopped serving: the expiry, not the sweep.
      await srv.sql`update bundles set expires_at = now() - interval '31 days' where short_code = ${again.json.short_code}`;
      const c = await named('short-LIVED');
      assert.equal(c.status, 201, c.text);
    });

    test('tus: vanity in the metadata, checked at creation, named on completion', async () => {
      const auth = bearer(premium);
      assert.equal((await tusCall(srv, 'POST', '/api/v1/tus/', { 'upload-length': '3', 'upload-metadata': tusMeta({ filename: 'a.txt', vanity: 'ADMIN' }), ...auth })).status, 400);
      assert.equal((await tusCall(srv, 'POST', '/api/v1/tus/', { 'upload-length': '3', 'upload-metadata': tusMeta({ filename: 'a.txt', vanity: 'tus-name' }) })).status, 401);
      assert.equal((await tusCall(srv, 'POST', '/api/v1/tus/', { 'upload-length': '3', 'upload-metadata': tusMeta({ filename: 'a.txt', vanity: 'tus-name' }), ...bearer(starter) })).status, 403);
      assert.equal((await tusCall(srv, 'POST', '/api/v1/tus/', { 'upload-length': '3', 'upload-metadata': tusMeta({ filename: 'a.txt', vanity: 'casename' }), ...auth })).status, 409);
      const created = await tusCall(srv, 'POST', '/api/v1/tus/', { 'upload-length': '3', 'upload-metadata': tusMeta({ filename: 'a.txt', vanity: 'tus-name' }), ...auth });
      assert.equal(created.status, 201, created.body);
      const done = await tusPatch(srv, uploadPath(created.headers.location!), 0, Buffer.from('abc'), auth);
      assert.equal(done.status, 204, done.body);
      assert.equal(done.headers['sluice-vanity-url'], '/tus-name');
      const page = await call(srv, 'GET', '/TUS-name');
      assert.equal(page.status, 200);
      assert.ok(page.text.includes(done.headers['sluice-short-code']!));
    });
  });
}
